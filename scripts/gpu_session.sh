#!/usr/bin/env bash
# The GPU steps of issues 18 and 32 in one batch, for a session that is lent a GPU (the
# `device` tool). The GPU machine has no Rust toolchain and reaches no package index: `build`
# runs here and packs the binaries, `run` runs there on the packed binaries.
#
#   scripts/gpu_session.sh build [--base REV]
#       here: release binaries with --features cuda, stripped, packed into
#       target/gpu-session/bins.tar.xz (carry target/gpu-session). With --base REV, the
#       recur-bench of revision REV too (built from a worktree of it), for a same-run A/B.
#   scripts/gpu_session.sh wheels
#       here: TorchRL 0.14.1 and the packages the device's python lacks, as wheels in .whl/
#       (carry .whl; the device tool's README says how wheels travel)
#   scripts/gpu_session.sh run [STEP...]
#       there (carry target/gpu-session, and .whl for the torchrl step): everything under $OUT
#
# `run` does, in order, each step logged to $OUT/<step>.log and never stopping at a failure:
#   1. probe: nvidia-smi, the CUDA driver and NVRTC libraries cubecl loads at run time;
#   2. tests: rnn/tests/cube_kernels_cuda.rs (reference vectors per precision with their
#      tolerances, kernels == CPU fused backend, row tiles with tails, sequential ==
#      recurrent, boundary isolation);
#   3. rnn: `recur-bench rnn --device cuda` rows of the fused kernel, input 64, hidden 256,
#      T 128, GRU and LSTM, fwd and fwdbwd, per batch, precision and reset probability
#      ($OUT/rnn-fused.jsonl); with a --base build, the base's rows beside them, interleaved
#      per batch and precision ($OUT/rnn-base.jsonl);
#   4. torchrl: scripts/torchrl_rnn_bench.py on the same grid (TorchRL's triton and pad =
#      cuDNN, at the same matmul precision), each batch x precision bounded by
#      GPU_TORCHRL_TIMEOUT seconds, then the comparison with step 3's rows when they are in
#      $OUT ($OUT/vs-torchrl.txt). Needs the carried .whl and no binaries: after a --base
#      build run it in a call of its own (`run torchrl`, carry .whl only), since the
#      repository, both builds' binaries and the wheels are over one call's 64 MiB. Triton compiles and autotunes per shape: on an H200
#      (2026-11-26) not one GRU row finished in 75 s, so give it minutes (GPU_PS=0.03,
#      GPU_CELLS=gru, GPU_BATCHES=2048 for the row issue 32 is about);
#   5. splitk: the backward's split-K weight gradients swept: `recur-bench rnn` fwdbwd rows at
#      B GPU_SPLIT_BATCH (2048) per precision, RECUR_CUBE_SPLIT_K in GPU_SPLITS ("1 4 16 64";
#      1 is no split, the rnn step's rows are the default rule), each row tagged with its
#      "split_k" ($OUT/rnn-splitk.jsonl);
#   6. ptx: registers, stack frame and spills of every kernel cubecl compiled for a GRU and an
#      LSTM fwdbwd at B 128 (one-row kernels) and B 2048 (tiles), from cubecl's PTX cache
#      through ptxas -v (scripts/ptx_report.py; $OUT/ptx.jsonl);
#   7. profile: device time per kernel of a GRU and an LSTM fwd+bwd at B GPU_SPLIT_BATCH, per
#      precision (cubecl's profiling logger, every launch timed; 1 warm-up and 3 timed calls),
#      summed by kernel name over the timed calls (the calls' launch period found in the log;
#      the warm-up, with its NVRTC compilation, and the bench's setup launches left out) and
#      divided by 3 ($OUT/profile.txt, the raw logs beside it): where the backward's time goes;
#   8. train: MaskedCartPole-v1 (configs/masked_cartpole.toml, seed 0) with run.device =
#      "cuda:0", then its last checkpoint resumed on the CPU for 10k more frames;
#   9. e2e: the same config trained twice in one call, the learner on cuda:0 and then on the
#      CPU, the same actors on the machine's cores, one JSON line per run in $OUT/e2e.jsonl
#      (frames, wall seconds, frames/s, the greedy evaluation, the learner's profile): the
#      default MaskedCartPole-v1 config (50k frames, 2 actors, greedy evaluation of 100 episodes
#      on seeds the run never trained on) and a learner-heavy one (GPU_E2E_HEAVY: LSTM-1024 on
#      popgym-RepeatPreviousMedium-v0, nproc-2 actors of 16 envs, 8192 frames an update in
#      minibatches of 64 slices of 32 steps, each run bounded by GPU_E2E_SECONDS, 120), and
#      an image one (GPU_E2E_CASES=pixel: PixelCartPole-v1's 64x64 frames through the `nature`
#      encoder and an LSTM-256, the same actors and update shape as the heavy case).
# Every log and row file goes into $OUT/results.tar.gz at the end (the device tool brings back
# at most 8 files). Knobs (environment): GPU_BATCHES ("128 2048"), GPU_PRECISIONS ("ieee tf32"), GPU_PS
# ("0,0.03,0.1"), GPU_CELLS ("gru,lstm"), GPU_PASSES ("fwd,fwdbwd"), GPU_ITERS (10),
# GPU_WARMUP (2), GPU_TORCHRL_TIMEOUT (400), GPU_TORCHRL_BACKENDS ("triton,pad"), GPU_SPLITS
# ("1 4 16 64"), GPU_SPLIT_BATCH (2048), GPU_E2E_CASES ("masked_cartpole heavy pixel"),
# GPU_E2E_DEVICES ("cuda:0 cpu"), GPU_E2E_SECONDS (120), GPU_E2E_EXTRA (more --set arguments).
# The device tool allows 10 minutes per command: run the steps separately if needed
# (`scripts/gpu_session.sh run probe tests rnn`, `... run torchrl`, `... run train`).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PACK="$ROOT/target/gpu-session"
say() { printf 'gpu_session: %s\n' "$*" >&2; }

BINS=(recur-learner recur-actor recur-bench)

build() {
    set -e
    local base=""
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --base) base="$2"; shift 2 ;;
            *) say "unknown build option $1"; exit 2 ;;
        esac
    done
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
    rm -rf "$PACK/bin" && mkdir -p "$PACK/bin"
    if [[ -n "$base" ]]; then
        local wt="$PACK/base-worktree"
        git worktree remove --force "$wt" 2>/dev/null || rm -rf "$wt"
        git worktree add --detach "$wt" "$base"
        # cargo hashes workspace members by their path inside the workspace, so the base and
        # this tree share artifacts: fresh mtimes make each build recompile its own sources.
        # (A base from before issue 56 has no rnn/ and no bench/: recur-bench was recur-learner's.)
        local base_pkg=recur-bench
        [[ -f "$wt/bench/Cargo.toml" ]] || base_pkg=recur-learner
        find "$wt/common" "$wt/learner" "$wt/actor" $([[ -d "$wt/rnn" ]] && echo "$wt/rnn") \
            $([[ -d "$wt/bench" ]] && echo "$wt/bench") -name '*.rs' -exec touch {} +
        (cd "$wt" && cargo build --release --locked --features cuda -p "$base_pkg" \
            --bin recur-bench)
        cp "$CARGO_TARGET_DIR/release/recur-bench" "$PACK/bin/recur-bench-base"
        # The build below links its own binary there again, from its own sources.
        rm -f "$CARGO_TARGET_DIR/release/recur-bench"
        find rnn common learner actor bench -name '*.rs' -exec touch {} +
        git rev-parse --short "$base" >"$PACK/bin/base-rev"
        git worktree remove --force "$wt"
    fi
    cargo build --release --locked --features cuda -p recur-learner -p recur-actor -p recur-bench \
        --bin recur-learner --bin recur-actor --bin recur-bench
    local test_bin
    test_bin=$(cargo test --release --locked --features cuda -p recur-rnn \
        --test cube_kernels_cuda --no-run --message-format=json \
        | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "cube_kernels_cuda":
        print(m["executable"])')
    for b in "${BINS[@]}"; do cp "$CARGO_TARGET_DIR/release/$b" "$PACK/bin/"; done
    cp "$test_bin" "$PACK/bin/cube_kernels_cuda"
    git rev-parse --short HEAD >"$PACK/bin/rev"
    git diff --quiet HEAD -- rnn common learner actor bench || echo "+uncommitted" >>"$PACK/bin/rev"
    strip "$PACK/bin/"recur-* "$PACK/bin/cube_kernels_cuda"
    XZ_OPT=-6 tar -C "$PACK" -cJf "$PACK/bins.tar.xz" bin
    rm -rf "$PACK/bin"
    ls -l "$PACK/bins.tar.xz"
    say "carry target/gpu-session (the device tool's limit is 64 MiB in all)"
}

wheels() {
    set -e
    mkdir -p .whl
    local plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp "${plat[@]}" -d .whl \
        torchrl==0.14.1 'tensordict>=0.14.3,<0.15' pyvers hoptorch importlib_metadata orjson
    ls -l .whl
}

step() { # name, command...
    local name="$1"; shift
    say "== $name"
    local start=$SECONDS
    "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    say "$name: exit $rc in $((SECONDS - start)) s (log $OUT/$name.log)"
    tail -n 25 "$OUT/$name.log" >&2
    return 0
}

probe() {
    cat "$BIN/rev" "$BIN/base-rev" 2>/dev/null
    nvidia-smi || echo "no nvidia-smi"
    ldconfig -p | grep -E 'libcuda\.so|libnvrtc' || echo "libcuda/libnvrtc not in ldconfig"
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
}

tests() {
    RECUR_REFERENCE_DIR="${RECUR_REFERENCE_DIR:-$ROOT/tests/reference}" \
        "$BIN/cube_kernels_cuda" --test-threads 1
}

grid() {
    echo --cells "${GPU_CELLS:-gru,lstm}" --passes "${GPU_PASSES:-fwd,fwdbwd}" --steps 128 \
        --reset-probs "${GPU_PS:-0,0.03,0.1}" --input 64 --hidden 256 --layers 1 \
        --iters "${GPU_ITERS:-10}" --warmup "${GPU_WARMUP:-2}"
}

rnn() {
    local batch precision bench
    # shellcheck disable=SC2207
    local g=($(grid))
    # The base's rows (with a --base build) right before this tree's, per batch and precision.
    local benches=("recur-bench:rnn-fused")
    [[ -x "$BIN/recur-bench-base" ]] && benches=("recur-bench-base:rnn-base" "${benches[@]}")
    for batch in ${GPU_BATCHES:-128 2048}; do
        for precision in ${GPU_PRECISIONS:-ieee tf32}; do
            for bench in "${benches[@]}"; do
                "$BIN/${bench%%:*}" rnn --device cuda --backends fused \
                    --matmul-precision "$precision" --recompute none --batch "$batch" "${g[@]}" \
                    | tee -a "$OUT/${bench#*:}.jsonl"
            done
        done
    done
}

splitk() {
    local precision split
    # shellcheck disable=SC2207
    local g=($(GPU_PASSES=fwdbwd grid))
    for precision in ${GPU_PRECISIONS:-ieee tf32}; do
        for split in ${GPU_SPLITS:-1 4 16 64}; do
            RECUR_CUBE_SPLIT_K="$split" "$BIN/recur-bench" rnn --device cuda --backends fused \
                --matmul-precision "$precision" --recompute none \
                --batch "${GPU_SPLIT_BATCH:-2048}" "${g[@]}" \
                | sed "s/^{/{\"split_k\":$split,/" | tee -a "$OUT/rnn-splitk.jsonl"
        done
    done
}

ptx() {
    local dir=/tmp/ptx-run batch cell
    rm -rf "$dir" && mkdir -p "$dir"
    # cubecl reads cubecl.toml from the working directory; a `cache` keeps every kernel's PTX.
    printf '[compilation]\ncache = { file = "%s/cache" }\n' "$dir" >"$dir/cubecl.toml"
    for batch in 128 2048; do
        for cell in gru lstm; do
            (cd "$dir" && "$BIN/recur-bench" rnn --device cuda --backends fused --cells "$cell" \
                --passes fwdbwd --steps 8 --reset-probs 0.03 --input 64 --hidden 256 \
                --layers 1 --iters 1 --warmup 0 --batch "$batch" >/dev/null) || return 1
        done
    done
    python3 scripts/ptx_report.py "$dir/cache" "$dir/ptx" | tee "$OUT/ptx.jsonl"
}

profile() {
    local dir=/tmp/profile-run cell precision batch="${GPU_SPLIT_BATCH:-2048}" iters=3 warmup=1
    for cell in gru lstm; do
        # shellcheck disable=SC2207
        local g=($(GPU_CELLS=$cell GPU_PASSES=fwdbwd GPU_PS=0.03 GPU_ITERS=$iters \
            GPU_WARMUP=$warmup grid))
        for precision in ${GPU_PRECISIONS:-ieee tf32}; do
            rm -rf "$dir" && mkdir -p "$dir"
            # cubecl reads cubecl.toml from the working directory: one line per launch, timed.
            printf '[profiling.logger]\nlevel = "basic"\nfile = "%s/launches.log"\n' "$dir" \
                >"$dir/cubecl.toml"
            (cd "$dir" && "$BIN/recur-bench" rnn --device cuda --backends fused \
                --matmul-precision "$precision" --recompute none --batch "$batch" "${g[@]}" \
                >/dev/null) || return 1
            # The logger's raw lines, in case its format is not the one parsed below.
            head -c 200000 "$dir/launches.log" >"$OUT/profile-$cell-$precision.log"
            echo "== $cell $precision, B $batch, grid shape, p 0.03, fwd+bwd: device ms per call by kernel"
            # The warm-up call includes NVRTC compilation: only the last `iters` calls count.
            python3 - "$dir/launches.log" $((iters + warmup)) $iters <<'PY' | tee -a "$OUT/profile.txt"
import collections, re, sys
unit = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}
seq = []
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    m = re.match(r"\|\s*([0-9.]+)(ns|µs|us|ms|s)\s*\|\s*([^|]+?)\s*\|", line)
    if m:
        seq.append((m.group(3), float(m.group(1)) * unit[m.group(2)]))
# The calls repeat one sequence of launches after the bench's setup: its length is the
# shortest period that the last `calls` blocks share.
calls, timed = int(sys.argv[2]), int(sys.argv[3])
names = [n for n, _ in seq]
period = next((p for p in range(1, len(names) // calls + 1)
               if all(names[len(names) - (k + 1) * p:len(names) - k * p] == names[-p:]
                      for k in range(calls))), None)
if period is None:
    sys.exit(f"{sys.argv[1]}: no {calls} calls of one launch sequence found")
total, count = collections.Counter(), collections.Counter()
for name, ms in seq[len(seq) - period * timed:]:
    total[name] += ms / timed
    count[name] += 1 / timed
whole = sum(total.values())
for name, ms in total.most_common():
    print(f"{ms:9.3f} ms {count[name]:4.0f} launches {100 * ms / whole:5.1f}%  {name}")
print(f"{whole:9.3f} ms per call in all, {period} launches")
PY
        done
    done
}

torchrl() {
    if [[ -d .whl ]]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl || return 1
        export PYTHONPATH=/tmp/site
    fi
    python3 -c 'import torch, tensordict, torchrl, hoptorch' || {
        echo "SKIPPED: python3 cannot import torch, tensordict, torchrl and hoptorch (carry .whl:" \
            "scripts/gpu_session.sh wheels)"
        return 1
    }
    local batch precision
    for batch in ${GPU_BATCHES:-128 2048}; do
        for precision in ${GPU_PRECISIONS:-ieee tf32}; do
            timeout "${GPU_TORCHRL_TIMEOUT:-400}" python3 scripts/torchrl_rnn_bench.py \
                --device cuda:0 --omp-wait-policy unset \
                --backends "${GPU_TORCHRL_BACKENDS:-triton,pad}" \
                --matmul-precision "$precision" --batch "$batch" $(grid) \
                | tee -a "$OUT/rnn-torchrl.jsonl"
            echo "torchrl batch $batch $precision: exit ${PIPESTATUS[0]}"
        done
    done
    if [[ -s "$OUT/rnn-fused.jsonl" ]]; then
        python3 scripts/torchrl_rnn_bench.py --compare "$OUT/rnn-fused.jsonl" \
            "$OUT/rnn-torchrl.jsonl" >"$OUT/vs-torchrl.jsonl" 2>"$OUT/vs-torchrl.txt"
        cat "$OUT/vs-torchrl.txt"
    else
        echo "compare here: scripts/torchrl_rnn_bench.py --compare rnn-fused.jsonl rnn-torchrl.jsonl"
    fi
}

train() {
    # Run directories stay out of $OUT: the device tool brings back at most 8 files.
    local config=/tmp/masked_cartpole_cuda.toml
    sed 's/^device = "cpu".*/device = "cuda:0"/' configs/masked_cartpole.toml >"$config"
    grep -q '^device = "cuda:0"' "$config" || { echo "could not set run.device"; return 1; }
    export PATH="$BIN:$PATH"
    local run=/tmp/run-cuda
    "$BIN/recur-learner" train --config "$config" --seed 0 --run-dir "$run" --quiet
    "$BIN/recur-learner" eval --checkpoint "$run" --episodes 100
    # The same run's checkpoint resumed on the CPU for 10k more frames.
    local cpu_run=/tmp/run-cuda-resumed-on-cpu
    cp -r "$run" "$cpu_run"
    sed -i 's/^device = "cuda:0"/device = "cpu"/' "$cpu_run/config.toml"
    "$BIN/recur-learner" train --resume "$cpu_run" --frames 60000 --quiet
    "$BIN/recur-learner" eval --checkpoint "$cpu_run" --episodes 100
}

e2e_case() { # case device: trains one run, prints its JSON line
    local case="$1" device="$2" run="/tmp/e2e-$1-${2/:/}" actors=$(( $(nproc) > 4 ? $(nproc) - 2 : 2 ))
    rm -rf "$run"
    local args=(--seed 0 --run-dir "$run" --quiet --set "run.device=$device")
    # The learner-heavy cases' shared shape: the actors, a bounded run, 8,192 frames an update
    # in minibatches of 64 slices of 32 steps.
    local heavy_shape=(--max-seconds "${GPU_E2E_SECONDS:-120}" --frames 100000000
        --set "run.actors=$actors" --set collector.envs_per_actor=16 --set collector.steps=32
        --set ppo.frames_per_update=8192 --set ppo.slice_len=32 --set ppo.num_slices=64
        --set ppo.epochs=4 --set eval.every_frames=1000000000)
    case "$case" in
        masked_cartpole) args+=(--config configs/masked_cartpole.toml) ;;
        heavy) args+=(--config configs/popgym/RepeatPreviousMedium.toml "${heavy_shape[@]}"
            --set policy.cell=lstm --set policy.hidden_size=1024) ;;
        # Issue 57's image case: PixelCartPole-v1 (64x64 uint8 frames) through the `nature`
        # encoder and an LSTM-256.
        pixel) args+=(--config configs/pixel_cartpole.toml "${heavy_shape[@]}"
            --set 'policy.encoder.cnn="nature"' --set policy.hidden_size=256) ;;
        # GPU_E2E_EXTRA: more `--set` arguments for every case (e.g. a bigger minibatch)
        *) echo "unknown e2e case $case (masked_cartpole, heavy, pixel)"; return 1 ;;
    esac
    # shellcheck disable=SC2206
    args+=(${GPU_E2E_EXTRA:-})
    local t0=$SECONDS
    "$BIN/recur-learner" train "${args[@]}" || { echo "e2e $case $device: train failed"; return 1; }
    local train_s=$((SECONDS - t0)) eval_json=/dev/null
    if [[ "$case" == masked_cartpole ]]; then
        eval_json="$run/eval100.json"
        "$BIN/recur-learner" eval --checkpoint "$run" --episodes 100 | tee "$run/eval100.txt"
        grep -o '{.*}' "$run/eval100.txt" | tail -n 1 >"$eval_json" || true
    fi
    python3 - "$case" "$device" "$run/summary.json" "$train_s" "$eval_json" <<'PY' | tee -a "$OUT/e2e.jsonl"
import json, sys
case, device, path, train_s, eval_path = sys.argv[1:6]
s = json.load(open(path))
row = {"bench": "e2e", "case": case, "device": device, "process_s": float(train_s)}
for k in ("env", "frames", "updates", "seconds", "final_eval_return", "best_eval_return",
          "eval_frames_to_target", "eval_seconds_to_target", "final_mean_return", "profile",
          "profile_calls"):
    if k in s:
        row[k] = s[k]
row["frames_per_s"] = s["frames"] / s["seconds"]
try:
    row["eval100"] = json.load(open(eval_path))
except Exception:
    pass
print(json.dumps(row))
PY
}

e2e() {
    export PATH="$BIN:$PATH"
    local case device
    nproc; grep -m1 'model name' /proc/cpuinfo; nvidia-smi --query-gpu=name --format=csv,noheader
    for case in ${GPU_E2E_CASES:-masked_cartpole heavy pixel}; do
        for device in ${GPU_E2E_DEVICES:-cuda:0 cpu}; do
            e2e_case "$case" "$device"
        done
    done
}

run() {
    OUT="${OUT:?run on the device machine: \$OUT is where results go}"
    BIN="$PACK/bin"
    local steps=("$@")
    [[ ${#steps[@]} -gt 0 ]] || steps=(probe tests rnn splitk ptx profile torchrl train e2e)
    # torchrl alone needs no binaries: with a --base build, the repository (~29 MB), the
    # binaries (~29 MB) and the wheels (~4 MB) are over what one call carries, so it runs in a
    # call of its own (without a base, ~22 MB of binaries, all three fit).
    if [[ ! -x "$BIN/recur-bench" && " ${steps[*]} " != " torchrl " ]]; then
        tar -C "$PACK" -xJf "$PACK/bins.tar.xz" || { say "no $PACK/bins.tar.xz: run build first and carry target/gpu-session"; exit 1; }
    fi
    for s in "${steps[@]}"; do
        case "$s" in
            probe|tests|rnn|splitk|ptx|profile|torchrl|train|e2e) step "$s" "$s" ;;
            *) say "unknown step $s (probe, tests, rnn, splitk, ptx, profile, torchrl, train, e2e)"; exit 2 ;;
        esac
    done
    (cd "$OUT" && tar -czf /tmp/results.tar.gz -- * && rm -f -- * && mv /tmp/results.tar.gz .)
}

case "${1:-}" in
    build) shift; build "$@" ;;
    wheels) shift; wheels "$@" ;;
    run) shift; run "$@" ;;
    *) sed -n '2,63p' "$0"; exit 2 ;;
esac

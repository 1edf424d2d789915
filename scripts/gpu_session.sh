#!/usr/bin/env bash
# The GPU steps of issue 18 in one batch, for a session that is lent a GPU (the `device` tool).
# The GPU machine has no Rust toolchain: `build` runs here and packs the binaries, `run` runs
# there on the packed binaries.
#
#   scripts/gpu_session.sh build     # here: release binaries with --features cuda, stripped,
#                                    # packed into target/gpu-session/bins.tar.gz (carry it)
#   scripts/gpu_session.sh run       # on the GPU machine (device tool, carry
#                                    # target/gpu-session): writes everything under $OUT
#
# `run` does, in order, each step logged to $OUT/<step>.log and never stopping at a failure:
#   1. probe: nvidia-smi, the CUDA driver and NVRTC libraries cubecl loads at run time;
#   2. cube_kernels_cuda: the kernel tests (reference vectors per precision with their
#      tolerances, kernels == CPU fused backend, sequential == recurrent, boundary isolation);
#   3. rnn: `recur-bench rnn --device cuda` rows for fused (each precision), scan and pad,
#      input 64, hidden 256, T 128, p 0/0.03/0.1, batch 128 and 2048, GRU and LSTM, fwd and
#      fwdbwd (JSON lines in $OUT/rnn-*.jsonl);
#   4. torchrl: scripts/bench_vs_torchrl.sh --torchrl-device cuda on the same grid (TorchRL's
#      triton, pad = cuDNN, scan) when python3 can import torch and torchrl there (the GPU
#      machine reaches no package index; the step says so and is skipped otherwise);
#   5. train: MaskedCartPole-v1 (configs/masked_cartpole.toml, seed 0) with run.device =
#      "cuda:0", then its last checkpoint resumed on the CPU for 10k more frames.
# The device tool allows 10 minutes per command: run the steps separately if needed
# (`scripts/gpu_session.sh run probe tests rnn`, `... run torchrl`, `... run train`).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PACK="$ROOT/target/gpu-session"
say() { printf 'gpu_session: %s\n' "$*" >&2; }

build() {
    set -e
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
    cargo build --release --locked --features cuda -p recur-learner -p recur-actor \
        --bin recur-learner --bin recur-actor --bin recur-bench
    local test_bin
    test_bin=$(cargo test --release --locked --features cuda -p recur-common \
        --test cube_kernels_cuda --no-run --message-format=json \
        | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "cube_kernels_cuda":
        print(m["executable"])')
    rm -rf "$PACK/bin" && mkdir -p "$PACK/bin"
    cp "$CARGO_TARGET_DIR"/release/{recur-learner,recur-actor,recur-bench} "$PACK/bin/"
    cp "$test_bin" "$PACK/bin/cube_kernels_cuda"
    strip "$PACK/bin/"*
    tar -C "$PACK" -czf "$PACK/bins.tar.gz" bin
    rm -rf "$PACK/bin"
    ls -l "$PACK/bins.tar.gz"
    say "carry target/gpu-session (the device tool's limit is 64 MiB in all)"
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
    nvidia-smi || echo "no nvidia-smi"
    ldconfig -p | grep -E 'libcuda\.so|libnvrtc' || echo "libcuda/libnvrtc not in ldconfig"
    python3 -c 'import torch, tensordict, torchrl, hoptorch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "torchrl", torchrl.__version__)' \
        || echo "python3 cannot import torch and torchrl: the TorchRL step will be skipped"
}

tests() {
    RECUR_REFERENCE_DIR="${RECUR_REFERENCE_DIR:-$ROOT/tests/reference}" \
        "$BIN/cube_kernels_cuda" --test-threads 1
}

GRID=(--cells gru,lstm --passes fwd,fwdbwd --steps 128 --reset-probs 0,0.03,0.1
      --input 64 --hidden 256 --layers 1 --iters 10 --warmup 2)

rnn() {
    local batch precision
    for batch in 128 2048; do
        for precision in ieee tf32 bf16; do
            "$BIN/recur-bench" rnn --device cuda --backends fused --matmul-precision "$precision" \
                --recompute none,full --batch "$batch" "${GRID[@]}" | tee -a "$OUT/rnn-fused.jsonl"
        done
        "$BIN/recur-bench" rnn --device cuda --backends scan,pad --batch "$batch" "${GRID[@]}" \
            | tee -a "$OUT/rnn-scan-pad.jsonl"
    done
}

torchrl() {
    if ! python3 -c 'import torch, tensordict, torchrl, hoptorch' 2>/dev/null; then
        echo "SKIPPED: python3 cannot import torch, tensordict, torchrl and hoptorch here" \
            "(the GPU machine reaches no package index)"
        return 1
    fi
    # bench_vs_torchrl.sh runs TorchRL from a virtual environment: one over the system's.
    local venv=/tmp/recur-bench-venv batch
    [[ -x "$venv/bin/python" ]] || python3 -m venv --system-site-packages "$venv"
    for batch in 128 2048; do
        RECUR_BENCH="$BIN/recur-bench" RECUR_BENCH_VENV="$venv" \
            scripts/bench_vs_torchrl.sh --no-build --torchrl-device cuda \
            --torchrl-backends triton,pad,scan --backends fused,scan,pad \
            --recur-args '--device cuda' --batch "$batch" \
            --cells gru,lstm --passes fwd,fwdbwd --steps 128 --reset-probs 0,0.03,0.1 \
            --out "$OUT/vs-torchrl-b$batch.jsonl"
    done
}

train() {
    local config="$OUT/masked_cartpole_cuda.toml"
    sed 's/^device = "cpu".*/device = "cuda:0"/' configs/masked_cartpole.toml >"$config"
    grep -q '^device = "cuda:0"' "$config" || { echo "could not set run.device"; return 1; }
    export PATH="$BIN:$PATH"
    local run="$OUT/run-cuda"
    "$BIN/recur-learner" train --config "$config" --seed 0 --run-dir "$run" --quiet
    "$BIN/recur-learner" eval --checkpoint "$run" --episodes 100
    # The same run's checkpoint resumed on the CPU for 10k more frames.
    local cpu_run="$OUT/run-cuda-resumed-on-cpu"
    cp -r "$run" "$cpu_run"
    sed -i 's/^device = "cuda:0"/device = "cpu"/' "$cpu_run/config.toml"
    "$BIN/recur-learner" train --resume "$cpu_run" --frames 60000 --quiet
    "$BIN/recur-learner" eval --checkpoint "$cpu_run" --episodes 100
}

run() {
    OUT="${OUT:?run on the device machine: \$OUT is where results go}"
    BIN="$PACK/bin"
    if [[ ! -x "$BIN/recur-bench" ]]; then
        tar -C "$PACK" -xzf "$PACK/bins.tar.gz" || { say "no $PACK/bins.tar.gz: run build first and carry target/gpu-session"; exit 1; }
    fi
    local steps=("$@")
    [[ ${#steps[@]} -gt 0 ]] || steps=(probe tests rnn torchrl train)
    for s in "${steps[@]}"; do
        case "$s" in
            probe|tests|rnn|torchrl|train) step "$s" "$s" ;;
            *) say "unknown step $s (probe, tests, rnn, torchrl, train)"; exit 2 ;;
        esac
    done
}

case "${1:-}" in
    build) shift; build "$@" ;;
    run) shift; run "$@" ;;
    *) sed -n '2,25p' "$0"; exit 2 ;;
esac

#!/usr/bin/env bash
# recur vs TorchRL, recurrent-mode GRU/LSTM throughput on the same workload and thread count.
#
# Runs `recur-bench rnn`, then TorchRL's GRUModule/LSTMModule (scripts/torchrl_rnn_bench.py,
# in a virtual environment it creates or reuses), writes both sets of rows to one JSON-lines
# file and prints the rows, a table per (cell, pass, T, p) and the ratio recur/TorchRL per row.
# PyTorch's 1024^3 sgemm at the same thread count is timed right before and right after the
# recur run (`torch_sgemm` rows); the comparison gives each recur row's GFLOP/s as a share of
# the better of the two (`sgemm_peak_fraction`, the table's `%sgemm` columns).
# A developer tool, not part of CI. See docs/bench-vs-torchrl.md.
#
#   scripts/bench_vs_torchrl.sh --threads 2
#   scripts/bench_vs_torchrl.sh --quick --backends pad,scan
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY_BENCH="$ROOT/scripts/torchrl_rnn_bench.py"
VENV="${RECUR_BENCH_VENV:-$HOME/.cache/recur-bench-venv}"
TORCHRL_VERSION="0.14.1"
TORCHRL_WHEEL="${TORCHRL_WHEEL:-$ROOT/../shared/reference/torchrl-docs/torchrl-${TORCHRL_VERSION}-cp311-cp311-manylinux_2_28_x86_64.whl}"
TORCH_SPEC="${TORCH_SPEC:-torch}"

usage() {
    cat <<'EOF'
usage: scripts/bench_vs_torchrl.sh [OPTIONS]

Workload (passed to both recur-bench rnn and the TorchRL bench):
  --threads N            CPU threads of both [default: all cores]
  --cells LIST           gru,lstm
  --passes LIST          fwd,fwdbwd
  --steps LIST           64,128
  --reset-probs LIST     0,0.03,0.1
  --iters N              5        timed iterations per row (median reported)
  --warmup N             1
  --batch N              128
  --input N              64
  --hidden N             256
  --layers N             1
  --seed N               0
  --quick                T = 64, p in {0, 0.1}, 2 iterations, 1 warm-up

Per side:
  --backends LIST        recur backends (recur-bench's --backends) [default: recur-bench's]
  --torchrl-backends LIST  TorchRL recurrent_backend values [default: pad,scan on CPU]
  --torchrl-device DEV   cpu (default) or cuda: where TorchRL runs (cuda adds 'triton')
  --omp-wait-policy LIST OpenMP wait policies TorchRL runs under, one grid each, the faster
                         row counts [default: unset,passive]
  --recur-args 'ARGS'    extra arguments for recur-bench rnn (word-split)
  --torchrl-args 'ARGS'  extra arguments for scripts/torchrl_rnn_bench.py (word-split)
  --skip-recur           run only the TorchRL side (the comparison has no recur rows)
  --skip-torchrl         run only recur-bench (compared with nothing)

Output:
  --out FILE             JSON-lines file of both runs and the ratio lines
                         [default: benchmarks/results/bench-rnn-vs-torchrl-<threads>cores.jsonl]
  --no-build             use the built recur-bench as it is (default: cargo build
                         --release first; nothing to do when it is up to date)

Environment: RECUR_BENCH=path (a recur-bench binary, used as is), RECUR_BENCH_VENV
(default ~/.cache/recur-bench-venv), TORCHRL_WHEEL (a local torchrl wheel; otherwise
torchrl==0.14.1 from the package index), TORCH_SPEC (pip requirement for torch; default torch).
EOF
}

say() { printf 'bench_vs_torchrl: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 2; }

threads=""
out=""
build=1
skip_recur=0
skip_torchrl=0
status=0
common=()
recur_only=()
torchrl_only=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --threads) [[ $# -ge 2 ]] || die "$1 needs a value"; threads="$2"; shift 2 ;;
        --threads=*) threads="${1#*=}"; shift ;;
        --cells|--passes|--steps|--reset-probs|--iters|--warmup|--batch|--input|--hidden|--layers|--seed)
            [[ $# -ge 2 ]] || die "$1 needs a value"; common+=("$1" "$2"); shift 2 ;;
        --cells=*|--passes=*|--steps=*|--reset-probs=*|--iters=*|--warmup=*|--batch=*|--input=*|--hidden=*|--layers=*|--seed=*)
            common+=("$1"); shift ;;
        --quick) common+=("--quick"); shift ;;
        --backends) [[ $# -ge 2 ]] || die "$1 needs a value"; recur_only+=("--backends" "$2"); shift 2 ;;
        --backends=*) recur_only+=("$1"); shift ;;
        --torchrl-backends) [[ $# -ge 2 ]] || die "$1 needs a value"; torchrl_only+=("--backends" "$2"); shift 2 ;;
        --torchrl-backends=*) torchrl_only+=("--backends" "${1#*=}"); shift ;;
        --omp-wait-policy) [[ $# -ge 2 ]] || die "$1 needs a value"; torchrl_only+=("--omp-wait-policy" "$2"); shift 2 ;;
        --omp-wait-policy=*) torchrl_only+=("--omp-wait-policy" "${1#*=}"); shift ;;
        --torchrl-device) [[ $# -ge 2 ]] || die "$1 needs a value"; torchrl_only+=("--device" "$2"); shift 2 ;;
        --torchrl-device=*) torchrl_only+=("--device" "${1#*=}"); shift ;;
        --recur-args) [[ $# -ge 2 ]] || die "$1 needs a value"; read -r -a extra <<<"$2"; recur_only+=("${extra[@]}"); shift 2 ;;
        --torchrl-args) [[ $# -ge 2 ]] || die "$1 needs a value"; read -r -a extra <<<"$2"; torchrl_only+=("${extra[@]}"); shift 2 ;;
        --out) [[ $# -ge 2 ]] || die "$1 needs a value"; out="$2"; shift 2 ;;
        --out=*) out="${1#*=}"; shift ;;
        --no-build) build=0; shift ;;
        --skip-recur) skip_recur=1; shift ;;
        --skip-torchrl) skip_torchrl=1; shift ;;
        *) usage >&2; die "unknown option '$1'" ;;
    esac
done

if [[ -z "$threads" ]]; then
    threads="$(nproc)"
fi
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || die "--threads must be a positive integer, got '$threads'"
out="${out:-$ROOT/docs/bench-rnn-vs-torchrl-${threads}cores.jsonl}"
mkdir -p "$(dirname "$out")"

# ---- the Python environment -------------------------------------------------------------
venv_ok() {
    [[ -x "$VENV/bin/python" ]] &&
        "$VENV/bin/python" -c 'import torch, tensordict, torchrl, hoptorch' >/dev/null 2>&1
}

if [[ $skip_torchrl -eq 0 ]]; then
    if venv_ok; then
        say "reusing the virtual environment $VENV ($("$VENV/bin/python" -c 'import torch, tensordict, torchrl; print(f"torch {torch.__version__}, tensordict {tensordict.__version__}, torchrl {torchrl.__version__}")' 2>/dev/null))"
    else
        command -v python3 >/dev/null || die "python3 not found (needed for the TorchRL side)"
        if [[ -x "$VENV/bin/python" ]]; then
            say "the virtual environment $VENV lacks torch/tensordict/torchrl/hoptorch: installing them"
        else
            say "creating the virtual environment $VENV ($(python3 --version))"
            python3 -m venv "$VENV"
        fi
        if [[ -f "$TORCHRL_WHEEL" ]]; then
            torchrl_req="$TORCHRL_WHEEL"
        else
            torchrl_req="torchrl==${TORCHRL_VERSION}"
        fi
        say "pip install $TORCH_SPEC 'tensordict>=0.14.3,<0.15' $torchrl_req (torch from the default index can be several GB)"
        "$VENV/bin/python" -m pip install --quiet --upgrade pip
        "$VENV/bin/python" -m pip install --quiet "$TORCH_SPEC" 'tensordict>=0.14.3,<0.15' "$torchrl_req" numpy
        venv_ok || die "the virtual environment $VENV still cannot import torch, tensordict, torchrl and hoptorch"
        say "installed: $("$VENV/bin/python" -c 'import torch, tensordict, torchrl; print(f"torch {torch.__version__}, tensordict {tensordict.__version__}, torchrl {torchrl.__version__}")')"
    fi
fi

# ---- the recur-bench binary ---------------------------------------------------------------
if [[ $skip_recur -eq 0 ]]; then
    if [[ -n "${RECUR_BENCH:-}" ]]; then
        bin="$RECUR_BENCH"
        [[ -x "$bin" ]] || die "RECUR_BENCH=$bin is not an executable"
    else
        bin="$(cd "$ROOT" && . scripts/target_dir.sh && target_dir)/release/recur-bench"
        if [[ $build -eq 1 || ! -x "$bin" ]]; then
            say "cargo build --release -p recur-bench --bin recur-bench"
            (cd "$ROOT" && cargo build --release -p recur-bench --bin recur-bench) >&2
        fi
    fi
fi

# ---- the runs -----------------------------------------------------------------------------
{
    printf '{"bench":"run","tool":"bench_vs_torchrl.sh","date":"%s","host":"%s","cpu":"%s","nproc":%s,"threads":%s,"recur_commit":"%s"}\n' \
        "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(hostname)" \
        "$( (grep -m1 'model name' /proc/cpuinfo 2>/dev/null || echo ': unknown') | sed 's/.*: //; s/"/ /g')" \
        "$(nproc)" "$threads" "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
} >"$out"
say "writing $out"

sgemm_peak() {
    [[ $skip_torchrl -eq 0 ]] || return 0
    "$VENV/bin/python" "$PY_BENCH" --sgemm-peak --threads "$threads" --omp-wait-policy passive | tee -a "$out" ||
        say "warning: the PyTorch sgemm peak failed (no %sgemm column)"
}

if [[ $skip_recur -eq 0 ]]; then
    sgemm_peak
    say "$bin rnn --threads $threads ${common[*]} ${recur_only[*]}"
    # Rows stream to the terminal and the file as they are measured.
    "$bin" rnn --threads "$threads" "${common[@]}" "${recur_only[@]}" | tee -a "$out" ||
        { status=$?; say "warning: recur-bench exited with status $status"; }
    sgemm_peak
fi

if [[ $skip_torchrl -eq 0 ]]; then
    say "$VENV/bin/python scripts/torchrl_rnn_bench.py --threads $threads ${common[*]} ${torchrl_only[*]}"
    "$VENV/bin/python" "$PY_BENCH" --threads "$threads" "${common[@]}" "${torchrl_only[@]}" | tee -a "$out" ||
        { status=$?; say "warning: the TorchRL bench exited with status $status (rows it skipped are named above)"; }
fi

# ---- the comparison -----------------------------------------------------------------------
python="$VENV/bin/python"
[[ -x "$python" ]] || python=python3
ratios="$(mktemp)"
trap 'rm -f "$ratios"' EXIT
"$python" "$PY_BENCH" --compare "$out" >"$ratios"
cat "$ratios"
cat "$ratios" >>"$out"
say "rows, table and ratios: $out"
exit "$status"

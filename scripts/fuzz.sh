#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets/, common/src/fuzz.rs) for SECONDS each (default 60)
# with cargo-fuzz (libFuzzer), growing fuzz/corpus/<target>/. A crash is copied to
# fuzz/regressions/<target>/ (commit it with its fix: CI replays that folder and the corpus in
# common/tests/fuzz_corpus.rs) and the script exits 1 after the last target.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`). Its sanitizer flags are nightly-only; this
# machine has one stable toolchain, so the script sets RUSTC_BOOTSTRAP=1 for the fuzz build
# only. A developer tool, not part of CI. Per target, one line of JSON: execs/s, coverage
# (libFuzzer's `cov`), corpus size, crashes.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(chunk remote_frame control_frame dataset checkpoint weights actor_state)
command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz is missing: cargo install cargo-fuzz" >&2; exit 2; }
export RUSTC_BOOTSTRAP=1
failed=0
for t in "${targets[@]}"; do
  log=$(mktemp)
  # Artifacts of earlier runs are in fuzz/regressions (or fixed); count this run's only.
  rm -rf "fuzz/artifacts/$t"
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
  set +e
  cargo fuzz run --fuzz-dir fuzz "$t" "fuzz/corpus/$t" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="fuzz/artifacts/$t/" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo 0)
  crashes=$(find "fuzz/artifacts/$t" -type f | wc -l)
  files=$(find "fuzz/corpus/$t" -type f | wc -l)
  echo "{\"target\":\"$t\",\"seconds\":$seconds,\"execs_per_s\":${execs:-0},\"cov\":${cov:-0},\"corpus\":$files,\"crashes\":$crashes,\"rc\":$rc}"
  if [ "$crashes" -gt 0 ] || [ "$rc" -ne 0 ]; then
    failed=1
    mkdir -p "fuzz/regressions/$t"
    cp fuzz/artifacts/"$t"/* "fuzz/regressions/$t/" 2>/dev/null || true
    tail -40 "$log" >&2
  fi
  rm -f "$log"
done
exit $failed

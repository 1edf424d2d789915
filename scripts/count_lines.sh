#!/usr/bin/env bash
# Non-test lines of the library and binary crates: every *.rs under actor/src, learner/src and
# common/src, except files named tests.rs and files under a tests/ directory, each counted up to
# its first line that starts with `#[cfg(test)]`.
# Usage: scripts/count_lines.sh [--per-file]   (run from anywhere inside the repository)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
find actor/src learner/src common/src -name '*.rs' ! -name tests.rs ! -path '*/tests/*' -print0 \
  | sort -z \
  | xargs -0 awk '
      FNR == 1 { stop = 0 }
      /^#\[cfg\(test\)\]/ { stop = 1 }
      !stop { n[FILENAME]++; total++ }
      END {
        if (per_file) for (f in n) printf "%7d %s\n", n[f], f
        printf "%d\n", total
      }' per_file="$([[ ${1:-} == --per-file ]] && echo 1 || echo 0)"

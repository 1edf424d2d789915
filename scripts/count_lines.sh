#!/usr/bin/env bash
# Non-test lines of the library and binary crates: every *.rs under actor/src, learner/src,
# common/src, rnn/src and bench/src (the last two are crates since issue 56; a tree without them
# counts the other three), except files named tests.rs and files under a tests/ directory, each
# counted up to its first line that starts with `#[cfg(test)]`.
# Usage (run from anywhere inside the repository):
#   scripts/count_lines.sh [--per-file]     the working tree
#   scripts/count_lines.sh --at REV         the committed tree of REV
#   scripts/count_lines.sh --commits RANGE  per non-merge commit of RANGE (e.g. A..B): the change
#                                           it made to the count against its parent, its hash
#                                           and subject, oldest first
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

SRC_DIRS=(actor/src learner/src common/src rnn/src bench/src)

count() { # count DIR [per_file]
  local dirs=() d
  for d in "${SRC_DIRS[@]}"; do [[ -d "$1/$d" ]] && dirs+=("$d"); done
  (cd "$1" && find "${dirs[@]}" -name '*.rs' ! -name tests.rs \
    ! -path '*/tests/*' -print0 \
    | sort -z \
    | xargs -0 awk '
        FNR == 1 { stop = 0 }
        /^#\[cfg\(test\)\]/ { stop = 1 }
        !stop { n[FILENAME]++; total++ }
        END {
          if (per_file) for (f in n) printf "%7d %s\n", n[f], f
          printf "%d\n", total
        }' per_file="${2:-0}")
}

count_at() { # count_at REV
  local dir
  dir=$(mktemp -d)
  local paths=() d
  for d in "${SRC_DIRS[@]}"; do
    git cat-file -e "$1:$d" 2>/dev/null && paths+=("$d")
  done
  git archive "$1" "${paths[@]}" | tar -x -C "$dir"
  count "$dir"
  rm -rf "$dir"
}

case ${1:-} in
  --per-file) count . 1 ;;
  --at) count_at "$2" ;;
  --commits)
    for c in $(git rev-list --reverse --no-merges "$2"); do
      echo "$(($(count_at "$c") - $(count_at "$c^"))) $(git show -s --format='%h %s' "$c")"
    done ;;
  '') count . ;;
  *) sed -n 2,12p "$0" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Keeps the repository's copy of the reference data (tests/reference/) equal to the project's
# shared reference folder (../shared/reference, or SHARED_REFERENCE), the source of truth.
#
#   scripts/sync_reference.sh           # copy the shared folder into tests/reference
#   scripts/sync_reference.sh --check   # compare only: exit 1 and list the files that differ
#
# The tests read tests/reference unless RECUR_REFERENCE_DIR says otherwise, so a clone with
# nothing beside it passes its own tests. CI runs --check.
set -euo pipefail
cd "$(dirname "$0")/.."

src=${SHARED_REFERENCE:-../shared/reference}
dst=tests/reference
mode=${1:-sync}
case $mode in
  sync | --check) ;;
  *) sed -n 2,9p "$0" >&2; exit 2 ;;
esac
[[ -d $src ]] || { echo "sync_reference: $src is not a directory (set SHARED_REFERENCE)" >&2; exit 1; }

if [[ $mode == --check ]]; then
  if diff -r -q "$src" "$dst"; then
    echo "sync_reference: $dst equals $src ($(find "$dst" -type f | wc -l) files)"
  else
    echo "sync_reference: $dst differs from $src; run scripts/sync_reference.sh and commit" >&2
    exit 1
  fi
else
  rm -rf "$dst"
  mkdir -p "$dst"
  cp -R "$src"/. "$dst"/
  echo "sync_reference: copied $src to $dst ($(find "$dst" -type f | wc -l) files)"
fi

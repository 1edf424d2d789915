#!/bin/sh
# The whole POPGym table of docs/BENCHMARKS.md ("Every id on seeds 0-2") from its rows: the
# Easy ids from earlier sessions' suites, then this directory's Medium and Hard rows. A later
# file's (id, cell, preset, seed) replaces an earlier one's, so reruns come last.
# Usage (from the repository root): sh benchmarks/results/popgym-medium-hard-seeds012-2026-11-28/make_table.sh [--brief]
R=benchmarks/results
D=$R/popgym-medium-hard-seeds012-2026-11-28
exec python3 scripts/popgym_table.py "$@" \
  $R/popgym-fifteenth/paper-window/easy-1M \
  $R/popgym-sixteenth/paper-window/poc-1M \
  $R/popgym-fifteenth/paper-window/hl-1M \
  $R/popgym-fifteenth/paper-window/cr-3M \
  $R/popgym-fifteenth/paper-window/mab-10M \
  $R/popgym-sixteenth/ae-5M \
  $D/easy-npc-2M.jsonl \
  $D/easy-no-paper-number.jsonl \
  $D/until-gru-1.jsonl \
  $D/until-best-1.jsonl \
  $D/until-best-rfm.jsonl \
  $D/until-best-rfh.jsonl \
  $D/until-best-mab.jsonl \
  $D/until-best-mabh-seed2-rerun.jsonl \
  $D/until-gru-rpm.jsonl \
  $D/until-gru-rph.jsonl \
  $D/until-gru-cr.jsonl \
  $D/budget-no-paper-number.jsonl \
  $D/until-best-rfm-h128.jsonl \
  $D/until-best-crh.jsonl \
  $D/until-best-npcm.jsonl

"""Per variant of a tuning folder (run directories `tune-<variant>-s<seed>-<budget>`): the seeds,
the mean MMER (20) and MMER (100) over them, each seed's MMER (100), and the frames at which each
seed's 100-episode mean first reached `--perfect` (when given).

    python3 tune_table.py positiononlycartpole-easy [--perfect 0.99999]
"""
import argparse
import collections
import csv
import glob
import math
import os
import re
import statistics

ap = argparse.ArgumentParser()
ap.add_argument("folder")
ap.add_argument("--perfect", type=float)
args = ap.parse_args()


def column(rows, key):
    return [float(r[key]) for r in rows if r[key] and not math.isnan(float(r[key]))]


runs = collections.defaultdict(list)
for d in sorted(glob.glob(os.path.join(args.folder, "tune-*"))):
    m = re.fullmatch(r"tune-(.+)-s(\d+)-(\w+)", os.path.basename(d))
    if not m:
        continue
    rows = list(csv.DictReader(open(os.path.join(d, "metrics.csv"))))
    first = None
    if args.perfect is not None:
        first = next((int(r["frames"]) for r in rows
                      if r["mean_return_100"] and float(r["mean_return_100"]) >= args.perfect), None)
    runs[(m[1], m[3])].append((int(m[2]), max(column(rows, "mean_return")),
                                max(column(rows, "mean_return_100")), first))
for (variant, budget), v in runs.items():
    v.sort()
    line = (f"{variant:12s} {budget:5s} seeds {v[0][0]}-{v[-1][0]} (n={len(v)}): "
            f"MMER (20) {statistics.mean(x[1] for x in v):.4f}, MMER (100) "
            f"{statistics.mean(x[2] for x in v):.4f}; per seed (100): "
            + " ".join(f"{x[2]:.4f}" for x in v))
    if args.perfect is not None:
        line += "; first >= perfect at: " + " ".join(
            f"{x[3] // 1000}k" if x[3] else "-" for x in v)
    print(line)

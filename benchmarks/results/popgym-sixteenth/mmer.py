"""MMER of run directories: python3 mmer.py RUN_DIR... prints, per run, the maximum over
metrics.csv of `mean_return` (20 episodes) and of `mean_return_100` (100 episodes)."""
import csv
import math
import sys

for d in sys.argv[1:]:
    rows = list(csv.DictReader(open(f"{d}/metrics.csv")))
    m20 = [float(r["mean_return"]) for r in rows if not math.isnan(float(r["mean_return"]))]
    m100 = [float(r["mean_return_100"]) for r in rows if not math.isnan(float(r["mean_return_100"]))]
    print(f"{d}: frames {rows[-1]['frames']}, mmer {max(m20):.4f}, mmer_100 {max(m100):.4f}")

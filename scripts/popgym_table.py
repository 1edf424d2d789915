#!/usr/bin/env python3
"""The POPGym table across suite runs: every id, recur beside the paper's GRU and best model.

    python3 scripts/popgym_table.py ROWS [ROWS...] [--brief] [--out FILE]

Each ROWS is a `suite.jsonl` of `scripts/popgym_suite.sh` (or a directory holding one, or any
`.jsonl` of its rows). Rows are grouped by id, cell, preset directory and overrides (`set`);
where one (group, seed) appears in several files, the last file given wins, so a rerun of one
seed is passed after the run it replaces. Paper numbers come from each row, or from
benchmarks/popgym-paper.json for rows written before the suite recorded them.

Per group: the seeds, MMER (100) mean +- population std over them, the paper's GRU and best
model, whether the mean reaches each at the paper's three decimals (the shortfall when not),
the frames at which each seed's 100-episode mean first reached the GRU's number ("-": not
within that seed's frames; "not recorded": a row from before the suite recorded it), frames and wall seconds per seed, and where the run stopped
(`until`). Then the counts of ids at or above the GRU and the best model, and the summed wall
time. Families in the order of docs/popgym.md, levels Easy, Medium, Hard. `--brief`: the
columns docs/BENCHMARKS.md shows (no preset, per-seed frames or stop; the mean wall time per
run, the largest frames per seed as the budget column).
"""

import argparse
import collections
import json
import os
import statistics
import sys

FAMILIES = [
    "RepeatFirst", "RepeatPrevious", "Autoencode", "CountRecall", "HigherLower",
    "MultiarmedBandit", "Concentration", "Battleship", "MineSweeper", "PositionOnlyCartPole",
    "VelocityOnlyCartpole", "NoisyPositionOnlyCartPole", "PositionOnlyPendulum",
    "NoisyPositionOnlyPendulum", "LabyrinthEscape", "LabyrinthExplore",
]
LEVELS = ["Easy", "Medium", "Hard"]


def paper_numbers():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks",
                        "popgym-paper.json")
    with open(path) as f:
        return json.load(f)["ids"]


def read_rows(arg):
    path = os.path.join(arg, "suite.jsonl") if os.path.isdir(arg) else arg
    if not os.path.isfile(path):
        sys.exit("popgym_table: no rows at %s (a suite.jsonl or a directory holding one)" % arg)
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit("popgym_table: %s line %d is not JSON: %s" % (path, n, e))
    return rows


def three(x):
    return round(x + 1e-12, 3)


def mega(frames):
    return "%.2fM" % (frames / 1e6)


def to_paper(r):
    if "frames_to_paper" not in r:
        return "not recorded"  # rows from before the suite recorded it
    return "-" if r["frames_to_paper"] is None else mega(r["frames_to_paper"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="+", help="suite.jsonl files or directories holding one")
    ap.add_argument("--brief", action="store_true", help="the columns docs/BENCHMARKS.md shows")
    ap.add_argument("--out", help="also write the table to this file")
    args = ap.parse_args()

    paper = paper_numbers()
    groups = collections.OrderedDict()
    for arg in args.rows:
        for r in read_rows(arg):
            key = (r["id"], r["cell"], r.get("presets") or "configs/popgym", r.get("set") or "")
            groups.setdefault(key, {})[r["seed"]] = r

    def order(key):
        r = next(iter(groups[key].values()))
        fam = r.get("family", "")
        return (FAMILIES.index(fam) if fam in FAMILIES else len(FAMILIES), fam,
                LEVELS.index(r.get("level")) if r.get("level") in LEVELS else 3, key)

    if args.brief:
        head = ["id", "cell", "seeds", "MMER (100) mean ± std", "paper GRU", "paper best (model)",
                ">= GRU", ">= best", "frames to the GRU number, per seed", "frames (most)",
                "wall s per run (mean)"]
    else:
        head = ["id", "cell", "preset", "seeds", "MMER (100) mean ± std", "paper GRU",
                "paper best (model)", ">= GRU", ">= best", "frames to the GRU number, per seed",
                "frames per seed", "wall s per seed", "until"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    with_number = at_gru = at_best = 0
    total_wall = 0.0
    for key in sorted(groups, key=order):
        id_, cell, presets, sets = key
        rs = [groups[key][s] for s in sorted(groups[key])]
        short = id_.removeprefix("popgym-").removesuffix("-v0")
        p = paper.get(short, {})
        gru = rs[0].get("paper_gru", p.get("gru"))
        best = rs[0].get("paper_best", p.get("best"))
        model = rs[0].get("paper_best_model", p.get("best_model"))
        mmer = [r["mmer_100"] for r in rs if r.get("mmer_100") is not None]
        if not mmer:
            continue
        mean = statistics.mean(mmer)
        cell_text = "%.3f ± %.3f" % (mean, statistics.pstdev(mmer))

        def reach(target):
            if target is None:
                return "-"
            gap = three(mean) - target
            return "yes" if gap >= -1e-9 else "no (%.3f)" % gap

        if gru is not None:
            with_number += 1
            at_gru += reach(gru) == "yes"
            at_best += best is not None and reach(best) == "yes"
            to = " / ".join(to_paper(r) for r in rs)
        else:
            to = "no paper number"
        walls = [r["wall_s"] for r in rs]
        total_wall += sum(walls)
        preset = presets + ("" if not sets else " " + sets)
        stops = sorted({r.get("until") or "budget" for r in rs})
        seeds = ",".join(str(r["seed"]) for r in rs)
        gru_text = "-" if gru is None else "%.3f" % gru
        best_text = "-" if best is None else "%.3f (%s)" % (best, model)
        if args.brief:
            cells = [short, cell, seeds, cell_text, gru_text, best_text, reach(gru), reach(best),
                     to, mega(max(r["frames"] for r in rs)), "%.0f" % statistics.mean(walls)]
        else:
            cells = [short, cell, preset, seeds, cell_text, gru_text, best_text, reach(gru),
                     reach(best), to, " / ".join(mega(r["frames"]) for r in rs),
                     " / ".join("%.0f" % w for w in walls), ", ".join(stops)]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Ids with a paper number: %d; recur's mean at or above the paper's GRU on %d, "
                 "at or above its best model on %d. Training time of every row: %.0f s (%.1f h)."
                 % (with_number, at_gru, at_best, total_wall, total_wall / 3600))
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()

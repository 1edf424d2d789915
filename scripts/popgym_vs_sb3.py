"""The per-frame side by side of recur and SB3 RecurrentPPO on POPGym ids (docs/BENCHMARKS.md).

A developer tool, not part of CI. Reads SB3's rows (scripts/sb3_popgym.py --out FILE, one JSON
line per run) and recur's (scripts/popgym_suite.sh's suite.jsonl; several files: a later file's
row for an id and seed replaces an earlier one's, so a preset directory for a few ids can follow
the main suite) and prints a markdown table: per id, MMER (100) mean +- population std over the
seeds both sides ran, each side's wall seconds, recur's share of SB3's wall time, the preset
directory recur's rows came from, and whether recur is at or above SB3 (at three decimals).

  python3 scripts/popgym_vs_sb3.py --sb3 SB3.jsonl --recur A/suite.jsonl [B/suite.jsonl ...]
"""

import argparse
import json
import statistics


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def stat(xs):
    if len(xs) == 1:
        return "%.3f" % xs[0]
    return "%.3f ± %.3f" % (statistics.mean(xs), statistics.pstdev(xs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sb3", required=True)
    ap.add_argument("--recur", required=True, nargs="+")
    a = ap.parse_args()
    sb3 = {(r["env"], r["seed"]): r for r in rows(a.sb3)}
    recur = {}
    for path in a.recur:
        for r in rows(path):
            recur[(r["id"], r["seed"])] = r
    ids = list(dict.fromkeys(k[0] for k in recur))
    print("| id | seeds | recur MMER (100) | SB3 MMER (100) | recur >= SB3 | recur wall s | SB3 wall s "
          "| recur / SB3 | recur's preset |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for id_ in ids:
        seeds = sorted(s for (i, s) in recur if i == id_ and (i, s) in sb3)
        if not seeds:
            continue
        rc = [recur[(id_, s)] for s in seeds]
        sb = [sb3[(id_, s)] for s in seeds]
        m_rc = statistics.mean(r["mmer_100"] for r in rc)
        m_sb = statistics.mean(r["mmer_100"] for r in sb)
        w_rc = statistics.mean(r["wall_s"] for r in rc)
        w_sb = statistics.mean(r["wall_s"] for r in sb)
        print("| %s | %s | %s | %s | %s | %.1f | %.1f | %.1f%% | %s |" % (
            id_.removeprefix("popgym-").removesuffix("-v0"), ",".join(map(str, seeds)),
            stat([r["mmer_100"] for r in rc]), stat([r["mmer_100"] for r in sb]),
            "yes" if round(m_rc, 3) >= round(m_sb, 3) else "no (%.3f)" % (m_rc - m_sb), w_rc, w_sb,
            100 * w_rc / w_sb, rc[0].get("presets", "configs/popgym")))


if __name__ == "__main__":
    main()

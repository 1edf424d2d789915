"""The ring all-reduce scaling model of docs/BENCHMARKS.md ("Learner ranks"), from the rows of
ranks.jsonl (this directory): per policy, the one-rank update time C1 (one thread), the
minibatches per update M and the gradient bytes B. For N ranks over a network of bandwidth W
with a per-message latency a, one ring all-reduce takes

    T(N) = 2 (N - 1) / N * B / W + 2 (N - 1) * a

and an update on N ranks takes C1 / N + M * T(N) when the global minibatch is split over them
(strong scaling: speed-up C1 / that), or C1 + M * T(N) when each rank keeps one process's
minibatch (the global batch grows N-fold: efficiency C1 / that).
Usage: python3 scaling_model.py ranks.jsonl   (prints the markdown tables)."""
import json
import sys

LINKS = [("10 Gb/s, a = 15 us (TCP)", 10e9 / 8, 15e-6), ("100 Gb/s, a = 2 us (RDMA)", 100e9 / 8, 2e-6)]
RANKS = [8, 16, 32, 64, 128, 256]

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ones = [r for r in rows if not r.get("summary") and r["ranks"] == 1]
for policy in dict.fromkeys(r["policy"] for r in ones):
    mine = sorted((r for r in ones if r["policy"] == policy), key=lambda r: r["update_ms"])
    r = mine[len(mine) // 2]  # the median round's one-rank update
    c1, m, b = r["update_ms"] / 1e3, r["minibatches_per_update"], r["gradient_bytes"]
    print(f"\n{policy}: C1 = {c1 * 1e3:.1f} ms per update on one rank, M = {m}, B = {b / 1e3:.0f} kB\n")
    print("| ranks | " + " | ".join(f"{name}: all-reduce us / split update ms / speed-up / efficiency at N x the batch" for name, _, _ in LINKS) + " |")
    print("| --- | " + " | ".join("---" for _ in LINKS) + " |")
    for n in RANKS:
        cells = []
        for _, w, a in LINKS:
            t = 2 * (n - 1) / n * b / w + 2 * (n - 1) * a
            update = c1 / n + m * t
            weak = c1 / (c1 + m * t)
            cells.append(f"{t * 1e6:.0f} / {update * 1e3:.2f} / {c1 / update:.1f}x / {weak:.0%}")
        print(f"| {n} | " + " | ".join(cells) + " |")

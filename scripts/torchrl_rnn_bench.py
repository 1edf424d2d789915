#!/usr/bin/env python3
"""TorchRL side of `scripts/bench_vs_torchrl.sh`.

Two modes:

* bench (default): times TorchRL's `GRUModule` / `LSTMModule` in recurrent mode on the
  workload of `recur-bench rnn` (same options, same defaults, same row fields) and prints one
  JSON row per line on stdout, with `"impl": "torchrl"` and the library versions added.
  Needs torch, tensordict and torchrl (the script's virtual environment).

* `--sgemm-peak`: times `torch.mm` on two `1024 x 1024` f32 matrices at `--threads` (median of
  `--iters`, at least 10, after 3 warm-ups) and prints one `{"bench":"torch_sgemm",...}` row:
  the machine's practical GEMM peak as PyTorch (MKL/oneDNN) reaches it.

* `--compare FILE...`: reads recur-bench and TorchRL rows from JSON-lines files (any other
  line is ignored), prints a table per (cell, pass, steps, reset_prob) on stderr and one
  `{"bench":"rnn_ratio",...}` line per recur row on stdout. Needs only the standard library.
  With `torch_sgemm` rows in the files, each ratio line also carries the highest of them
  (`torch_sgemm_gflop_per_s`) and the recur row's share of it (`sgemm_peak_fraction` =
  `recur_gflop_per_s / torch_sgemm_gflop_per_s`), and the table a `X %sgemm` column.

Workload (as in `recur-bench rnn`): input `[B, T, input]` uniform in [-1, 1), `is_init[:, 0]`
true and later steps Bernoulli(p), zero stored states `[B, T, layers, hidden]`, all built once
per row outside the timed calls (recur-bench does the same). `fwd` is one
recurrent-mode call under `torch.no_grad()`; `fwdbwd` is the call plus the backward pass of
`loss = features.sum()` (gradients of the module's parameters only, as in recur). Every row:
`warmup` untimed calls, then `iters` timed calls; the median is reported and
frames/s = batch * steps / median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

CPU_BACKENDS = ("pad", "scan", "auto")
ALL_BACKENDS = ("pad", "scan", "auto", "triton")


def log(msg: str) -> None:
    print(f"torchrl_rnn_bench: {msg}", file=sys.stderr, flush=True)


def csv_list(kind):
    def parse(text: str):
        return [kind(x) for x in text.split(",") if x.strip()]

    return parse


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="TorchRL GRUModule/LSTMModule recurrent-mode throughput "
        "(the TorchRL side of scripts/bench_vs_torchrl.sh)."
    )
    p.add_argument(
        "--compare",
        nargs="+",
        metavar="FILE",
        help="join recur-bench and TorchRL rows from these JSON-lines files and print "
        "the comparison instead of benchmarking",
    )
    p.add_argument(
        "--sgemm-peak",
        action="store_true",
        help="print PyTorch's 1024^3 f32 GEMM rate at --threads (one torch_sgemm row) and exit",
    )
    p.add_argument("--cells", type=csv_list(str), default=["gru", "lstm"])
    p.add_argument(
        "--backends",
        type=csv_list(str),
        default=None,
        help="TorchRL recurrent_backend values: pad, scan, auto, triton (CUDA only; "
        "'fused' is accepted as a name for it). Default: pad,scan on CPU, "
        "pad,scan,triton on CUDA",
    )
    p.add_argument("--passes", type=csv_list(str), default=["fwd", "fwdbwd"])
    p.add_argument("--steps", type=csv_list(int), default=[64, 128])
    p.add_argument("--reset-probs", type=csv_list(float), default=[0.0, 0.03, 0.1])
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument(
        "--threads", type=int, default=None, help="CPU threads [default: all cores]"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="T = the shortest --steps (at most 64), p in {0, 0.1}, 2 iterations, 1 warm-up",
    )
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--input", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--recompute",
        choices=["none", "full"],
        default="none",
        help="TorchRL recurrent_recompute (scan/triton only; 'full' skips pad and auto)",
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    p.add_argument(
        "--matmul-precision",
        choices=["ieee", "tf32"],
        default="ieee",
        help="torch.set_float32_matmul_precision: 'highest' for ieee (torch's default, which "
        "TorchRL's triton backend follows), 'high' for tf32; rows carry matmul_precision",
    )
    p.add_argument(
        "--omp-wait-policy",
        type=csv_list(str),
        default=["unset", "passive"],
        help="OpenMP wait policies of torch's thread pool to measure, each in its own "
        "process (the whole grid once per policy): unset (libgomp's default: spin, then "
        "sleep; what a TorchRL user gets, and the faster one on an idle machine), passive "
        "(sleep at once; far faster when other load shares the cores), active. "
        "[default: unset,passive; the comparison takes the faster row]",
    )
    args = p.parse_args(argv)
    if args.compare:
        return args
    for pol in args.omp_wait_policy:
        if pol not in ("unset", "passive", "active"):
            p.error(f"--omp-wait-policy: {pol!r} is not one of unset, passive, active")
    for c in args.cells:
        if c not in ("gru", "lstm"):
            p.error(f"--cells: {c!r} is not one of gru, lstm")
    for ps in args.passes:
        if ps not in ("fwd", "fwdbwd"):
            p.error(f"--passes: {ps!r} is not one of fwd, fwdbwd")
    for prob in args.reset_probs:
        if not 0.0 <= prob <= 1.0:
            p.error(f"--reset-probs: {prob} is not a probability in [0, 1]")
    if any(t < 1 for t in args.steps):
        p.error(f"--steps: every T must be at least 1, got {args.steps}")
    if args.threads is not None and args.threads < 1:
        p.error(f"--threads must be at least 1, got {args.threads}")
    if args.quick:
        args.steps = [min(64, min(args.steps))]
        args.reset_probs = [0.0, 0.1]
        args.iters = 2
        args.warmup = 1
    if args.threads is None:
        args.threads = os.cpu_count() or 1
    return args


# --------------------------------------------------------------------------------------------
# bench mode


def set_threads_env(threads: int, wait_policy: str) -> None:
    """Sizes the OpenMP/MKL pools and sets their wait policy; must run before torch is
    imported."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    if wait_policy == "unset":
        os.environ.pop("OMP_WAIT_POLICY", None)
    else:
        os.environ["OMP_WAIT_POLICY"] = wait_policy.upper()


def bench_each_policy(args, argv) -> int:
    """Runs the grid once per wait policy, each in a fresh process (the policy is read once,
    when OpenMP starts)."""
    import subprocess

    rest = []
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "--omp-wait-policy":
            skip = True
            continue
        if a.startswith("--omp-wait-policy="):
            continue
        rest.append(a)
    status = 0
    for pol in args.omp_wait_policy:
        cmd = [sys.executable, os.path.abspath(__file__), *rest, "--omp-wait-policy", pol]
        rc = subprocess.call(cmd)
        status = status or rc
    return status


SGEMM_N = 1024


def sgemm_peak(args) -> int:
    """One `torch_sgemm` row: `torch.mm` of two `SGEMM_N^2` f32 matrices at `--threads`."""
    set_threads_env(args.threads, args.omp_wait_policy[0])
    import torch

    torch.set_num_threads(args.threads)
    n = SGEMM_N
    g = torch.Generator().manual_seed(args.seed)
    a = torch.rand(n, n, generator=g)
    b = torch.rand(n, n, generator=g)
    c = torch.empty(n, n)
    for _ in range(3):
        torch.mm(a, b, out=c)
    times = []
    for _ in range(max(10, args.iters)):
        start = time.perf_counter()
        torch.mm(a, b, out=c)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    row = {
        "bench": "torch_sgemm",
        "n": n,
        "threads": args.threads,
        "gflop_per_s": 2.0 * n**3 / median / 1e9,
        "median_ms": median * 1e3,
        "best_gflop_per_s": 2.0 * n**3 / min(times) / 1e9,
        "torch_version": torch.__version__,
        "omp_wait_policy": args.omp_wait_policy[0],
        "loadavg": os.getloadavg()[0],
    }
    print(json.dumps(row), flush=True)
    return 0


def bench(args) -> int:
    if "torch" in sys.modules:
        log("torch was imported before the thread settings: they may not apply")
    wait_policy = args.omp_wait_policy[0]
    set_threads_env(args.threads, wait_policy)
    import torch

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(args.threads)
    except RuntimeError as e:  # already started: not fatal, report it
        log(f"set_num_interop_threads({args.threads}) failed: {e}")

    import tensordict
    import torchrl
    from tensordict import TensorDict
    from torchrl.modules import GRUModule, LSTMModule, set_recurrent_mode

    torch.set_float32_matmul_precision("highest" if args.matmul_precision == "ieee" else "high")
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        # torch 2.11's set_device refuses a device without an index.
        device = torch.device("cuda", 0)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            log(
                "--device cuda: torch.cuda.is_available() is False (no GPU, or a CPU-only "
                f"torch build: torch {torch.__version__}); nothing measured"
            )
            return 2
        torch.cuda.set_device(device)
    elif device.type != "cpu":
        log(f"--device {args.device}: only cpu and cuda are supported")
        return 2

    backends = args.backends
    if backends is None:
        backends = ["pad", "scan", "triton"] if device.type == "cuda" else ["pad", "scan"]
    chosen = []
    for b in backends:
        name = "triton" if b == "fused" else b
        if name not in ALL_BACKENDS:
            log(f"--backends: {b!r} is not a TorchRL recurrent_backend ({', '.join(ALL_BACKENDS)}); skipped")
            continue
        if name == "triton" and device.type != "cuda":
            log(
                f"backend {b!r}: TorchRL's fused recurrence is the 'triton' backend, CUDA only; "
                "skipped on CPU"
            )
            continue
        if args.recompute != "none" and name in ("pad", "auto"):
            log(f"backend {name!r}: TorchRL rejects recurrent_recompute={args.recompute!r}; skipped")
            continue
        if name not in chosen:
            chosen.append(name)
    if device.type == "cpu" and args.backends is None:
        log("TorchRL's fused 'triton' backend is CUDA only: measuring pad and scan on CPU")

    versions = {
        "torchrl_version": torchrl.__version__,
        "torch_version": torch.__version__,
        "tensordict_version": tensordict.__version__,
    }
    log(
        f"torch {versions['torch_version']}, tensordict {versions['tensordict_version']}, "
        f"torchrl {versions['torchrl_version']}, device {device}, threads {torch.get_num_threads()} "
        f"(interop {torch.get_num_interop_threads()}), backends {','.join(chosen)}, "
        f"recompute {args.recompute}, OMP_WAIT_POLICY {wait_policy}"
    )

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def make_module(cell: str, backend: str):
        kw = dict(
            input_size=args.input,
            hidden_size=args.hidden,
            num_layers=args.layers,
            recurrent_backend=backend,
            device=device,
        )
        if args.recompute != "none":
            kw["recurrent_recompute"] = args.recompute
        if cell == "gru":
            return GRUModule(
                in_keys=["obs", "rs_h", "is_init"],
                out_keys=["features", ("next", "rs_h")],
                **kw,
            )
        return LSTMModule(
            in_keys=["obs", "rs_h", "rs_c", "is_init"],
            out_keys=["features", ("next", "rs_h"), ("next", "rs_c")],
            **kw,
        )

    def workload(steps: int, p: float):
        g = torch.Generator().manual_seed(
            (args.seed * 1_000_003 + steps * 1_009 + round(p * 1e6)) % (2**63)
        )
        b = args.batch
        x = torch.rand(b, steps, args.input, generator=g) * 2.0 - 1.0
        is_init = torch.rand(b, steps, 1, generator=g) < p
        is_init[:, 0] = True
        return x.to(device), is_init.to(device)

    failures = 0
    for cell in args.cells:
        for backend in chosen:
            torch.manual_seed(args.seed)
            try:
                module = make_module(cell, backend)
            except Exception as e:  # noqa: BLE001 - report and go on with the others
                log(f"{cell} backend {backend!r} unavailable: {type(e).__name__}: {e}; skipped")
                failures += 1
                continue
            params = [q for q in module.parameters() if q.requires_grad]
            for steps in args.steps:
                for p in args.reset_probs:
                    x, is_init = workload(steps, p)
                    state_shape = (args.batch, steps, args.layers, args.hidden)
                    # Inputs and zero states are built once per row, outside the timed calls
                    # (recur-bench does the same): both sides time the module call alone.
                    inputs = {
                        "obs": x,
                        "is_init": is_init,
                        "rs_h": torch.zeros(state_shape, device=device),
                    }
                    if cell == "lstm":
                        inputs["rs_c"] = torch.zeros(state_shape, device=device)

                    def call():
                        td = TensorDict(dict(inputs), batch_size=[args.batch, steps], device=device)
                        with set_recurrent_mode(True):
                            return module(td)

                    def fwd():
                        with torch.no_grad():
                            out = call()
                        out["features"].sum().item()

                    def fwdbwd():
                        for q in params:
                            q.grad = None
                        out = call()
                        out["features"].sum().backward()
                        sync()

                    for ps in args.passes:
                        fn = fwd if ps == "fwd" else fwdbwd
                        try:
                            # The first call: triton compiles and autotunes per shape here.
                            start = time.perf_counter()
                            fn()
                            sync()
                            first_call_ms = (time.perf_counter() - start) * 1e3
                            for _ in range(1, args.warmup):
                                fn()
                            sync()
                            times = []
                            for _ in range(max(1, args.iters)):
                                start = time.perf_counter()
                                fn()
                                sync()
                                times.append((time.perf_counter() - start) * 1e3)
                        except Exception as e:  # noqa: BLE001
                            log(
                                f"{cell} {backend} {ps} T={steps} p={p}: "
                                f"{type(e).__name__}: {e}; row skipped"
                            )
                            failures += 1
                            continue
                        median = statistics.median(times)
                        row = {
                            "bench": "rnn",
                            "cell": cell,
                            "backend": backend,
                            "pass": ps,
                            "batch": args.batch,
                            "steps": steps,
                            "reset_prob": p,
                            "median_ms": median,
                            "frames_per_s": args.batch * steps / (median / 1e3),
                            "min_ms": min(times),
                            "max_ms": max(times),
                            "iters": max(1, args.iters),
                            "threads": args.threads,
                            "input": args.input,
                            "hidden": args.hidden,
                            "layers": args.layers,
                            "recompute": args.recompute,
                            "matmul_precision": args.matmul_precision,
                            "first_call_ms": first_call_ms,
                            "impl": "torchrl",
                            **versions,
                            "device": str(device),
                            "omp_wait_policy": wait_policy,
                            "reset_frac": float(is_init[:, 1:].float().mean()) if steps > 1 else 0.0,
                        }
                        print(json.dumps(row), flush=True)
    return 1 if failures else 0


# --------------------------------------------------------------------------------------------
# compare mode


def read_rows(paths, bench="rnn"):
    rows = []
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if row.get("bench") == bench:
                    rows.append(row)
    return rows


def label(row) -> str:
    """Backend name, with the recompute mode when it is not the default."""
    rc = row.get("recompute")
    if rc in (None, "none", False):
        return row["backend"]
    return f"{row['backend']}+{rc if isinstance(rc, str) else 'recompute'}"


def key(row):
    return (
        row["cell"],
        row["pass"],
        int(row["steps"]),
        round(float(row["reset_prob"]), 6),
        int(row.get("batch", 0)),
        int(row.get("input", 0)),
        int(row.get("hidden", 0)),
        int(row.get("layers", 1)),
        # Rows from before the field were all full f32 (torch's default, recur's CPU).
        row.get("matmul_precision", "ieee"),
    )


def fmt_fps(v) -> str:
    if v is None:
        return "-"
    if v >= 1e6:
        return f"{v / 1e6:.2f}M"
    if v >= 1e3:
        return f"{v / 1e3:.1f}k"
    return f"{v:.0f}"


def fmt_ratio(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


BACKEND_ORDER = {"pad": 0, "scan": 1, "fused": 2, "triton": 3, "auto": 4}


def order(name: str):
    base = name.split("+")[0]
    return (BACKEND_ORDER.get(base, 9), name)


def compare(paths) -> int:
    rows = read_rows(paths)
    sgemm = [r["gflop_per_s"] for r in read_rows(paths, "torch_sgemm")]
    peak = max(sgemm) if sgemm else None
    recur, torchrl = {}, {}
    for r in rows:
        if r.get("impl") == "torchrl":
            # Several TorchRL rows for one key and backend (one per OpenMP wait policy, or
            # several runs): the fastest stands for TorchRL.
            slot = torchrl.setdefault(key(r), {})
            old = slot.get(label(r))
            if old is None or r["frames_per_s"] > old["frames_per_s"]:
                slot[label(r)] = r
        else:
            # The last recur row wins when a file holds several runs of the same key.
            recur.setdefault(key(r), {})[label(r)] = r
    if not recur and not torchrl:
        log(f"no rnn rows in {' '.join(paths)}")
        return 1
    recur_names = sorted({n for d in recur.values() for n in d}, key=order)
    trl_names = sorted({n for d in torchrl.values() for n in d}, key=order)
    threads = sorted({r.get("threads") for r in rows if r.get("threads") is not None})
    if len(threads) > 1:
        log(f"warning: rows with different thread counts {threads}: compare with care")

    header = (
        ["cell", "pass", "T", "p", "B", "prec"]
        + [f"recur {n}" for n in recur_names]
        + [f"trl {n}" for n in trl_names]
        + ["trl best"]
        + [f"{n}/trl" for n in recur_names]
    )
    fused_vs_scan = "fused" in recur_names and "scan" in recur_names
    if fused_vs_scan:
        header.append("fused/scan")
    if peak:
        header += [f"{n} %sgemm" for n in recur_names]
    table = [header]
    ratio_lines = []
    for k in sorted(set(recur) | set(torchrl)):
        cell, ps, steps, p, batch = k[:5]
        precision = k[-1]
        rec = recur.get(k, {})
        trl = torchrl.get(k, {})
        best_name, best = None, None
        for n, r in trl.items():
            if best is None or r["frames_per_s"] > best["frames_per_s"]:
                best_name, best = n, r
        scan = rec.get("scan")
        line = [cell, ps, str(steps), f"{p:g}", str(batch), precision]
        line += [fmt_fps(rec[n]["frames_per_s"]) if n in rec else "-" for n in recur_names]
        line += [fmt_fps(trl[n]["frames_per_s"]) if n in trl else "-" for n in trl_names]
        line.append(f"{fmt_fps(best['frames_per_s'])} {best_name}" if best else "-")
        for n in recur_names:
            ratio = rec[n]["frames_per_s"] / best["frames_per_s"] if n in rec and best else None
            line.append(fmt_ratio(ratio))
        if fused_vs_scan:
            fs = (
                rec["fused"]["frames_per_s"] / scan["frames_per_s"]
                if "fused" in rec and scan
                else None
            )
            line.append(fmt_ratio(fs))
        if peak:
            for n in recur_names:
                gf = rec[n].get("gflop_per_s") if n in rec else None
                line.append("-" if gf is None else f"{100.0 * gf / peak:.0f}%")
        table.append(line)
        for n in sorted(rec, key=order):
            r = rec[n]
            ratio_lines.append(
                {
                    "bench": "rnn_ratio",
                    "cell": cell,
                    "pass": ps,
                    "steps": steps,
                    "reset_prob": p,
                    "matmul_precision": precision,
                    "recur_backend": n,
                    "recur_frames_per_s": r["frames_per_s"],
                    "torchrl_best_backend": best_name,
                    "torchrl_best_frames_per_s": best["frames_per_s"] if best else None,
                    "torchrl_best_omp_wait_policy": best.get("omp_wait_policy") if best else None,
                    "ratio": r["frames_per_s"] / best["frames_per_s"] if best else None,
                    "recur_scan_frames_per_s": scan["frames_per_s"] if scan else None,
                    "ratio_vs_recur_scan": r["frames_per_s"] / scan["frames_per_s"]
                    if scan
                    else None,
                    "threads": r.get("threads"),
                    "batch": r.get("batch"),
                    "recur_gflop_per_s": r.get("gflop_per_s"),
                    "torch_sgemm_gflop_per_s": peak,
                    "sgemm_peak_fraction": r["gflop_per_s"] / peak
                    if peak and r.get("gflop_per_s") is not None
                    else None,
                }
            )

    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    out = sys.stderr
    print(
        "\nframes/s (batch x steps / median); trl = TorchRL; X/trl = recur backend X over "
        "TorchRL's best backend for the row"
        + ("; fused/scan = recur fused over recur scan" if fused_vs_scan else ""),
        file=out,
    )
    for i, row in enumerate(table):
        print(
            "  ".join(c.ljust(w) if j < 6 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths))),
            file=out,
        )
        if i == 0:
            print("  ".join("-" * w for w in widths), file=out)
    if peak:
        print(
            f"X %sgemm = recur backend X's GEMM GFLOP/s over PyTorch's 1024^3 sgemm in the same "
            f"run ({peak:.1f} GFLOP/s, the best of {len(sgemm)} measurement(s): "
            f"{', '.join(f'{v:.1f}' for v in sgemm)})",
            file=out,
        )
    print(file=out, flush=True)
    for line in ratio_lines:
        print(json.dumps(line))
    missing_trl = [k for k in recur if k not in torchrl]
    if missing_trl:
        log(f"{len(missing_trl)} recur row key(s) have no TorchRL row (ratio null)")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.compare:
        return compare(args.compare)
    if args.sgemm_peak:
        return sgemm_peak(args)
    if len(args.omp_wait_policy) > 1:
        return bench_each_policy(args, argv)
    return bench(args)


if __name__ == "__main__":
    sys.exit(main())

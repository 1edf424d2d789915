#!/usr/bin/env python3
"""Registers, stack frame and spills of the CUDA kernels cubecl compiled, from its PTX cache.

cubecl-cuda 0.10 keeps the PTX of every kernel it compiles in `*.cbor` chunks when cubecl.toml
sets `[compilation] cache` (scripts/gpu_session.sh's `ptx` step sets a `file` path). This
script decodes the chunks (CBOR entries `{key, value: {entrypoint_name, shared_mem_bytes, ptx}}`,
written by ciborium), writes each kernel's PTX to OUT_DIR, runs `ptxas -v` on it and prints one
JSON line per kernel: name, registers, stack frame, spill stores and loads (bytes), shared
memory. A stack frame or spills mean local memory: what issue 32's tile-1 lead asks about.

  python3 scripts/ptx_report.py CACHE_DIR OUT_DIR [--arch sm_90a] [--ptxas PATH]

ptxas: --ptxas, else the one in PATH, else the one triton ships (the device's torch has it).
A developer tool for the GPU session, not part of CI.
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys


def cbor_item(b, i):
    """One CBOR data item of `b` at `i`: (value, next index). Definite and indefinite lengths."""
    head = b[i]
    major, info = head >> 5, head & 31
    i += 1
    if major == 7:
        if info == 20:
            return False, i
        if info == 21:
            return True, i
        if info in (22, 23):
            return None, i
        if info == 25:
            return struct.unpack(">e", b[i:i + 2])[0], i + 2
        if info == 26:
            return struct.unpack(">f", b[i:i + 4])[0], i + 4
        if info == 27:
            return struct.unpack(">d", b[i:i + 8])[0], i + 8
        raise ValueError(f"CBOR simple value {info} at {i - 1}")
    if info < 24:
        arg = info
    elif info in (24, 25, 26, 27):
        width = 1 << (info - 24)
        arg = int.from_bytes(b[i:i + width], "big")
        i += width
    elif info == 31:
        arg = None
    else:
        raise ValueError(f"CBOR additional info {info} at {i - 1}")
    if major == 0:
        return arg, i
    if major == 1:
        return -1 - arg, i
    if major in (2, 3):
        if arg is None:
            parts = []
            while b[i] != 0xFF:
                part, i = cbor_item(b, i)
                parts.append(part)
            joined = b"".join(p if isinstance(p, bytes) else p.encode() for p in parts)
            return (joined if major == 2 else joined.decode()), i + 1
        raw = bytes(b[i:i + arg])
        return (raw if major == 2 else raw.decode()), i + arg
    if major == 4:
        out = []
        while (b[i] != 0xFF) if arg is None else (len(out) < arg):
            v, i = cbor_item(b, i)
            out.append(v)
        return out, (i + 1 if arg is None else i)
    if major == 5:
        out = {}
        while (b[i] != 0xFF) if arg is None else (len(out) < arg):
            k, i = cbor_item(b, i)
            v, i = cbor_item(b, i)
            out[k if not isinstance(k, list) else tuple(k)] = v
        return out, (i + 1 if arg is None else i)
    if major == 6:
        return cbor_item(b, i)
    raise ValueError(f"CBOR major type {major}")


def entries(path):
    data = path.read_bytes()
    i = 0
    while i < len(data):
        entry, i = cbor_item(data, i)
        yield entry["value"]


def ptx_text(value):
    ptx = value["ptx"]
    raw = ptx if isinstance(ptx, bytes) else bytes(c & 0xFF for c in ptx)
    return raw.split(b"\0", 1)[0].decode()


def find_ptxas(given):
    if given:
        return given
    found = shutil.which("ptxas")
    if found:
        return found
    try:
        import triton

        cand = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
        if cand.exists():
            return str(cand)
    except ImportError:
        pass
    sys.exit("ptx_report: no ptxas (pass --ptxas, or install triton)")


INFO = {
    "registers": re.compile(r"Used (\d+) registers"),
    "stack_frame_bytes": re.compile(r"(\d+) bytes stack frame"),
    "spill_store_bytes": re.compile(r"(\d+) bytes spill stores"),
    "spill_load_bytes": re.compile(r"(\d+) bytes spill loads"),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cache_dir", type=pathlib.Path)
    ap.add_argument("out_dir", type=pathlib.Path)
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--ptxas")
    args = ap.parse_args()
    chunks = sorted(args.cache_dir.rglob("*.cbor"))
    if not chunks:
        sys.exit(f"ptx_report: no *.cbor under {args.cache_dir}")
    ptxas = find_ptxas(args.ptxas)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    n = 0
    for chunk in chunks:
        for value in entries(chunk):
            name = value["entrypoint_name"]
            path = args.out_dir / f"{n:03d}-{name[:80]}.ptx"
            path.write_text(ptx_text(value))
            run = subprocess.run(
                [ptxas, "-v", f"--gpu-name={args.arch}", str(path), "-o", os.devnull],
                capture_output=True,
                text=True,
            )
            row = {"kernel": name, "ptx": path.name, "shared_mem_bytes": value["shared_mem_bytes"]}
            for key, pat in INFO.items():
                m = pat.search(run.stderr)
                row[key] = int(m.group(1)) if m else None
            if run.returncode != 0:
                row["ptxas_error"] = run.stderr.strip()[-400:]
            print(json.dumps(row), flush=True)
            n += 1
    if n == 0:
        sys.exit("ptx_report: the cache holds no kernels")


if __name__ == "__main__":
    main()

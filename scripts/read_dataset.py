#!/usr/bin/env python3
"""Read a recur dataset (docs/dataset-format.md) with numpy alone.

    python3 scripts/read_dataset.py DIR      # prints a summary
    chunks = read_dataset("DIR")              # list of dicts of numpy arrays
"""
import json
import struct
import sys
import zlib
from pathlib import Path

import numpy as np

HEADER = struct.Struct("<IIQQQIIQI")  # actor_id, incarnation, seq, policy_version, schema_hash, envs, steps, payload_len, crc


def columns(schema):
    """(key, dtype, per-step shape) in encoding order."""
    obs, state = (schema["obs_dim"],), (schema["num_layers"], schema["hidden_size"])
    action = schema["action"]
    cols = [("observation", "<f4", obs)]
    if action == "discrete":
        cols.append(("action", "<i8", ()))
    else:
        cols.append(("action", "<f4", (action["continuous"]["dim"],)))
    cols += [("sample_log_prob", "<f4", ()), ("state_value", "<f4", ()), ("is_init", "u1", ()), ("rs_h", "<f4", state)]
    if schema["cell"] == "lstm":
        cols.append(("rs_c", "<f4", state))
    cols += [
        ("next.observation", "<f4", obs), ("next.reward", "<f4", ()), ("next.terminated", "u1", ()),
        ("next.truncated", "u1", ()), ("next.done", "u1", ()), ("collector.traj_ids", "<i8", ()),
    ]
    return cols


def read_dataset(path):
    path = Path(path)
    meta = json.loads((path / "dataset.json").read_text())
    schema = meta["schema"]
    data = (path / "chunks.bin").read_bytes()
    if data[:8] != b"RECURDS1":
        raise ValueError("chunks.bin lacks the RECURDS1 header")
    e, t = schema["envs"], schema["steps"]
    chunks, off = [], 16
    while off + 16 <= len(data):
        if data[off:off + 8] != b"RECURCK1":
            raise ValueError(f"bad chunk magic at byte {off}")
        hl = struct.unpack_from("<I", data, off + 12)[0]
        if off + 16 + hl > len(data):
            break  # cut short
        actor, inc, seq, version, shash, envs, steps, plen, crc = HEADER.unpack_from(data, off + 16)
        start = off + 16 + hl
        if start + plen > len(data):
            break  # cut short
        payload = data[start:start + plen]
        if zlib.crc32(payload) != crc or shash != meta["schema_hash"]:
            raise ValueError(f"chunk at byte {off}: checksum or schema mismatch")
        chunk, pos = {"seq": seq, "actor_id": actor, "policy_version": version}, 0
        for key, dtype, shape in columns(schema):
            count = e * t * int(np.prod(shape, dtype=np.int64))
            arr = np.frombuffer(payload, dtype=dtype, count=count, offset=pos)
            chunk[key] = arr.reshape((e, t) + shape)
            pos += arr.nbytes
        chunks.append(chunk)
        off = start + plen
    return meta, chunks, len(data) - off


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[2] == "--json":
        # Per-column sums (float64) and counts, for cross-checking against other readers.
        meta, chunks, tail = read_dataset(sys.argv[1])
        sums = {}
        for c in chunks:
            for key, _, _ in columns(meta["schema"]):
                sums[key] = sums.get(key, 0.0) + float(c[key].astype(np.float64).sum())
        print(json.dumps({"chunks": len(chunks), "tail": tail, "seqs": [c["seq"] for c in chunks], "sums": sums}))
        sys.exit(0)
    meta, chunks, tail = read_dataset(sys.argv[1])
    frames = sum(c["observation"].shape[0] * c["observation"].shape[1] for c in chunks)
    episodes = sum(int(c["next.done"].sum()) for c in chunks)
    print(f"{meta['env']}: {len(chunks)} chunks, {frames} frames, {episodes} episodes ended, {tail} trailing bytes ignored")

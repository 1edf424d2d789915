#!/usr/bin/env python3
"""Read a recur dataset (docs/dataset-format.md) with numpy alone.

    python3 scripts/read_dataset.py DIR      # prints a summary
    chunks = read_dataset("DIR")              # list of dicts of numpy arrays

Each chunk holds every column as `[E, T, ...]`; with images, also `images` and `next.images`:
{key: uint8 array [E, T, H, W, C]} cut from the `pixels` columns (a bare image's key is "").
"""
import json
import struct
import sys
import zlib
from pathlib import Path

import numpy as np

VERSION = 3
HEADER = struct.Struct("<IIQQQIIQI")  # actor_id, incarnation, seq, policy_version, schema_hash, envs, steps, payload_len, crc


def columns(schema):
    """(key, dtype, per-step shape) in encoding order."""
    obs, state = (schema["obs_dim"],), (schema["num_layers"], schema["hidden_size"])
    action = schema["action"]
    pixels = sum(int(np.prod(im["shape"])) for im in schema.get("images", []))
    cols = [("observation", "<f4", obs)]
    if pixels:
        cols.append(("pixels", "u1", (pixels,)))
    if action == "discrete":
        cols.append(("action", "<i8", ()))
    elif "multidiscrete" in action:
        cols.append(("action", "<i8", (action["multidiscrete"]["dim"],)))
    else:
        cols.append(("action", "<f4", (action["continuous"]["dim"],)))
    cols += [("sample_log_prob", "<f4", ()), ("state_value", "<f4", ()), ("is_init", "u1", ()), ("rs_h", "<f4", state)]
    if schema["cell"] == "lstm":
        cols.append(("rs_c", "<f4", state))
    cols += [
        ("next.observation", "<f4", obs)]
    if pixels:
        cols.append(("next.pixels", "u1", (pixels,)))
    cols += [("next.reward", "<f4", ()), ("next.terminated", "u1", ()),
        ("next.truncated", "u1", ()), ("next.done", "u1", ()), ("collector.traj_ids", "<i8", ()),
    ]
    return cols


def images(schema, pixels):
    """{key: [E, T, H, W, C] uint8} cut from a `pixels` column `[E, T, P]`."""
    out, at = {}, 0
    for im in schema.get("images", []):
        size = int(np.prod(im["shape"]))
        out[im["key"]] = pixels[:, :, at:at + size].reshape(pixels.shape[:2] + tuple(im["shape"]))
        at += size
    return out


def chunk_files(path, meta):
    """The chunk files in order: chunks-00000.bin, chunks-00001.bin, ..."""
    files, i = [], 0
    while (path / f"chunks-{i:05d}.bin").exists():
        files.append(path / f"chunks-{i:05d}.bin")
        i += 1
    return files


def read_index(path):
    """index.bin records as a numpy structured array (file, actor_id, offset, length, seq)."""
    data = (Path(path) / "index.bin").read_bytes()
    if data[:8] != b"RECURIX1":
        raise ValueError("index.bin lacks the RECURIX1 header")
    n = (len(data) - 16) // 32  # a record cut short by a crash is left out
    dtype = np.dtype([("file", "<u4"), ("actor_id", "<u4"), ("offset", "<u8"), ("length", "<u8"), ("seq", "<u8")])
    return np.frombuffer(data, dtype=dtype, count=n, offset=16)


def decode_chunk(data, off, meta):
    """The chunk at byte `off` of `data` as a dict of numpy arrays, with its end offset;
    None if it runs past the end of `data` (a write cut short)."""
    schema = meta["schema"]
    e, t = schema["envs"], schema["steps"]
    if off + 16 > len(data):
        return None
    if data[off:off + 8] != b"RECURCK1":
        raise ValueError(f"bad chunk magic at byte {off}")
    hl = struct.unpack_from("<I", data, off + 12)[0]
    if off + 16 + hl > len(data):
        return None
    actor, inc, seq, version, shash, envs, steps, plen, crc = HEADER.unpack_from(data, off + 16)
    start = off + 16 + hl
    if start + plen > len(data):
        return None
    payload = data[start:start + plen]
    if zlib.crc32(payload) != crc or shash != meta["schema_hash"]:
        raise ValueError(f"chunk at byte {off}: checksum or schema mismatch")
    chunk, pos = {"seq": seq, "actor_id": actor, "incarnation": inc, "policy_version": version}, 0
    for key, dtype, shape in columns(schema):
        count = e * t * int(np.prod(shape, dtype=np.int64))
        arr = np.frombuffer(payload, dtype=dtype, count=count, offset=pos)
        chunk[key] = arr.reshape((e, t) + shape)
        pos += arr.nbytes
    if "pixels" in chunk:
        chunk["images"] = images(schema, chunk["pixels"])
        chunk["next.images"] = images(schema, chunk["next.pixels"])
    return chunk, start + plen


def read_dataset(path):
    """(meta, chunks, ignored tail bytes of the last file): every complete chunk, file by file."""
    path = Path(path)
    meta = json.loads((path / "dataset.json").read_text())
    if meta.get("format") != "recur-dataset" or meta.get("version") != VERSION:
        raise ValueError(f"{path}: format {meta.get('format')!r} version {meta.get('version')}, "
                         f"this reader reads recur-dataset version {VERSION}"
                         + (" (an earlier recur's: record the dataset again)"
                            if isinstance(meta.get("version"), int) and meta["version"] < VERSION else ""))
    chunks, tail = [], 0
    for f in chunk_files(path, meta):
        data = f.read_bytes()
        if data[:8] != b"RECURDS1":
            raise ValueError(f"{f.name} lacks the RECURDS1 header")
        off = 16
        while off < len(data):
            got = decode_chunk(data, off, meta)
            if got is None:
                break  # cut short
            chunk, off = got
            chunks.append(chunk)
        tail = len(data) - off
    return meta, chunks, tail


def read_indexed_chunk(path, meta, record):
    """Random access: the chunk an index.bin record points at."""
    with open(Path(path) / f"chunks-{int(record['file']):05d}.bin", "rb") as f:
        f.seek(int(record["offset"]))
        data = f.read(int(record["length"]))
    return decode_chunk(data, 0, meta)[0]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[2] == "--json":
        # Per-column sums (float64) and counts, for cross-checking against other readers.
        meta, chunks, tail = read_dataset(sys.argv[1])
        sums = {}
        for c in chunks:
            for key, _, _ in columns(meta["schema"]):
                sums[key] = sums.get(key, 0.0) + float(c[key].astype(np.float64).sum())
        index = read_index(sys.argv[1])
        # Random access through the index agrees with the sequential read.
        for k, record in enumerate(index):
            c = read_indexed_chunk(sys.argv[1], meta, record)
            if c["seq"] != chunks[k]["seq"] or not np.array_equal(c["observation"], chunks[k]["observation"]):
                raise ValueError(f"index record {k} points at another chunk")
        print(json.dumps({"chunks": len(chunks), "indexed": len(index), "tail": tail,
                          "seqs": [c["seq"] for c in chunks], "sums": sums}))
        sys.exit(0)
    meta, chunks, tail = read_dataset(sys.argv[1])
    frames = sum(c["observation"].shape[0] * c["observation"].shape[1] for c in chunks)
    episodes = sum(int(c["next.done"].sum()) for c in chunks)
    print(f"{meta['env']}: {len(chunks)} chunks, {frames} frames, {episodes} episodes ended, {tail} trailing bytes ignored")

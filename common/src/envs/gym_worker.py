"""recur's gymnasium worker: steps E gymnasium environments for one actor.

Started by the actor (common/src/envs/gymnasium/worker.rs) as `python -c <this file> CONFIG_JSON`.
Needs only gymnasium and numpy. Protocol (the actor is the only peer):

1. The worker imports `imports`, builds E envs with gymnasium.make(id, **kwargs) and writes one
   JSON line on the protocol pipe (the original stdout; sys.stdout is redirected to stderr so
   that environments that print cannot corrupt it): the flattened spaces, or an error.
2. The actor answers with one JSON line on stdin: the shared-memory file, the array offsets,
   the vector's `seed` and `first_env`, the vector index of this worker's env 0 (seed contract:
   episode n of vector env j, counting every reset from 0, is reset with
   `seed=episode_seed(seed, j, n)`, as recur's native vector resets it).
3. Then one command at a time on stdin: b"R" reset all; b"S" followed by two little-endian
   u32 `lo`, `hi`: step envs lo..hi (this worker's indices; actions read from their rows of
   shared memory); b"Q" quit. Each is answered with b"K" when those rows of the arrays are
   written, or b"E" followed by one JSON line describing the error. Commands are handled in
   order, so the actor may queue a second group's step while the first one runs (it then
   touches only the rows of groups it holds the answer for).

Observations travel in two lanes (common/src/envs/space.rs): images, a uint8 Box of shape
(H, W, C) or (H, W), keep their shape and go to the pixels lane (one byte a pixel); everything
else is flattened into float32 in the values lane: Box (any shape, C order), Discrete (one-hot),
MultiDiscrete (concatenated one-hots), Tuple and Dict (their parts in order). A Dict at the top
level is reported part by part, its keys sorted (the config's `keys` keep some of them); an image
anywhere else is not supported. Every step checks an image's shape and dtype.
"""

import json
import os
import struct
import sys
import traceback

# The protocol pipe: the original stdout. Only when run as the worker; a test that imports this
# file for its `flattener` keeps its own stdout.
PROTO = None
if __name__ == "__main__":
    PROTO = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

F32_MAX = 3.4028234663852886e38


def write_all(data):
    view = memoryview(data)
    while view:
        view = view[PROTO.write(view):]


def send(obj):
    write_all((json.dumps(obj) + "\n").encode())


def fail(kind, message):
    send({"ok": False, "kind": kind, "error": message})
    sys.exit(3)


def clamp(v):
    v = float(v)
    if v != v:
        return 0.0
    return max(-F32_MAX, min(F32_MAX, v))


MASK64 = (1 << 64) - 1


def splitmix64(x):
    """SplitMix64's output function (Steele, Lea & Flood 2014) applied once to `x`."""
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def episode_seed(seed, env_index, episode):
    """The reset seed of env `env_index`'s episode `episode` (from 0) in a vector seeded with
    `seed`: recur's `common::envs::episode_seed`, below 2**32."""
    return splitmix64(splitmix64(splitmix64(seed & MASK64) ^ env_index) ^ episode) >> 32


try:
    import numpy as np
except Exception:  # noqa: BLE001
    fail("missing", traceback.format_exc(limit=1))
try:
    import gymnasium as gym
    from gymnasium import spaces
except Exception:  # noqa: BLE001
    fail("missing", traceback.format_exc(limit=1))


class Unsupported(Exception):
    pass


def describe(space):
    return repr(space)


def is_image(space):
    """A uint8 Box of shape (H, W, C) or (H, W): an image, kept whole in the pixels lane."""
    return (isinstance(space, spaces.Box) and space.dtype == np.uint8
            and len(space.shape) in (2, 3) and all(int(n) > 0 for n in space.shape))


def image_shape(space):
    shape = tuple(int(n) for n in space.shape)
    return shape if len(shape) == 3 else shape + (1,)


def lanes(space, keys=None):
    """The observation space as the two lanes: (description for the actor, values size, pixels
    size, write(value, values_row, pixels_row)). `keys`: the Dict keys to keep (None: all)."""
    if is_image(space):
        shape, size = image_shape(space), int(np.prod(space.shape))

        def write(v, _values, pixels, key="the observation"):
            a = np.asarray(v)
            if a.dtype != np.uint8 or a.shape != space.shape:
                raise ValueError("%s: expected an image of shape %s and dtype uint8, received "
                                 "shape %s and dtype %s" % (key, tuple(space.shape), a.shape, a.dtype))
            pixels[:] = a.reshape(-1)

        return {"kind": "image", "shape": shape}, 0, size, write
    if isinstance(space, spaces.Dict):
        all_keys = sorted(space.spaces.keys())
        if keys is None:
            keys = all_keys
        else:
            missing = [k for k in keys if k not in space.spaces]
            if missing:
                raise Unsupported("%s: no key %r; its keys are %s (run.env_keys)"
                                  % (describe(space), missing[0], all_keys))
            keys = sorted(keys)
        parts, writers, v_at, p_at = [], [], 0, 0
        for k in keys:
            sub = space.spaces[k]
            image = is_image(sub)
            try:
                if image:
                    desc, dv, dp, w = lanes(sub)
                else:
                    size, low, high, w = flattener(sub)
                    desc, dv, dp = {"kind": "box", "low": low, "high": high}, size, 0
            except Unsupported:
                kept = [x for x in all_keys if x != k]
                raise Unsupported("%s: key %r (%s) cannot be fed to the policy; keep the others "
                                  "with run.env_keys = %s (recur-actor --env-keys %s)"
                                  % (describe(space), k, describe(sub), json.dumps(kept),
                                     ",".join(kept)))
            parts.append([k, desc])
            writers.append((k, image, w, v_at, v_at + dv, p_at, p_at + dp))
            v_at, p_at = v_at + dv, p_at + dp

        def write(v, values, pixels):
            for k, image, w, v0, v1, p0, p1 in writers:
                if image:
                    w(v[k], None, pixels[p0:p1], key="key %r" % k)
                else:
                    w(v[k], values[v0:v1])

        return {"kind": "dict", "parts": parts}, v_at, p_at, write
    if keys is not None:
        raise Unsupported("%s is not a Dict, so run.env_keys does not apply" % describe(space))
    size, low, high, w = flattener(space)
    return {"kind": "box", "low": low, "high": high}, size, 0, lambda v, values, _p: w(v, values)


def flattener(space):
    """(size, low, high, write(value, out_view)) for an observation space without images."""
    if is_image(space):
        raise Unsupported(describe(space) + " (an image is supported alone or as a key of a "
                          "top-level Dict)")
    if isinstance(space, spaces.Box):
        size = int(np.prod(space.shape)) if space.shape else 1
        low = [clamp(x) for x in np.broadcast_to(space.low, space.shape).reshape(-1)]
        high = [clamp(x) for x in np.broadcast_to(space.high, space.shape).reshape(-1)]

        shape = tuple(space.shape)

        def write(v, out):
            a = np.asarray(v, dtype=np.float32)
            if a.shape != shape:
                raise ValueError("expected an observation of shape %s, received shape %s"
                                 % (shape, a.shape))
            out[:] = a.reshape(-1)

        return size, low, high, write
    if isinstance(space, spaces.Discrete):
        n, start = int(space.n), int(space.start)

        def write(v, out):
            out[:] = 0.0
            out[int(v) - start] = 1.0

        return n, [0.0] * n, [1.0] * n, write
    if isinstance(space, spaces.MultiDiscrete):
        nvec = [int(x) for x in np.asarray(space.nvec).reshape(-1)]
        starts = [int(x) for x in np.asarray(space.start).reshape(-1)]
        offsets = np.cumsum([0] + nvec[:-1])
        size = sum(nvec)

        def write(v, out):
            out[:] = 0.0
            idx = np.asarray(v).reshape(-1) - starts + offsets
            out[idx] = 1.0

        return size, [0.0] * size, [1.0] * size, write
    if isinstance(space, (spaces.Tuple, spaces.Dict)):
        if isinstance(space, spaces.Tuple):
            keys = list(range(len(space.spaces)))
            parts = list(space.spaces)
        else:
            keys = list(space.spaces.keys())
            parts = [space.spaces[k] for k in keys]
        subs = [flattener(p) for p in parts]
        size = sum(s[0] for s in subs)
        low = [x for s in subs for x in s[1]]
        high = [x for s in subs for x in s[2]]
        bounds = np.cumsum([0] + [s[0] for s in subs])

        def write(v, out):
            for j, (k, s) in enumerate(zip(keys, subs)):
                s[3](v[k], out[bounds[j]:bounds[j + 1]])

        return size, low, high, write
    raise Unsupported(describe(space))


def action_codec(space):
    """(JSON description for the actor, decode(i64 rows, f32 rows) -> list of gymnasium actions).

    The rows are views of shared memory; every action handed to an env is a fresh object, so an
    env that keeps its action never sees the next step's.
    """
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        return {"kind": "discrete", "n": int(space.n)}, lambda ints, _f: [
            start + a for a in ints[:, 0].tolist()
        ]
    if isinstance(space, spaces.Box) and len(space.shape) <= 1:
        lo = np.broadcast_to(space.low, space.shape).reshape(-1)
        hi = np.broadcast_to(space.high, space.shape).reshape(-1)
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
            raise Unsupported(describe(space) + " (a Box action space needs finite bounds)")
        dtype, shape = space.dtype, space.shape
        desc = {"kind": "box", "low": [float(x) for x in lo], "high": [float(x) for x in hi]}
        return desc, lambda _i, f: list(f.astype(dtype).reshape((len(f),) + shape))
    if isinstance(space, spaces.MultiDiscrete) and np.asarray(space.nvec).ndim == 1:
        starts = np.asarray(space.start, dtype=np.int64)
        dtype = space.dtype
        desc = {"kind": "multidiscrete", "nvec": [int(x) for x in space.nvec]}
        return desc, lambda ints, _f: list((ints + starts).astype(dtype))
    raise Unsupported(describe(space))


def command_reader(spin):
    """read(n) -> the next n bytes of stdin (b"" at its end). Reads the raw descriptor into its
    own buffer; when none is buffered it first polls for up to `spin` seconds without sleeping
    (the actor's next command usually follows within microseconds, and a sleeping worker costs
    a wake-up), then blocks."""
    import select
    import time

    buf = bytearray()

    def read(n):
        while len(buf) < n:
            if spin > 0:
                until = time.perf_counter() + spin
                while not select.select([0], [], [], 0)[0] and time.perf_counter() < until:
                    os.sched_yield()
            chunk = os.read(0, 4096)
            if not chunk:
                return b""
            buf.extend(chunk)
        out = bytes(buf[:n])
        del buf[:n]
        return out

    return read


def main():
    config = json.loads(sys.argv[1])
    env_id, num_envs = config["id"], int(config["num_envs"])
    for module in config.get("imports", []):
        try:
            __import__(module)
        except Exception:  # noqa: BLE001
            fail("import", "importing %r failed:\n%s" % (module, traceback.format_exc()))
    kwargs = config.get("kwargs") or {}
    try:
        envs = [gym.make(env_id, **kwargs) for _ in range(num_envs)]
    except Exception:  # noqa: BLE001
        fail("make", "gymnasium.make(%r, **%r) failed:\n%s" % (env_id, kwargs, traceback.format_exc()))
    try:
        obs_desc, obs_size, px_size, write_lanes = lanes(envs[0].observation_space,
                                                         config.get("keys"))
    except Unsupported as e:
        fail("space", "observation space %s is not supported (Box, Discrete, MultiDiscrete, "
             "Tuple and Dict of these are, and uint8 images alone or as keys of a Dict)" % e)
    try:
        action_desc, decode = action_codec(envs[0].action_space)
    except Unsupported as e:
        fail("space", "action space %s is not supported (Discrete, Box with finite bounds, "
             "MultiDiscrete are)" % e)
    spec = envs[0].spec
    send({
        "ok": True,
        "observation_space": obs_desc,
        "action_space": action_desc,
        "max_episode_steps": spec.max_episode_steps if spec is not None else None,
        "observation_space_repr": describe(envs[0].observation_space),
        "action_space_repr": describe(envs[0].action_space),
    })

    read_cmd = command_reader(float(config.get("spin_us", 0)) * 1e-6)
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = read_cmd(1)
        if not byte:
            return
        line += byte
    layout = json.loads(bytes(line))
    import mmap

    fd = os.open(layout["path"], os.O_RDWR)
    mem = mmap.mmap(fd, 0)
    os.close(fd)
    base = int(layout["body_offset"])
    a_dim = int(layout["action_dim"])

    def view(dtype, key, count):
        return np.frombuffer(mem, dtype=dtype, count=count, offset=base + int(layout[key]))

    act_i = view(np.int64, "actions_i64", num_envs * a_dim).reshape(num_envs, a_dim)
    act_f = view(np.float32, "actions_f32", num_envs * a_dim).reshape(num_envs, a_dim)
    obs = view(np.float32, "obs", num_envs * obs_size).reshape(num_envs, obs_size)
    next_obs = view(np.float32, "next_obs", num_envs * obs_size).reshape(num_envs, obs_size)
    obs_px = view(np.uint8, "obs_pixels", num_envs * px_size).reshape(num_envs, px_size)
    next_px = view(np.uint8, "next_obs_pixels", num_envs * px_size).reshape(num_envs, px_size)

    def write_obs(o, i, values, pixels):
        write_lanes(o, values[i], pixels[i])

    reward = view(np.float64, "reward", num_envs)
    terminated = view(np.uint8, "terminated", num_envs)
    truncated = view(np.uint8, "truncated", num_envs)
    seed, first_env = int(layout["seed"]), int(layout["first_env"])
    # Episodes started per env: the next episode's index in the seed contract.
    episodes = [0] * num_envs
    steps = [env.step for env in envs]
    resets = [env.reset for env in envs]

    def reset(i):
        """Starts env i's next episode, seeded as the contract says; its first observation."""
        o, _ = resets[i](seed=episode_seed(seed, first_env + i, episodes[i]))
        episodes[i] += 1
        return o

    # A Box observation space of float values: a group's observations are written with one
    # assignment (its shape checked once for the group).
    box_obs = obs_desc["kind"] == "box" and isinstance(envs[0].observation_space, spaces.Box)
    box_shape = tuple(envs[0].observation_space.shape) if box_obs else None

    def step(lo, hi):
        """Steps envs lo..hi with their actions; autoreset where an episode ended."""
        n = hi - lo
        actions = decode(act_i[lo:hi], act_f[lo:hi])
        outs, rewards, terms, truncs, done = [None] * n, [0.0] * n, [False] * n, [False] * n, []
        for j in range(n):
            o, r, term, trunc, _ = steps[lo + j](actions[j])
            outs[j], rewards[j], terms[j], truncs[j] = o, r, term, trunc
            if term or trunc:
                done.append(j)
        if box_obs:
            batch = np.asarray(outs, dtype=np.float32)
            if batch.shape != (n,) + box_shape:
                for j in range(n):  # names the env whose observation is off
                    write_obs(outs[j], lo + j, next_obs, next_px)
            next_obs[lo:hi] = batch.reshape(n, obs_size)
        else:
            for j in range(n):
                write_obs(outs[j], lo + j, next_obs, next_px)
        reward[lo:hi] = rewards
        terminated[lo:hi] = terms
        truncated[lo:hi] = truncs
        obs[lo:hi] = next_obs[lo:hi]
        obs_px[lo:hi] = next_px[lo:hi]
        for j in done:
            write_obs(reset(lo + j), lo + j, obs, obs_px)

    unpack = struct.Struct("<II").unpack
    while True:
        cmd = read_cmd(1)
        if cmd in (b"", b"Q"):
            return
        try:
            if cmd == b"S":
                lo, hi = unpack(read_cmd(8))
                if not 0 <= lo < hi <= num_envs:
                    raise ValueError("step of envs %d..%d of %d" % (lo, hi, num_envs))
                step(lo, hi)
            elif cmd == b"R":
                for i in range(num_envs):
                    write_obs(reset(i), i, obs, obs_px)
            else:
                raise ValueError("unknown command %r" % cmd)
        except Exception:  # noqa: BLE001
            write_all(b"E")
            send({"ok": False, "kind": "step", "error": traceback.format_exc()})
            continue
        PROTO.write(b"K")

if __name__ == "__main__":
    main()

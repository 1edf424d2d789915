"""MMER of uniformly random actions on a popgym id, with the side-by-side's bookkeeping: 8 envs
(SB3's n_envs), the mean of the last 100 (and 20) finished episodes taken every `every` frames,
the max over the run."""
import argparse, collections, json
import gymnasium as gym, numpy as np, popgym  # noqa: F401
ap = argparse.ArgumentParser()
ap.add_argument("--env"); ap.add_argument("--seed", type=int); ap.add_argument("--frames", type=int)
ap.add_argument("--every", type=int, default=256)
a = ap.parse_args()
envs = [gym.make(a.env) for _ in range(8)]
rng = np.random.default_rng(a.seed)
for i, e in enumerate(envs):
    e.reset(seed=a.seed * 100 + i); e.action_space.seed(a.seed * 100 + i)
ret = [0.0] * 8; last100 = collections.deque(maxlen=100); last20 = collections.deque(maxlen=20)
best100 = best20 = -1e9; frames = 0
while frames < a.frames:
    for i, e in enumerate(envs):
        _, r, term, trunc, _ = e.step(e.action_space.sample())
        ret[i] += r
        if term or trunc:
            last100.append(ret[i]); last20.append(ret[i]); ret[i] = 0.0; e.reset()
    frames += 8
    if frames % a.every == 0:
        if len(last100): best100 = max(best100, float(np.mean(last100)))
        if len(last20): best20 = max(best20, float(np.mean(last20)))
print(json.dumps({"env": a.env, "seed": a.seed, "frames": frames, "policy": "uniform random",
                  "every": a.every, "mmer": best20, "mmer_100": best100}))

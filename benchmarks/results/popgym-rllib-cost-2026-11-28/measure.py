"""Developer tool: time the POPGym paper's own training setup on this machine.

What it measures
----------------
Wall-clock cost per training iteration of the POPGym baseline setup, i.e.
RLlib PPO (old API stack, torch) with popgym's GRU memory model, built
exactly as ``popgym/baselines/ppo.py`` (popgym 1.0.7) builds it:

* model: ``popgym.baselines.ray_models.ray_gru.GRU``, h=128, h_memory=256,
  same preprocessor / actor / critic modules, ``max_seq_len`` = 1024;
* env: ``wrappers.Antialias(wrappers.PreviousAction(env))``;
* 4 rollout workers x 16 envs per worker, rollout_fragment_length 1024,
  train_batch_size = 1024 * 4 * 16 = 65536, sgd_minibatch_size = 8 * 1024,
  gamma 0.99, vf_loss_coeff 1.0, batch_mode complete_episodes,
  min_sample_timesteps_per_iteration = train_batch_size, "horizon" 1024
  (the paper's runs stopped at 15M timesteps); everything else is the RLlib
  PPO default of the installed ray (e.g. num_sgd_iter 30, lr 5e-5);
* only change: num_gpus = 0 (the paper used 0.25 GPU per trial).

It runs N iterations through the Algorithm object directly (no Tune) and
prints one JSON line per iteration, phase-timing lines (sampling, SGD
progress), and a final summary line with the mean seconds per iteration
after the first (warm-up) one, seconds per 1k timesteps and the
extrapolation to a full 15M-timestep run.

Not part of recur; run it in a venv of its own (README.md beside it), e.g.

    nice -n 19 VENV/bin/python measure.py \
        --env popgym-RepeatPreviousEasy-v0 --iters 3 --out results.jsonl
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "1")

import ray  # noqa: E402
import torch  # noqa: E402
from ray.tune.registry import register_env  # noqa: E402

import popgym  # noqa: E402
from popgym import wrappers  # noqa: E402
from popgym.baselines.ray_models.ray_gru import GRU  # noqa: E402

PAPER_TOTAL_STEPS = 15e6
T0 = time.time()
OUT_FILE = None


def emit(rec):
    rec = dict(rec)
    rec.setdefault("wall_s", round(time.time() - T0, 3))
    line = json.dumps(rec)
    print(line, flush=True)
    if OUT_FILE:
        with open(OUT_FILE, "a") as f:
            f.write(line + "\n")


def build_config(env_id, num_workers, num_envs_per_worker, num_minibatch=8):
    """The config dict of popgym/baselines/ppo.py for one env and the GRU."""
    bptt_cutoff = 1024
    h = 128
    h_memory = 256
    train_batch_size = bptt_cutoff * max(num_workers, 1) * num_envs_per_worker
    return {
        "env": env_id,
        "framework": "torch",
        "num_workers": num_workers,
        "num_envs_per_worker": num_envs_per_worker,
        "num_gpus": 0,  # paper: POPGYM_GPU default 0.25
        "vf_loss_coeff": 1.0,
        "train_batch_size": train_batch_size,
        "rollout_fragment_length": bptt_cutoff,
        "sgd_minibatch_size": num_minibatch * bptt_cutoff,
        "gamma": 0.99,
        "horizon": bptt_cutoff,
        "batch_mode": "complete_episodes",
        "min_sample_timesteps_per_iteration": train_batch_size,
        "model": {
            "max_seq_len": bptt_cutoff,
            "custom_model": GRU,
            "custom_model_config": {
                "preprocessor_input_size": h,
                "preprocessor": torch.nn.Sequential(
                    torch.nn.Linear(h, h),
                    torch.nn.LeakyReLU(inplace=True),
                ),
                "preprocessor_output_size": h,
                "hidden_size": h_memory,
                "postprocessor": torch.nn.Identity(),
                "actor": torch.nn.Sequential(
                    torch.nn.Linear(h_memory, h),
                    torch.nn.LeakyReLU(inplace=True),
                    torch.nn.Linear(h, h),
                    torch.nn.LeakyReLU(inplace=True),
                ),
                "critic": torch.nn.Sequential(
                    torch.nn.Linear(h_memory, h),
                    torch.nn.LeakyReLU(inplace=True),
                    torch.nn.Linear(h, h),
                    torch.nn.LeakyReLU(inplace=True),
                ),
                "postprocessor_output_size": h,
            },
        },
    }


def register(env_id):
    cls = next(c for c, info in popgym.envs.ALL.items() if info["id"] == env_id)

    def creator(_env_config, cls=cls):
        return wrappers.Antialias(wrappers.PreviousAction(cls()))

    register_env(env_id, creator)


def install_phase_timers(sgd_steps_per_iter):
    """Wrap PPO's sampling / SGD calls (driver side only) to print phase times."""
    import ray.rllib.algorithms.ppo.ppo as ppo_mod
    from ray.rllib.policy.torch_policy_v2 import TorchPolicyV2

    orig_sample = ppo_mod.synchronous_parallel_sample
    orig_multi = ppo_mod.multi_gpu_train_one_step
    orig_simple = ppo_mod.train_one_step
    orig_loaded = TorchPolicyV2.learn_on_loaded_batch
    state = {"sgd_calls": 0, "sgd_t0": None}

    def sample(*a, **kw):
        t = time.time()
        batch = orig_sample(*a, **kw)
        dt = time.time() - t
        steps = batch.env_steps()
        emit({"phase": "sample", "seconds": round(dt, 3), "env_steps": steps,
              "steps_per_s": round(steps / dt, 1) if dt > 0 else None})
        return batch

    def timed_train(orig, name):
        def f(*a, **kw):
            state["sgd_calls"] = 0
            state["sgd_t0"] = t = time.time()
            res = orig(*a, **kw)
            emit({"phase": "learn", "fn": name, "seconds": round(time.time() - t, 3),
                  "minibatch_updates": state["sgd_calls"]})
            return res
        return f

    def loaded(self, *a, **kw):
        res = orig_loaded(self, *a, **kw)
        state["sgd_calls"] += 1
        n = state["sgd_calls"]
        every = max(1, sgd_steps_per_iter // 10)
        if n % every == 0:
            emit({"phase": "sgd_progress", "minibatch_updates": n,
                  "expected_per_iter": sgd_steps_per_iter,
                  "seconds_in_learn": round(time.time() - state["sgd_t0"], 3)})
        return res

    ppo_mod.synchronous_parallel_sample = sample
    ppo_mod.multi_gpu_train_one_step = timed_train(orig_multi, "multi_gpu_train_one_step")
    ppo_mod.train_one_step = timed_train(orig_simple, "train_one_step")
    TorchPolicyV2.learn_on_loaded_batch = loaded


def main():
    global OUT_FILE
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="popgym-RepeatPreviousEasy-v0")
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--envs-per-worker", type=int, default=16)
    p.add_argument("--minibatches", type=int, default=8,
                   help="sgd_minibatch_size = this * 1024 (paper: 8); lower it only "
                   "for tiny smoke runs with fewer workers/envs")
    p.add_argument("--out", default=None, help="append the JSON lines to this file")
    args = p.parse_args()
    OUT_FILE = args.out

    register(args.env)
    config = build_config(args.env, args.workers, args.envs_per_worker,
                          args.minibatches)
    # RLlib asks 1 logical CPU per rollout worker plus 1 for the driver; on a
    # small machine declare enough logical CPUs so the actors get scheduled
    # (this oversubscribes the real cores; it changes no training setting).
    num_cpus = max(os.cpu_count() or 1, args.workers + 1)
    ray.init(num_cpus=num_cpus, include_dashboard=False,
             object_store_memory=2 * 1024**3, log_to_driver=True)

    from ray.rllib.algorithms.ppo import PPO

    sgd_steps = 30 * (config["train_batch_size"] // config["sgd_minibatch_size"])
    install_phase_timers(sgd_steps)
    emit({"event": "start", "env": args.env, "ray": ray.__version__,
          "torch": torch.__version__, "popgym": popgym_version(),
          "workers": args.workers, "envs_per_worker": args.envs_per_worker,
          "train_batch_size": config["train_batch_size"],
          "sgd_minibatch_size": config["sgd_minibatch_size"],
          "logical_cpus": num_cpus, "os_cpus": os.cpu_count(),
          "torch_threads": torch.get_num_threads()})

    t_build = time.time()
    algo = PPO(config=config)
    emit({"event": "built", "build_s": round(time.time() - t_build, 3),
          "num_sgd_iter": algo.config.num_sgd_iter, "lr": algo.config.lr,
          "simple_optimizer": algo.config.simple_optimizer})

    iters = []
    prev_ts = 0
    for i in range(args.iters):
        t = time.time()
        r = algo.train()
        dt = time.time() - t
        ts = r["timesteps_total"]
        timers = r.get("timers", {})
        rec = {"iteration": r["training_iteration"], "timesteps_total": ts,
               "timesteps_this_iter": ts - prev_ts,
               "iter_s": round(dt, 3),
               "episode_reward_mean": r.get("episode_reward_mean"),
               "episodes_this_iter": r.get("episodes_this_iter"),
               "sample_time_ms": timers.get("sample_time_ms"),
               "learn_time_ms": timers.get("learn_time_ms")}
        emit(rec)
        iters.append((dt, ts - prev_ts))
        prev_ts = ts

    post = iters[1:] if len(iters) > 1 else iters
    mean_s = sum(d for d, _ in post) / len(post)
    mean_ts = sum(n for _, n in post) / len(post)
    emit({"summary": True, "env": args.env, "iters": len(iters),
          "warmup_excluded": len(iters) > 1,
          "mean_iter_s": round(mean_s, 3),
          "mean_timesteps_per_iter": mean_ts,
          "s_per_1k_timesteps": round(1000 * mean_s / mean_ts, 4),
          "extrapolated_15M_s": round(PAPER_TOTAL_STEPS / mean_ts * mean_s, 1),
          "extrapolated_15M_h": round(PAPER_TOTAL_STEPS / mean_ts * mean_s / 3600, 3)})
    algo.stop()
    ray.shutdown()


def popgym_version():
    try:
        from importlib.metadata import version
        return version("popgym")
    except Exception:  # pragma: no cover
        return None


if __name__ == "__main__":
    sys.exit(main())

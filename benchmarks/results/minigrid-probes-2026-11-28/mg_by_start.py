import sys, collections
sys.path.insert(0, "/work/main/scripts")
import numpy as np, torch, gymnasium as gym, minigrid
import recur_policy
pol = recur_policy.load(sys.argv[1])
env_id = sys.argv[2] if len(sys.argv) > 2 else "MiniGrid-MemoryS7-v0"
n = int(sys.argv[3]) if len(sys.argv) > 3 else 200
greedy = (sys.argv[4] == "greedy") if len(sys.argv) > 4 else True
stats = collections.defaultdict(lambda: [0, 0, 0])
turned = collections.defaultdict(int)
torch.manual_seed(0)
for ep in range(n):
    env = gym.make(env_id)
    obs, _ = env.reset(seed=5000 + ep)
    x0 = int(env.unwrapped.agent_pos[0])
    state = pol.initial_state(1)
    is_init = torch.tensor([True])
    done = False; steps = 0; r = 0.0; acts = []
    while not done:
        o = torch.zeros(1, 4); o[0, obs["direction"]] = 1.0
        px = {"image": torch.tensor(obs["image"][None])}
        with torch.no_grad():
            a, state = pol.act(o, state, is_init, deterministic=greedy, pixels=px)
        a = int(a.reshape(-1)[0]); acts.append(a)
        obs, r, term, trunc, _ = env.step(a)
        done = term or trunc; steps += 1
        is_init = torch.tensor([False])
    s = stats[x0]; s[0] += 1; s[1] += r > 0; s[2] += steps
    if ep < 12: print("x0", x0, "success", r > 0, "steps", steps, "acts", acts[:20])
for x0 in sorted(stats):
    c, w, st = stats[x0]
    print(f"start x={x0}: episodes {c} success {w/c:.2f} mean steps {st/c:.1f}")

import sys; sys.path.insert(0,'/work/main/scripts')
import torch, numpy as np, gymnasium as gym, minigrid, recur_policy
pol = recur_policy.load(sys.argv[1])
env = gym.make('MiniGrid-MemoryS7-v0'); obs,_ = env.reset(seed=3)
o = torch.zeros(1,4); o[0,obs['direction']] = 1
px = {'image': torch.tensor(obs['image'][None])}
x = pol.encode(o, torch.tensor([True]), pixels=px) if hasattr(pol,'encode') else None
print(type(x), [t.shape for t in (x if isinstance(x,(list,tuple)) else [x])])
xx = x[0] if isinstance(x,(list,tuple)) else x
print('core input abs mean/max', xx.abs().mean().item(), xx.abs().max().item())
sd = dict(pol.named_parameters())
for k,v in sd.items():
    if 'weight_ih' in k or 'w_ih' in k: W=v
    if 'bias_ih' in k or 'b_ih' in k: b=v
pre = xx.reshape(1,-1) @ W.T + b
H = pre.shape[1]//4
for name,sl in zip('ifgo', range(4)):
    p = pre[0, sl*H:(sl+1)*H]
    print(name, 'preact abs mean %.2f max %.2f frac>3 %.2f' % (p.abs().mean(), p.abs().max(), (p.abs()>3).float().mean()))

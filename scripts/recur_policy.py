#!/usr/bin/env python3
"""A recur policy as a PyTorch module, from the directory `recur-learner export` writes.

Needs torch and safetensors only (no recur install). See docs/use-a-trained-policy.md.

    import recur_policy
    policy = recur_policy.load("exported/")          # a torch.nn.Module, in eval mode
    state = policy.initial_state(batch)              # {"rs_h": [B, S, H] (, "rs_c")}, zeros
    action, state = policy.act(obs, state, is_init, deterministic=True)
    params, value, state = policy(obs, state, is_init)
    params, value, state = policy(obs, state, is_init, pixels=pixels)   # a policy with images

`obs` is the observation's values lane as recur-actor encodes it, `[B, obs_dim]` float32 (`None`
for an observation of images alone, `obs_dim` 0); `is_init` `[B]` bool is true at the first
step of an episode: there the incoming state is replaced by zeros (recur's primer) before the
step. A policy with images (`policy.image_keys`) also takes `pixels`: recur's pixels lane,
`[B, P]` uint8 (every image back to back in `spec["images"]["parts"]` order, each `[H, W, C]`
row-major), or a dict `{key: [B, H, W, C]}` of the images (uint8, or any dtype holding the byte
values; an observation that is one image has the key `""`). The state is batch first, the layer axis after the batch:
`[B, S, H]`, `S` the state layers (`num_layers`, twice that with a separate critic core whose
layers follow the actor core's), as recur's chunks and the ONNX export hold it.

`params` is a dict with the names of the ONNX outputs: `{"logits": [B, n]}` (discrete;
multi-discrete: the components' logits concatenated) or `{"mean": [B, A], "log_std": [B, A]}`
(box: a tanh-squashed Gaussian, `log_std` clamped to [-5, 2]); `value` is `[B]`.
"""
import json
from pathlib import Path

import torch
from torch import nn

FORMAT = "recur-policy"
# Version 2 adds images (`images` in policy.json, `cnn.*` tensors); a policy without images is
# written as version 1.
FORMAT_VERSIONS = (1, 2)


class ObsNorm(nn.Module):
    """`clamp((obs - mean) / sqrt(var + eps), -clip, clip)` per feature (identity until trained)."""

    def __init__(self, obs_dim, eps):
        super().__init__()
        self.eps = eps
        self.register_buffer("mean", torch.zeros(obs_dim))
        self.register_buffer("var", torch.ones(obs_dim))
        self.register_buffer("count", torch.zeros(1))
        self.register_buffer("clip", torch.full((obs_dim,), torch.finfo(torch.float32).max))

    def forward(self, obs):
        x = (obs - self.mean) / torch.sqrt(self.var + self.eps)
        return torch.maximum(torch.minimum(x, self.clip), -self.clip)


class ImageEncoder(nn.Module):
    """One image's convolutional encoder (recur's `common::policy::image::ImageEncoder`):
    `[B, H, W, C]` byte values (with `onehot`: each channel's codes as their planes of 0 or 1)
    -> NCHW float32 times `scale` -> each layer (`nn.Conv2d` + ReLU,
    or `nn.MaxPool2d`) -> flatten in (C, H, W) order -> `nn.Linear` + ReLU -> `[B, features]`.
    `convs.{i}` is layer `i` of the cnn's `layers` (a max-pool has no parameters)."""

    def __init__(self, shape, cnn):
        super().__init__()
        self.shape, self.scale = tuple(shape), cnn["scale"]
        self.onehot = cnn.get("onehot")
        h, w, c = shape
        if self.onehot is not None:
            c = sum(self.onehot)
        self.convs = nn.ModuleList()
        for i, layer in enumerate(cnn["layers"]):
            if layer["type"] == "conv":
                k, s, p = layer["kernel"], layer["stride"], layer["padding"]
                self.convs.append(nn.Conv2d(c, layer["out_channels"], k, s, p))
                c, h, w = layer["out_channels"], (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
            elif layer["type"] == "maxpool":
                k = layer["kernel"]
                self.convs.append(nn.MaxPool2d(k))
                h, w = h // k, w // k
            else:
                raise ValueError(f"policy.json: images.cnn.layers[{i}].type {layer['type']!r} (conv, maxpool)")
        self.linear = nn.Linear(c * h * w, cnn["features"])

    def forward(self, image):
        """`image` `[B, H, W, C]` (or `[B, H*W*C]`) byte values -> `[B, features]`."""
        x = image.reshape((-1,) + self.shape).to(torch.float32)
        if self.onehot is not None:
            # Channel k's codes as its planes (a code past the range sets none).
            planes = [x[..., k:k + 1] == torch.arange(n, dtype=torch.float32)
                      for k, n in enumerate(self.onehot)]
            x = torch.cat(planes, dim=-1).to(torch.float32)
        x = x.permute(0, 3, 1, 2) * self.scale
        for layer in self.convs:
            x = layer(x)
            if isinstance(layer, nn.Conv2d):
                x = torch.relu(x)
        return torch.relu(self.linear(x.flatten(1)))


class MinGRU(nn.Module):
    """minGRU (Feng et al. 2024), one step per call, PyTorch-style parameter names
    (`weight_z_l{k}`, `weight_h_l{k}`, `bias_z_l{k}`, `bias_h_l{k}`):
    `z = sigmoid(x W_z^T + b_z)`, `h~ = g(x W_h^T + b_h)` with `g(v) = v + 0.5` for `v >= 0`
    and `sigmoid(v)` below, `h' = h + z (h~ - h)`; layer `k + 1` reads layer `k`'s `h'`."""

    def __init__(self, input_size, hidden_size, num_layers, bias=True):
        super().__init__()
        self.hidden_size, self.num_layers, self.bias = hidden_size, num_layers, bias
        for k in range(num_layers):
            inputs = input_size if k == 0 else hidden_size
            for gate in ("z", "h"):
                setattr(self, f"weight_{gate}_l{k}", nn.Parameter(torch.empty(hidden_size, inputs)))
            if bias:
                for gate in ("z", "h"):
                    setattr(self, f"bias_{gate}_l{k}", nn.Parameter(torch.empty(hidden_size)))

    def forward(self, x, h0):
        """`x` `[B, in]`, `h0` `[L, B, H]` -> (output `[B, H]`, `h_n` `[L, B, H]`)."""
        out = []
        for k in range(self.num_layers):
            b = (lambda g: getattr(self, f"bias_{g}_l{k}")) if self.bias else (lambda g: None)
            z = torch.sigmoid(nn.functional.linear(x, getattr(self, f"weight_z_l{k}"), b("z")))
            v = nn.functional.linear(x, getattr(self, f"weight_h_l{k}"), b("h"))
            candidate = torch.where(v >= 0, v + 0.5, torch.sigmoid(v))
            h = h0[k]
            x = h + z * (candidate - h)
            out.append(x)
        return x, torch.stack(out)


class RecurPolicy(nn.Module):
    """Observation normalizer -> encoder MLP (tanh) over the values, and one ImageEncoder per
    image of the pixels, concatenated in that order -> LSTM / GRU / minGRU core -> policy head
    and value head (the value head on a core of its own with `critic_core = "separate"`)."""

    def __init__(self, spec):
        super().__init__()
        if spec.get("format") != FORMAT or spec.get("format_version") not in FORMAT_VERSIONS:
            raise ValueError(
                f"policy.json: format {spec.get('format')!r} version {spec.get('format_version')!r}, "
                f"this module reads {FORMAT!r} versions {FORMAT_VERSIONS}"
            )
        self.spec = spec
        core = spec["core"]
        self.cell, self.hidden, self.num_layers = core["cell"], core["hidden_size"], core["num_layers"]
        self.obs_dim = spec["obs_dim"]
        # An observation of images alone has no values lane: no normalizer, no MLP.
        self.obs_norm = ObsNorm(self.obs_dim, spec["obs_norm"]["eps"]) if self.obs_dim > 0 else None
        self.encoder = nn.ModuleList()
        width = spec["obs_dim"]
        for w in spec["encoder"]["widths"]:
            self.encoder.append(nn.Linear(width, w))
            width = w
        if spec["encoder"]["activation"] != "tanh":
            raise ValueError(f"policy.json: encoder.activation {spec['encoder']['activation']!r}, expected 'tanh'")
        images = spec.get("images")
        self.image_parts = [] if images is None else images["parts"]
        self.image_keys = [p["key"] for p in self.image_parts]
        self.pixels = 0 if images is None else images["pixels"]
        self.cnn = nn.ModuleList()
        if images is not None:
            cnn = images["cnn"]
            if cnn.get("activation") != "relu" or cnn.get("flatten") != "chw" or images.get("dtype") != "uint8":
                raise ValueError(f"policy.json: images {images!r}: expected relu, chw, uint8")
            for k, part in enumerate(self.image_parts):
                if part["prefix"] != f"cnn.{k}":
                    raise ValueError(f"policy.json: images.parts[{k}].prefix {part['prefix']!r}, expected 'cnn.{k}'")
                self.cnn.append(ImageEncoder(part["shape"], cnn))
        self.core = self._core(core)
        self.critic_core = self._core(core) if spec["critic_core"] == "separate" else None
        (kind, action), = spec["action"].items()
        self.action_kind = kind
        if kind == "discrete":
            head = action["n"]
        elif kind == "multidiscrete":
            self.nvec = list(action["nvec"])
            head = sum(self.nvec)
        elif kind == "continuous":
            self.register_buffer("action_low", torch.tensor(action["low"], dtype=torch.float32), persistent=False)
            self.register_buffer("action_high", torch.tensor(action["high"], dtype=torch.float32), persistent=False)
            self.log_std_min = spec["distribution"]["log_std_min"]
            self.log_std_max = spec["distribution"]["log_std_max"]
            head = 2 * len(action["low"])
        else:
            raise ValueError(f"policy.json: unknown action space {kind!r}")
        self.policy_head = nn.Linear(self.hidden, head)
        self.value_head = nn.Linear(self.hidden, 1)
        self.state_shapes = {s["name"]: tuple(s["shape"]) for s in spec["state"]}

    def _core(self, core):
        args = (core["input_size"], core["hidden_size"], core["num_layers"])
        if core["cell"] == "lstm":
            return nn.LSTM(*args, bias=core["bias"])
        if core["cell"] == "gru":
            return nn.GRU(*args, bias=core["bias"])
        if core["cell"] == "mingru":
            return MinGRU(*args, bias=core["bias"])
        raise ValueError(f"policy.json: unknown cell {core['cell']!r} (lstm, gru, mingru)")

    def initial_state(self, batch):
        """The state at a reset for `batch` environments: zeros, `{"rs_h": [B, S, H] (, "rs_c")}`."""
        device = self.policy_head.weight.device
        return {k: torch.zeros((batch,) + shape, device=device) for k, shape in self.state_shapes.items()}

    def _run_core(self, core, x, h, c):
        """One step of `core` on `x` `[B, in]` from `h`, `c` `[B, L, H]` -> (features, h', c')."""
        h0 = h.transpose(0, 1).contiguous()
        if self.cell == "lstm":
            out, (h1, c1) = core(x.unsqueeze(0), (h0, c.transpose(0, 1).contiguous()))
            return out[0], h1.transpose(0, 1), c1.transpose(0, 1)
        if self.cell == "gru":
            out, h1 = core(x.unsqueeze(0), h0)
            return out[0], h1.transpose(0, 1), None
        out, h1 = core(x, h0)
        return out, h1.transpose(0, 1), None

    def images(self, pixels, batch):
        """`pixels` (`[B, P]` lane or `{key: [B, H, W, C]}`) as one `[B, H, W, C]` tensor per
        image, in `image_parts` order."""
        if pixels is None:
            raise ValueError(f"this policy observes images {self.image_keys}: pass pixels=")
        if isinstance(pixels, dict):
            missing = [k for k in self.image_keys if k not in pixels]
            if missing:
                raise ValueError(f"pixels: no image for keys {missing} (has {sorted(pixels)})")
            return [torch.as_tensor(pixels[k]).reshape((batch,) + tuple(p["shape"]))
                    for k, p in zip(self.image_keys, self.image_parts)]
        pixels = torch.as_tensor(pixels)
        if tuple(pixels.shape) != (batch, self.pixels):
            raise ValueError(f"pixels: shape {tuple(pixels.shape)}, expected {(batch, self.pixels)} (the pixels lane)")
        out = []
        for p in self.image_parts:
            size = p["shape"][0] * p["shape"][1] * p["shape"][2]
            out.append(pixels[:, p["offset"]:p["offset"] + size].reshape((batch,) + tuple(p["shape"])))
        return out

    def encode(self, obs, is_init, pixels=None):
        """The core's input: the encoder MLP over the normalized values (when `obs_dim` > 0),
        then each image's features, concatenated -> `[B, core.input_size]`."""
        parts = []
        if self.obs_dim > 0:
            x = self.obs_norm(obs)
            for layer in self.encoder:
                x = torch.tanh(layer(x))
            parts.append(x)
        if self.cnn:
            images = self.images(pixels, is_init.shape[0])
            parts.extend(cnn(image) for cnn, image in zip(self.cnn, images))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)

    def forward(self, obs, state, is_init, pixels=None):
        """One sequential step: `obs` `[B, obs_dim]` (`None` when `obs_dim` is 0), `state`
        `{"rs_h": [B, S, H] (, "rs_c")}`, `is_init` `[B]` bool (zeroes the incoming state of
        those rows first), `pixels` with images (see the module doc).
        Returns `(params, value [B], next_state)`."""
        reset = is_init.to(torch.bool).view(-1, 1, 1)
        h = torch.where(reset, 0.0, state["rs_h"])
        c = torch.where(reset, 0.0, state["rs_c"]) if "rs_c" in state else None
        x = self.encode(obs, is_init, pixels)
        n = self.num_layers
        part = lambda t, k: None if t is None else t[:, k * n:(k + 1) * n]
        features, h1, c1 = self._run_core(self.core, x, part(h, 0), part(c, 0))
        value_features = features
        if self.critic_core is not None:
            value_features, ch1, cc1 = self._run_core(self.critic_core, x, part(h, 1), part(c, 1))
            h1 = torch.cat([h1, ch1], dim=1)
            c1 = None if c1 is None else torch.cat([c1, cc1], dim=1)
        head = self.policy_head(features)
        value = self.value_head(value_features)[:, 0]
        if self.action_kind == "continuous":
            a = head.shape[1] // 2
            params = {"mean": head[:, :a], "log_std": head[:, a:].clamp(self.log_std_min, self.log_std_max)}
        else:
            params = {"logits": head}
        next_state = {"rs_h": h1} if c1 is None else {"rs_h": h1, "rs_c": c1}
        return params, value, next_state

    def distribution(self, params):
        """The action distribution of `params` (a `torch.distributions` object; for a box the
        pre-squash Normal: map a sample `u` with `squash(u)`)."""
        if self.action_kind == "discrete":
            return torch.distributions.Categorical(logits=params["logits"])
        if self.action_kind == "continuous":
            return torch.distributions.Normal(params["mean"], params["log_std"].exp())
        raise NotImplementedError("a multi-discrete policy: use the logits of each component")

    def squash(self, u):
        """A pre-squash Gaussian value into the action box: `low + (tanh(u) + 1) / 2 * (high - low)`."""
        return self.action_low + (torch.tanh(u) + 1.0) * 0.5 * (self.action_high - self.action_low)

    @torch.no_grad()
    def act(self, obs, state, is_init, deterministic=True, pixels=None):
        """One step: `(action, next_state)`. Deterministic: the argmax of the logits (of each
        component, multi-discrete), or the squashed mean (box), as `recur-actor --exploration
        greedy`; else a sample. Discrete actions are int64 `[B]` (`[B, K]` multi-discrete),
        box actions float32 `[B, A]`. `pixels` as in `forward`."""
        params, _, next_state = self(obs, state, is_init, pixels)
        if self.action_kind == "discrete":
            logits = params["logits"]
            action = logits.argmax(dim=1) if deterministic else torch.distributions.Categorical(logits=logits).sample()
        elif self.action_kind == "multidiscrete":
            parts = torch.split(params["logits"], self.nvec, dim=1)
            pick = (lambda l: l.argmax(dim=1)) if deterministic else (
                lambda l: torch.distributions.Categorical(logits=l).sample())
            action = torch.stack([pick(l) for l in parts], dim=1)
        else:
            mean = params["mean"]
            u = mean if deterministic else mean + params["log_std"].exp() * torch.randn_like(mean)
            action = self.squash(u)
        return action, next_state


def load(directory, device="cpu"):
    """The policy exported to `directory` (policy.json + policy.safetensors), in eval mode."""
    from safetensors.torch import load_file

    directory = Path(directory)
    spec = json.loads((directory / "policy.json").read_text())
    policy = RecurPolicy(spec)
    policy.load_state_dict(load_file(str(directory / "policy.safetensors")), strict=True)
    return policy.to(device).eval()


if __name__ == "__main__":
    import sys

    p = load(sys.argv[1])
    print(p)
    print(json.dumps({k: list(v.shape) for k, v in p.state_dict().items()}))

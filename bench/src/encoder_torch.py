"""torch's side of `recur-bench encoder` (bench/src/encoder.rs runs this with `python -c`):
the same encoder as `torch.nn` modules on the CPU (Conv2d + ReLU, MaxPool2d, Flatten, Linear +
ReLU; oneDNN), float32, at `threads` threads, timed on the same shapes.

argv[1] is a JSON object: {"threads", "warmup", "iters", "seed", "rows": [{"id", "layers",
"scale", "features", "height", "width", "channels", "frames", "pass", "max_code"}]}. A row's
call is what recur's is: uint8 frames [N, H, W, C] -> float * scale -> NCHW -> the network;
`fwd` under `torch.inference_mode()`, `fwdbwd` the forward and `out.backward(grad)` into the
parameters' `.grad` (set to None before each call). Each row runs in both memory formats
(NCHW contiguous, and channels_last: the NHWC frames permuted without a copy) and prints one
JSON line {"id", "format", "samples_ms": [...]} per format, after `warmup` untimed calls.
"""
import json
import sys
import time

import torch

config = json.loads(sys.argv[1])
torch.set_num_threads(config["threads"])
torch.manual_seed(config["seed"])


def network(row):
    layers, c = [], row["channels"]
    for layer in row["layers"]:
        if layer["type"] == "conv":
            layers += [
                torch.nn.Conv2d(
                    c,
                    layer["out_channels"],
                    layer["kernel"],
                    stride=layer.get("stride", 1),
                    padding=layer.get("padding", 0),
                ),
                torch.nn.ReLU(),
            ]
            c = layer["out_channels"]
        else:
            layers.append(torch.nn.MaxPool2d(layer["kernel"]))
    body = torch.nn.Sequential(*layers, torch.nn.Flatten())
    with torch.no_grad():
        flat = body(torch.zeros(1, row["channels"], row["height"], row["width"])).shape[1]
    return torch.nn.Sequential(body, torch.nn.Linear(flat, row["features"]), torch.nn.ReLU())


def timed(call):
    for _ in range(config["warmup"]):
        call()
    samples = []
    for _ in range(config["iters"]):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


for row in config["rows"]:
    n, h, w, c = row["frames"], row["height"], row["width"], row["channels"]
    obs = torch.randint(0, row["max_code"] + 1, (n, h, w, c), dtype=torch.uint8)
    grad = torch.randn(n, row["features"])
    scale = row["scale"]
    for fmt in ("contiguous", "channels_last"):
        net = network(row)
        if fmt == "channels_last":
            net = net.to(memory_format=torch.channels_last)

        def inputs():
            x = obs.permute(0, 3, 1, 2)
            if fmt == "contiguous":
                x = x.contiguous()
            return x.float() * scale

        if row["pass"] == "fwd":

            def call():
                with torch.inference_mode():
                    net(inputs())

        else:

            def call():
                for p in net.parameters():
                    p.grad = None
                net(inputs()).backward(grad)

        samples = timed(call)
        print(json.dumps({"id": row["id"], "format": fmt, "samples_ms": samples}), flush=True)

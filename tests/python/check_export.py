#!/usr/bin/env python3
"""Steps an exported policy (scripts/recur_policy.py in torch, and policy.onnx in onnxruntime)
through what `recur-actor --exploration greedy --record` recorded, and compares it with what
the actor did. Used by tests/export.rs. A policy with images is fed the recorded pixels lane
(uint8 `[B, P]`): the ONNX graph and the torch module's forward as it is, the torch module's
`act` as a dict of `[B, H, W, C]` images.

    check_export.py EXPORT_DIR DATASET_DIR HEADS_FILE

HEADS_FILE holds recur's policy-head outputs at every recorded step (float32, chunk order,
`[envs, steps, K]` per chunk), computed by the test from the recorded inputs with recur's own
inference path. Each backend carries its own recurrent state from step to step (zeros where
`is_init`), as a user's loop would. Per backend, the JSON line printed holds:

- `steps`, `resets` (is_init after the first step of a row)
- `head_err`: max |logits - recur's| (box: mean, and log_std clamped to [-5, 2])
- `value_err`: max |value - recorded state_value|
- `state_err`: max |carried state - the state recorded as the next step's input|
- `action_mismatches`: steps whose greedy action differs from the recorded one, beyond ties
  (discrete: recur's two best logits within `tie` of each other; box: beyond `action_tol`)
- `ties`: differing discrete actions at such a tie

and, beside them, `images` (the keys of the policy's images), `onehot` (the codes policy.json
states for them, or null) and, for a discrete action space,
`action_counts` (how often the actor chose each action).
"""
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from read_dataset import read_dataset  # noqa: E402

TIE = 1e-5


def recording(dataset, heads_file):
    """The recorded columns joined along time: `[E, N, ...]` (one actor, chunks in order)."""
    meta, chunks, _ = read_dataset(dataset)
    keys = ["observation", "action", "state_value", "is_init", "rs_h"]
    for optional in ("rs_c", "pixels"):
        if optional in chunks[0]:
            keys.append(optional)
    rec = {k: np.concatenate([c[k] for c in chunks], axis=1) for k in keys}
    e, t = meta["schema"]["envs"], meta["schema"]["steps"]
    heads = np.fromfile(heads_file, dtype="<f4")
    k = heads.size // (len(chunks) * e * t)
    heads = heads.reshape(len(chunks), e, t, k)
    rec["heads"] = np.concatenate(list(heads), axis=1)
    return meta, rec


class TorchStep:
    name = "torch"

    def __init__(self, export_dir):
        import torch
        import recur_policy

        # One thread: at 8 rows a step, torch's thread pool costs 20x the arithmetic on a
        # busy machine.
        torch.set_num_threads(1)
        self.torch = torch
        self.policy = recur_policy.load(export_dir)

    def initial_state(self, batch):
        return {k: v.numpy() for k, v in self.policy.initial_state(batch).items()}

    def __call__(self, obs, is_init, state, pixels):
        t = self.torch
        with t.no_grad():
            values = t.from_numpy(obs) if self.policy.obs_dim > 0 else None
            args = (values, {k: t.from_numpy(v) for k, v in state.items()}, t.from_numpy(is_init))
            # The pixels lane to the forward, the dict of images to act: both interfaces.
            lane = None if pixels is None else t.from_numpy(pixels)
            params, value, next_state = self.policy(*args, pixels=lane)
            images = None if pixels is None else {
                k: image for k, image in zip(self.policy.image_keys, self.policy.images(lane, lane.shape[0]))}
            action, again = self.policy.act(*args, deterministic=True, pixels=images)
        assert all(t.equal(again[k], next_state[k]) for k in next_state)
        return ({k: v.numpy() for k, v in params.items()}, action.numpy(), value.numpy(),
                {k: v.numpy() for k, v in next_state.items()})


class OnnxStep:
    name = "onnx"

    def __init__(self, export_dir):
        import onnxruntime as ort

        spec = json.loads((Path(export_dir) / "policy.json").read_text())
        self.spec = spec
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(str(Path(export_dir) / "policy.onnx"), options,
                                            providers=["CPUExecutionProvider"])
        self.outputs = [o.name for o in self.session.get_outputs()]
        assert self.outputs == spec["onnx"]["outputs"], self.outputs
        assert [i.name for i in self.session.get_inputs()] == spec["onnx"]["inputs"]

    def initial_state(self, batch):
        return {s["name"]: np.zeros((batch,) + tuple(s["shape"]), np.float32) for s in self.spec["state"]}

    def __call__(self, obs, is_init, state, pixels):
        inputs = self.spec["onnx"]["inputs"]
        feed = {"is_init": is_init, **state}
        if "obs" in inputs:
            feed["obs"] = obs
        if "pixels" in inputs:
            feed["pixels"] = pixels
        got = dict(zip(self.outputs, self.session.run(None, feed)))
        params = {k: got[k] for k in ("logits", "mean", "log_std") if k in got}
        next_state = {k[len("next_"):]: v for k, v in got.items() if k.startswith("next_")}
        return params, got["action"], got["value"], next_state


def check(step, meta, rec, spec):
    obs, is_init = rec["observation"], rec["is_init"].astype(bool)
    e, n = is_init.shape
    (kind, action_spec), = spec["action"].items()
    state = step.initial_state(e)
    errs = {"head_err": 0.0, "value_err": 0.0, "state_err": 0.0}
    mismatches = ties = 0
    if kind == "continuous":
        low, high = np.array(action_spec["low"], np.float32), np.array(action_spec["high"], np.float32)
        action_tol = 1e-5 * max(1.0, float(np.max(high - low)) / 2)
    for t in range(n):
        # The state this backend carried is the one the actor fed at this step (the actor
        # zeroes it at a reset before recording it, as the primer does).
        for key, value in state.items():
            carried = np.where(is_init[:, t, None, None], 0.0, value)
            errs["state_err"] = max(errs["state_err"], float(np.abs(carried - rec[key][:, t]).max()))
        pixels = np.ascontiguousarray(rec["pixels"][:, t]) if "pixels" in rec else None
        params, action, value, state = step(np.ascontiguousarray(obs[:, t]), np.ascontiguousarray(is_init[:, t]), state,
                                            pixels)
        heads = rec["heads"][:, t]
        if kind == "continuous":
            a = heads.shape[1] // 2
            want_mean = heads[:, :a]
            want_log_std = np.clip(heads[:, a:], spec["distribution"]["log_std_min"], spec["distribution"]["log_std_max"])
            head_err = max(np.abs(params["mean"] - want_mean).max(), np.abs(params["log_std"] - want_log_std).max())
            bad = np.abs(action - rec["action"][:, t]).max(axis=1) > action_tol
            mismatches += int(bad.sum())
        else:
            head_err = np.abs(params["logits"] - heads).max()
            recorded = rec["action"][:, t].reshape(e, -1)
            got = np.asarray(action).reshape(e, -1)
            nvec = action_spec["nvec"] if kind == "multidiscrete" else [action_spec["n"]]
            at = 0
            for j, size in enumerate(nvec):
                logits = heads[:, at:at + size]
                at += size
                for row in np.nonzero(got[:, j] != recorded[:, j])[0]:
                    gap = abs(logits[row, got[row, j]] - logits[row, recorded[row, j]])
                    if gap <= TIE:
                        ties += 1
                    else:
                        mismatches += 1
        errs["head_err"] = max(errs["head_err"], float(head_err))
        errs["value_err"] = max(errs["value_err"], float(np.abs(value - rec["state_value"][:, t]).max()))
    return {"steps": int(e * n), "resets": int(is_init[:, 1:].sum()), **errs,
            "action_mismatches": mismatches, "ties": ties}


def main():
    export_dir, dataset, heads_file = sys.argv[1:4]
    spec = json.loads((Path(export_dir) / "policy.json").read_text())
    meta, rec = recording(dataset, heads_file)
    report = {"images": [p["key"] for p in spec.get("images", {}).get("parts", [])]}
    # The one-hot codes policy.json states (null without: each image's bytes times its scale).
    report["onehot"] = spec.get("images", {}).get("cnn", {}).get("onehot")
    (kind, _), = spec["action"].items()
    if kind == "discrete":
        # How often the actor chose each action: a check of every greedy action means more
        # when the actions vary.
        report["action_counts"] = np.bincount(rec["action"].reshape(-1)).tolist()
    for backend in (TorchStep, OnnxStep):
        report[backend.name] = check(backend(export_dir), meta, rec, spec)
    print(json.dumps(report))


if __name__ == "__main__":
    main()

//! `recur-learner export` across real processes (issue 33): tiny training runs are exported,
//! `recur-actor --checkpoint RUN --exploration greedy --record` runs each checkpoint for 10k
//! steps with resets, and the exported policy, in PyTorch (`scripts/recur_policy.py`) and in
//! onnxruntime (`policy.onnx`), is stepped through the recording carrying its own state: the
//! same greedy actions as the actor recorded; logits or means, values and states within 1e-5
//! (`tests/python/check_export.py`). Image policies (issue 54) too: PixelCartPole-v1 (one
//! frame, no values) and MiniGrid's memory room as a Dict (direction and image), their
//! convolutions and the concatenation before the core rebuilt in both; a conv weight moved by
//! 0.01 puts the heads 1e-3 off, a swapped concatenation 1. A damaged checkpoint, an unknown architecture and an
//! unwritable or occupied output directory are errors naming the file, and leave nothing half
//! written. docs/use-a-trained-policy.md is run, code block by code block.
//!
//! recur's head outputs are not recorded in a dataset: the test computes them from the recorded
//! inputs (observation, `is_init`, incoming state) with recur's inference path
//! (`InferencePolicy`, what the actor runs), after checking that this reproduces the recorded
//! values and actions.
//!
//! Needs Python with numpy, torch, safetensors and onnxruntime (and gymnasium for the page).
//! Without them these tests report SKIPPED, or fail when `RECUR_REQUIRE_PYTHON=1` (CI).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use common::chunk::ActionColumn;
use common::dataset::read_dataset;
use common::policy::dist::{argmax, squashed_gaussian_mode};
use common::policy::inference::{InferencePolicy, StepOutput};
use common::policy::ActionSpec;
use recur_tests::{binary, report_skip, run_with_deadline, temp_dir};
use serde_json::Value;

/// The tests train, record and run Python: one at a time on a small machine.
static HEAVY: Mutex<()> = Mutex::new(());

/// Steps recorded per policy: 8 environments x 1280 steps.
const FRAMES: &str = "10240";

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn python() -> String {
    std::env::var("RECUR_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Whether Python can import `modules` (comma-separated). When it cannot, the test says
/// SKIPPED, or fails under `RECUR_REQUIRE_PYTHON` (CI, whose `.ci/run` installs them).
fn python_has(modules: &str) -> bool {
    let ok = Command::new(python())
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        let install = format!("python3 -m pip install {}", modules.replace(',', ""));
        assert!(
            std::env::var_os("RECUR_REQUIRE_PYTHON").is_none(),
            "RECUR_REQUIRE_PYTHON=1 but {} cannot import {modules} ({install})",
            python()
        );
        report_skip(&format!(
            "{} cannot import {modules}; `{install}` to run this test",
            python()
        ));
    }
    ok
}

fn exporter_python_available() -> bool {
    python_has("numpy, torch, safetensors, onnxruntime")
}

/// Output of `cmd` (run with a deadline), asserting success.
fn run_ok(cmd: Command, what: &str) -> String {
    let out = run_with_deadline(cmd, Duration::from_secs(300));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `config` (a file of configs/) with each `(from, to)` replaced.
fn config_text(config: &str, replace: &[(&str, &str)]) -> String {
    let mut text = std::fs::read_to_string(root().join("configs").join(config)).unwrap();
    for (from, to) in replace {
        assert!(text.contains(from), "{config} has `{from}`");
        text = text.replace(from, to);
    }
    text
}

/// Trains `config` (a file of configs/ with each `(from, to)` replaced) for `frames` frames
/// with one actor into `dir/run`; returns the run directory.
fn train(dir: &Path, config: &str, replace: &[(&str, &str)], frames: &str) -> PathBuf {
    train_text(dir, &config_text(config, replace), frames)
}

/// Trains the config `text` for `frames` frames with one actor into `dir/run`; returns the
/// run directory.
fn train_text(dir: &Path, text: &str, frames: &str) -> PathBuf {
    binary("recur-actor");
    let cfg = dir.join("config.toml");
    std::fs::write(&cfg, text).unwrap();
    let run = dir.join("run");
    let mut cmd = Command::new(binary("recur-learner"));
    cmd.args(["train", "--quiet", "--actors", "1", "--frames", frames])
        .arg("--config")
        .arg(&cfg)
        .arg("--run-dir")
        .arg(&run)
        .current_dir(root());
    run_ok(cmd, "training");
    run
}

/// `recur-learner export --checkpoint RUN --out OUT`: (success, stdout + stderr).
fn export(run: &Path, out: &Path) -> (bool, String) {
    let mut cmd = Command::new(binary("recur-learner"));
    cmd.arg("export")
        .arg("--checkpoint")
        .arg(run)
        .arg("--out")
        .arg(out);
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `recur-actor --checkpoint RUN --exploration greedy --record DATA` on `env` (with `args`)
/// for `frames` frames.
fn record_greedy(run: &Path, env: &str, args: &[&str], frames: &str, data: &Path) {
    let mut cmd = Command::new(binary("recur-actor"));
    cmd.args([
        "--env", env, "--envs", "8", "--steps", "32", "--frames", frames,
    ])
    .args(args)
    .args(["--seed", "11", "--exploration", "greedy"])
    .arg("--checkpoint")
    .arg(run)
    .arg("--record")
    .arg(data);
    run_ok(cmd, "recording");
}

/// recur's head outputs at every recorded step, from the recorded inputs with the actor's
/// inference path, written as little-endian f32 (`[envs, steps, K]` per chunk, in order) to
/// `out`, and returned. Checks first that they give the recorded values and greedy actions.
fn recur_heads(run: &Path, data: &Path, out: &Path) -> Vec<f32> {
    let (policy, _) = common::checkpoint::load_checkpoint_policy(run).unwrap();
    let mut fast = InferencePolicy::from_policy(&policy);
    let dataset = read_dataset(data).unwrap();
    let s = &dataset.meta.schema;
    let (e, t, d, lh) = (s.envs, s.steps, s.obs_dim, s.num_layers * s.hidden_size);
    let k = fast.head_size();
    let mut bytes = Vec::new();
    let mut worst_value = 0.0f32;
    for chunk in &dataset.chunks {
        let mut heads = vec![0.0f32; e * t * k];
        for step in 0..t {
            let rows = |p: usize| (0..e).map(move |env| env * t + step).map(move |i| i * p);
            let gather = |v: &[f32], w: usize| -> Vec<f32> {
                rows(w).flat_map(|i| v[i..i + w].to_vec()).collect()
            };
            let is_init: Vec<bool> = rows(1).map(|i| chunk.is_init[i] == 1).collect();
            let rs_c = chunk.rs_c.as_ref().map(|c| gather(c, lh));
            let px = s.pixels();
            let pixels: Vec<u8> = rows(px)
                .flat_map(|i| chunk.pixels[i..i + px].to_vec())
                .collect();
            let mut o = StepOutput::default();
            fast.step(
                &gather(&chunk.observation, d),
                &pixels,
                &is_init,
                &gather(&chunk.rs_h, lh),
                rs_c.as_deref(),
                &mut o,
            );
            for (env, i) in rows(1).enumerate() {
                let head = &o.head[env * k..(env + 1) * k];
                heads[i * k..(i + 1) * k].copy_from_slice(head);
                worst_value = worst_value.max((o.value[env] - chunk.state_value[i]).abs());
                match (&chunk.action, fast.action()) {
                    (ActionColumn::Discrete(a), ActionSpec::Discrete { .. }) => {
                        assert_eq!(a[i], argmax(head) as i64, "recorded action at row {i}")
                    }
                    (ActionColumn::Continuous(a), ActionSpec::Continuous { low, high }) => {
                        let mut mode = vec![0.0f32; low.len()];
                        squashed_gaussian_mode(head, low, high, &mut mode);
                        let rec = &a[i * low.len()..(i + 1) * low.len()];
                        for (x, y) in mode.iter().zip(rec) {
                            assert!((x - y).abs() < 1e-6, "recorded action {rec:?} vs {mode:?}");
                        }
                    }
                    other => panic!("unexpected action kind {other:?}"),
                }
            }
        }
        bytes.extend(heads.iter().flat_map(|v| v.to_le_bytes()));
    }
    assert!(
        worst_value < 1e-6,
        "recomputing the actor's step gives values {worst_value} off the recorded ones"
    );
    std::fs::write(out, &bytes).unwrap();
    (bytes.chunks_exact(4))
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// One export case: what to train, and what to record the greedy actor on.
struct Case<'a> {
    tag: &'a str,
    /// The run's config.
    config: String,
    /// Frames of the training run.
    train_frames: &'a str,
    env: &'a str,
    /// More `recur-actor` arguments of the recording (`--env-import`, `--env-keys`).
    actor_args: &'a [&'a str],
    /// Frames recorded (8 environments, 32 steps a chunk).
    record_frames: &'a str,
    /// Sharpens the trained policy by this factor before the export (see [`sharpen`]), and
    /// asserts that the greedy actor then chose at least two actions.
    sharpen: Option<f32>,
}

/// Writes into checkpoint directory `out` the policy of run `run` with its policy head's
/// logits centred and multiplied by `factor`: `W' = factor W`, `b' = factor (b - mean)`, with
/// `mean` the mean logits (`[K]`) of the policy over a greedy recording; returns `out`.
///
/// A briefly trained policy's greedy action is the same at every step (the head starts at
/// gain 0.01 and the recurrent features vary little around their mean, so one logit leads
/// throughout). Centred, the argmax follows how the observation and the state depart from
/// the usual, the recorded greedy actions vary, and reproducing each of them tests
/// something; scaled, the logits are of order 1, far from ties at 1e-5.
fn sharpen(run: &Path, out: &Path, mean: &[f32], factor: f32) -> PathBuf {
    use common::weights::{from_blob, layout, to_blob};
    let (policy, version) = common::checkpoint::load_checkpoint_policy(run).unwrap();
    let shapes = layout(&policy);
    let size = |s: &Vec<usize>| s.iter().product::<usize>();
    let total: usize = shapes.iter().map(size).sum();
    let mut blob = to_blob(&policy, version);
    let header = blob.len() - 4 * total;
    // The blob ends with policy_head.weight [H, K] (burn's [in, out]), its bias, and
    // value_head.weight [H, 1] and its bias.
    let n = shapes.len();
    let (h, k) = (policy.config().hidden_size, policy.action().head_size());
    assert_eq!(shapes[n - 4..], [vec![h, k], vec![k], vec![h, 1], vec![1]]);
    assert_eq!(mean.len(), k);
    let from = header + 4 * shapes[..n - 4].iter().map(size).sum::<usize>();
    let (weight, rest) = blob[from..].split_at_mut(4 * h * k);
    let edit = |bytes: &mut [u8], f: &dyn Fn(usize, f32) -> f32| {
        for (i, value) in bytes.chunks_exact_mut(4).enumerate() {
            let new = f(i, f32::from_le_bytes(value.try_into().unwrap()));
            value.copy_from_slice(&new.to_le_bytes());
        }
    };
    edit(weight, &|_, w| w * factor);
    edit(&mut rest[..4 * k], &|j, b| (b - mean[j]) * factor);
    let (policy, _) = from_blob(policy, &blob).unwrap();
    common::checkpoint::save_policy(out, &policy, "ppo", version, &[]).unwrap();
    out.to_path_buf()
}

/// Trains, exports, records and compares one policy (see the module docs).
fn export_matches_the_greedy_actor(
    tag: &str,
    config: &str,
    replace: &[(&str, &str)],
    env: &str,
) -> Value {
    check_case(&Case {
        tag,
        config: config_text(config, replace),
        train_frames: "2048",
        env,
        actor_args: &[],
        record_frames: FRAMES,
        sharpen: None,
    })
}

/// Trains, exports, records and compares `case`.
fn check_case(case: &Case) -> Value {
    let tag = case.tag;
    let dir = temp_dir(tag);
    let mut run = train_text(&dir, &case.config, case.train_frames);
    if let Some(factor) = case.sharpen {
        let probe = dir.join("probe");
        record_greedy(&run, case.env, case.actor_args, case.record_frames, &probe);
        let heads = recur_heads(&run, &probe, &dir.join("probe.f32"));
        let (policy, _) = common::checkpoint::load_checkpoint_policy(&run).unwrap();
        let k = policy.action().head_size();
        let steps = heads.len() / k;
        let mean: Vec<f32> = (0..k)
            .map(|j| heads.iter().skip(j).step_by(k).sum::<f32>() / steps as f32)
            .collect();
        run = sharpen(&run, &dir.join("sharpened"), &mean, factor);
    }
    let out = dir.join("exported");
    let (ok, text) = export(&run, &out);
    assert!(ok, "{text}");
    let data = dir.join("greedy");
    record_greedy(&run, case.env, case.actor_args, case.record_frames, &data);
    let heads = dir.join("heads.f32");
    recur_heads(&run, &data, &heads);
    let mut cmd = Command::new(python());
    cmd.arg(root().join("tests/python/check_export.py"))
        .arg(&out)
        .arg(&data)
        .arg(&heads);
    let stdout = run_ok(cmd, "check_export.py");
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let frames: u64 = case.record_frames.parse().unwrap();
    for backend in ["torch", "onnx"] {
        let r = &report[backend];
        assert!(r["steps"].as_u64().unwrap() >= frames, "{report}");
        assert!(r["resets"].as_u64().unwrap() > 0, "no resets: {report}");
        for key in ["head_err", "value_err", "state_err"] {
            let err = r[key].as_f64().unwrap();
            assert!(err < 1e-5, "{tag} {backend}: {key} = {err}: {report}");
        }
        assert_eq!(r["action_mismatches"], 0, "{tag} {backend}: {report}");
        // Differing argmaxes only at exact ties (two logits within 1e-5), and rarely.
        assert!(
            r["ties"].as_u64().unwrap() <= 10,
            "{tag} {backend}: {report}"
        );
    }
    if case.sharpen.is_some() {
        let counts = report["action_counts"].as_array().unwrap();
        let chosen = counts.iter().filter(|c| c.as_u64().unwrap() > 0).count();
        assert!(chosen >= 2, "{tag}: one greedy action only: {report}");
    }
    eprintln!("{tag}: {report}");
    std::fs::remove_dir_all(&dir).unwrap();
    report
}

#[test]
fn masked_cartpole_lstm_export_acts_as_the_greedy_actor() {
    let _heavy = HEAVY.lock().unwrap_or_else(|e| e.into_inner());
    if !exporter_python_available() {
        return;
    }
    export_matches_the_greedy_actor(
        "export-mcp-lstm",
        "masked_cartpole.toml",
        &[],
        "MaskedCartPole-v1",
    );
}

#[test]
fn repeat_previous_gru_export_acts_as_the_greedy_actor() {
    let _heavy = HEAVY.lock().unwrap_or_else(|e| e.into_inner());
    if !exporter_python_available() {
        return;
    }
    export_matches_the_greedy_actor(
        "export-rp-gru",
        "repeat_previous.toml",
        &[],
        "RepeatPrevious-v0",
    );
}

/// A box action space (squashed Gaussian: means, clamped log-stds, the squashed mean as the
/// greedy action), with the preset's separate critic core (state `[2L, H]`).
#[test]
fn pendulum_box_export_acts_as_the_greedy_actor() {
    let _heavy = HEAVY.lock().unwrap_or_else(|e| e.into_inner());
    if !exporter_python_available() {
        return;
    }
    export_matches_the_greedy_actor("export-pendulum", "pendulum.toml", &[], "Pendulum-v1");
}

/// Two layers: an LSTM, and the minGRU preset (recur_policy.py's own minGRU module).
#[test]
fn two_layer_exports_act_as_the_greedy_actor() {
    let _heavy = HEAVY.lock().unwrap_or_else(|e| e.into_inner());
    if !exporter_python_available() {
        return;
    }
    export_matches_the_greedy_actor(
        "export-mcp-lstm2",
        "masked_cartpole.toml",
        &[("num_layers = 1", "num_layers = 2")],
        "MaskedCartPole-v1",
    );
    export_matches_the_greedy_actor(
        "export-mcp-mingru2",
        "masked_cartpole_mingru.toml",
        &[],
        "MaskedCartPole-v1",
    );
}

/// Frames recorded from an image policy (each step runs its convolutions in recur, torch and
/// onnxruntime): 8 environments x 320 steps.
const IMAGE_FRAMES: &str = "2560";

/// The factor on an image policy's head weight ([`sharpen`]): its logits of order 1.
const SHARPEN: f32 = 100.0;

/// An image policy: PixelCartPole-v1, whose observation is one 64x64 grayscale frame and no
/// values (`obs_dim` 0: no normalizer, no MLP, no `obs` input), the preset's three
/// convolutions before an LSTM. Trained for one small update (burn's update path).
#[test]
fn pixel_cartpole_image_export_acts_as_the_greedy_actor() {
    let _heavy = HEAVY.lock().unwrap_or_else(|e| e.into_inner());
    if !exporter_python_available() {
        return;
    }
    let config = config_text(
        "pixel_cartpole.toml",
        &[
            ("frames_per_update = 2048", "frames_per_update = 256"),
            ("epochs = 4", "epochs = 1"),
            ("num_slices = 16", "num_slices = 8"),
        ],
    );
    let report = check_case(&Case {
        tag: "export-pixel-cartpole",
        config,
        train_frames: "256",
        env: "PixelCartPole-v1",
        actor_args: &[],
        record_frames: IMAGE_FRAMES,
        sharpen: Some(SHARPEN),
    });
    assert!(report["images"] == serde_json::json!([""]), "{report}");
}

/// A Dict policy: MiniGrid's memory room through the bridge, keeping `direction` (one-hot,
/// the values lane: normalizer and MLP) and `image` (`[7, 7, 3]` codes: the `minigrid` preset
/// with its max-pool), the MLP's output and the image's features concatenated before a GRU.
const MINIGRID_CONFIG: &str = r#"
[run]
env = "gymnasium:MiniGrid-MemoryS7-v0"
env_imports = ["minigrid"]
env_keys = ["direction", "image"]
frames = 256
seed = 0
device = "cpu"
actors = 1

[collector]
envs_per_actor = 8
steps = 32

[policy]
cell = "gru"
hidden_size = 32
obs_norm = true

[policy.encoder]
mlp = [16]
cnn = "minigrid"

[ppo]
frames_per_update = 256
epochs = 1
slice_len = 32
num_slices = 8
lr = 1e-3
gamma = 0.99
gae_lambda = 0.95
clip_eps = 0.2
value_coef = 0.5
entropy_coef = 0.01
max_grad_norm = 0.5
"#;

#[test]
fn minigrid_dict_export_acts_as_the_greedy_actor() {
    let _heavy = HEAVY.lock().unwrap_or_else(|e| e.into_inner());
    if !python_has("numpy, torch, safetensors, onnxruntime, gymnasium, minigrid") {
        return;
    }
    let report = check_minigrid("export-minigrid-dict", MINIGRID_CONFIG.into());
    assert!(report["images"] == serde_json::json!(["image"]), "{report}");
}

/// [`check_case`] on MiniGrid-MemoryS7 through the bridge (its import, the two usable keys),
/// trained for one small update with `config`, its greedy policy sharpened.
fn check_minigrid(tag: &'static str, config: String) -> Value {
    check_case(&Case {
        tag,
        config,
        train_frames: "256",
        env: "gymnasium:MiniGrid-MemoryS7-v0",
        actor_args: &["--env-import", "minigrid", "--env-keys", "direction,image"],
        record_frames: IMAGE_FRAMES,
        sharpen: Some(SHARPEN),
    })
}

/// The same Dict policy with the image's codes one-hot (`onehot = [11, 6, 3]`): policy.json
/// states it, and torch and onnxruntime expand the codes as the actor does.
#[test]
fn minigrid_onehot_export_acts_as_the_greedy_actor() {
    let _heavy = HEAVY.lock().unwrap_or_else(|e| e.into_inner());
    if !python_has("numpy, torch, safetensors, onnxruntime, gymnasium, minigrid") {
        return;
    }
    // Seed 1: seed 0's sharpened greedy policy drops (a no-op) at every step, one action.
    let config = MINIGRID_CONFIG
        .replace(
            "cnn = \"minigrid\"",
            "cnn = { preset = \"minigrid\", onehot = [11, 6, 3] }",
        )
        .replace("seed = 0", "seed = 1");
    assert_ne!(config, MINIGRID_CONFIG);
    let report = check_minigrid("export-minigrid-onehot", config);
    assert!(report["images"] == serde_json::json!(["image"]), "{report}");
    assert!(
        report["onehot"] == serde_json::json!([11, 6, 3]),
        "{report}"
    );
}

/// Rewrites file `name` of checkpoint `ckpt` with `edit` applied, and its manifest entry
/// (length and CRC-32) to match, so that only the content is wrong.
fn edit_with_manifest(ckpt: &Path, name: &str, edit: impl Fn(String) -> String) {
    let path = ckpt.join(name);
    let text = edit(std::fs::read_to_string(&path).unwrap());
    std::fs::write(&path, &text).unwrap();
    let manifest_path = ckpt.join("manifest.json");
    let mut manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest_path).unwrap()).unwrap();
    for f in manifest["files"].as_array_mut().unwrap() {
        if f["name"] == name {
            f["bytes"] = text.len().into();
            f["crc32"] = crc32fast::hash(text.as_bytes()).into();
        }
    }
    std::fs::write(&manifest_path, manifest.to_string()).unwrap();
}

/// Copies directory `from` to `to` (files only, one level of subdirectories).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), dest).unwrap();
        }
    }
}

/// Entries of `dir` whose names contain `needle`.
fn entries_containing(dir: &Path, needle: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(needle))
        .collect()
}

/// A checkpoint that fails its manifest, an unknown architecture, a missing checkpoint, an
/// unwritable and an occupied output directory: each an error naming the file, exit 1 without
/// a panic, and nothing written (no output directory, no temporary one beside it).
#[test]
fn bad_checkpoints_and_outputs_are_refused_naming_the_file() {
    let _heavy = HEAVY.lock().unwrap_or_else(|e| e.into_inner());
    let dir = temp_dir("export-bad");
    let run = train(&dir, "masked_cartpole.toml", &[], "1024");
    let refused = |run: &Path, out: &Path, needles: &[&str]| {
        let (ok, text) = export(run, out);
        assert!(!ok, "exported anyway: {text}");
        assert!(!text.contains("panicked"), "{text}");
        for needle in needles {
            assert!(text.contains(needle), "`{needle}` not in: {text}");
        }
        assert!(!out.exists(), "{} was written", out.display());
        if let Some(parent) = out.parent().filter(|p| p.is_dir()) {
            assert!(entries_containing(parent, ".tmp").is_empty(), "{text}");
        }
    };

    // Flipped bits in weights.bin.
    let flipped = dir.join("flipped");
    copy_dir(&run, &flipped);
    let weights = flipped.join("checkpoint/weights.bin");
    let mut bytes = std::fs::read(&weights).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&weights, bytes).unwrap();
    refused(
        &flipped,
        &dir.join("out-flipped"),
        &["checkpoint/weights.bin", "CRC-32"],
    );

    // A truncated policy.json.
    let truncated = dir.join("truncated");
    copy_dir(&run, &truncated);
    let policy = truncated.join("checkpoint/policy.json");
    let len = std::fs::metadata(&policy).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&policy)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    refused(
        &truncated,
        &dir.join("out-truncated"),
        &["checkpoint/policy.json", "bytes where the manifest says"],
    );

    // No manifest.
    let bare = dir.join("bare");
    copy_dir(&run, &bare);
    std::fs::remove_file(bare.join("checkpoint/manifest.json")).unwrap();
    refused(
        &bare,
        &dir.join("out-bare"),
        &["checkpoint/manifest.json", "missing"],
    );

    // An architecture this recur does not know (its manifest entry updated to match).
    let unknown = dir.join("unknown");
    copy_dir(&run, &unknown);
    edit_with_manifest(&unknown.join("checkpoint"), "policy.json", |t| {
        t.replace("\"lstm\"", "\"transformer\"")
    });
    refused(
        &unknown,
        &dir.join("out-unknown"),
        &[
            "checkpoint/policy.json",
            "unknown architecture",
            "transformer",
        ],
    );

    // Not a run directory.
    refused(
        &dir.join("nowhere"),
        &dir.join("out-nowhere"),
        &["nowhere", "does not exist"],
    );

    // An output directory that cannot be created: under a regular file, and in /proc.
    std::fs::write(dir.join("a-file"), b"x").unwrap();
    refused(&run, &dir.join("a-file/out"), &["a-file/out.tmp"]);
    refused(
        &run,
        Path::new("/proc/recur-export-test"),
        &["/proc/recur-export-test"],
    );

    // An occupied output directory is left as it was.
    let occupied = dir.join("occupied");
    std::fs::create_dir(&occupied).unwrap();
    std::fs::write(occupied.join("keep.txt"), b"mine").unwrap();
    let (ok, text) = export(&run, &occupied);
    assert!(
        !ok && text.contains("occupied") && text.contains("not empty"),
        "{text}"
    );
    assert_eq!(std::fs::read(occupied.join("keep.txt")).unwrap(), b"mine");
    assert_eq!(entries_containing(&occupied, "policy").len(), 0);

    // The undamaged run exports; a run whose checkpoint/ is missing (a crash between the two
    // renames of a checkpoint write) exports checkpoint.old/, saying so.
    let (ok, text) = export(&run, &dir.join("good"));
    assert!(ok, "{text}");
    for f in ["policy.safetensors", "policy.json", "policy.onnx"] {
        assert!(dir.join("good").join(f).exists(), "{f}");
    }
    let moved = dir.join("moved");
    copy_dir(&run, &moved);
    std::fs::rename(moved.join("checkpoint"), moved.join("checkpoint.old")).unwrap();
    let (ok, text) = export(&moved, &dir.join("good-old"));
    assert!(ok && text.contains("checkpoint.old"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The fenced code blocks of markdown `text` tagged `lang`, in order.
fn code_blocks(text: &str, lang: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match &mut current {
            None if line.trim_end() == format!("```{lang}") => current = Some(String::new()),
            None => {}
            Some(_) if line.trim_end() == "```" => blocks.extend(current.take()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    assert!(current.is_none(), "an unclosed ```{lang} block");
    blocks
}

/// docs/use-a-trained-policy.md, run as a reader would: in a directory holding a freshly
/// trained MaskedCartPole-v1 run at `runs/masked-cartpole` and recur's `scripts/`, its `sh`
/// blocks (with the built `recur-learner` on the PATH), then its `python` blocks in order as
/// one program. Every block runs; the page cannot rot.
#[test]
fn the_use_a_trained_policy_page_runs() {
    let _heavy = HEAVY.lock().unwrap_or_else(|e| e.into_inner());
    if !python_has("numpy, torch, safetensors, onnxruntime, gymnasium") {
        return;
    }
    let page = std::fs::read_to_string(root().join("docs/use-a-trained-policy.md")).unwrap();
    let shell = code_blocks(&page, "sh");
    let python_blocks = code_blocks(&page, "python");
    assert!(
        shell.iter().any(|b| b.contains("recur-learner export")),
        "{shell:?}"
    );
    let program = python_blocks.concat();
    for needle in ["recur_policy.load", "policy.act", "InferenceSession"] {
        assert!(program.contains(needle), "the page's Python lacks {needle}");
    }

    let dir = temp_dir("export-page");
    let run = train(&dir, "masked_cartpole.toml", &[], "2048");
    let work = dir.join("work");
    std::fs::create_dir_all(work.join("runs")).unwrap();
    std::os::unix::fs::symlink(&run, work.join("runs/masked-cartpole")).unwrap();
    std::os::unix::fs::symlink(root().join("scripts"), work.join("scripts")).unwrap();
    let bin_dir = binary("recur-learner").parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for block in &shell {
        let mut cmd = Command::new("bash");
        cmd.args(["-euo", "pipefail", "-c", block])
            .current_dir(&work)
            .env("PATH", &path);
        run_ok(cmd, &format!("the page's sh block {block:?}"));
    }
    assert!(work.join("exported/policy.onnx").exists());
    let script = work.join("page.py");
    std::fs::write(&script, &program).unwrap();
    let mut cmd = Command::new(python());
    cmd.arg(&script).current_dir(&work);
    let stdout = run_ok(cmd, "the page's Python");
    for needle in ["greedy return", "onnx actions", "torch and onnx agree"] {
        assert!(stdout.contains(needle), "`{needle}` not in:\n{stdout}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

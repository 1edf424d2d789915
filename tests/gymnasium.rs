//! The gymnasium bridge across real processes: `recur-actor --env gymnasium:<id>` with its
//! Python worker. CartPole-v1 recorded through the bridge replays bit for bit in gymnasium
//! under the seed contract; native POPGym ids and their bridged originals record identical
//! datasets under one seed; every supported space kind flattens as documented and unsupported
//! ones are refused; each failure (unknown id, failing import, Python or gymnasium missing,
//! NaN observation, worker crash, worker hang) ends in a clear error; a crashed worker's actor
//! is restarted by the learner's supervisor and the run completes.
//!
//! Needs Python with gymnasium and numpy (tests/python holds the test environments). Without
//! them these tests report SKIPPED on stderr, or fail when `RECUR_REQUIRE_PYTHON=1` (CI).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::chunk::{ActionColumn, Chunk};
use common::dataset::read_dataset;
use common::envs::episode_seed;
use recur_tests::{
    binary, gymnasium_available, python_module_available, run_with_deadline, temp_dir, Watched,
};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn python() -> String {
    std::env::var("RECUR_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// `recur-actor` with the test environments importable.
fn actor(args: &[&str]) -> Command {
    let mut cmd = Command::new(binary("recur-actor"));
    cmd.args(args)
        .env("PYTHONPATH", root().join("tests/python"))
        .env("RUST_BACKTRACE", "0");
    cmd
}

fn run(cmd: Command) -> (bool, String) {
    let out: Output = run_with_deadline(cmd, Duration::from_secs(180));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn python_json(args: &[&str]) -> Value {
    let mut cmd = Command::new(python());
    cmd.args(args)
        .env("PYTHONPATH", root().join("tests/python"));
    let out = run_with_deadline(cmd, Duration::from_secs(180));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{args:?} failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

#[test]
fn cartpole_recorded_through_the_bridge_replays_bit_exactly_in_gymnasium() {
    if !gymnasium_available() {
        return;
    }
    let dir = temp_dir("gym-cartpole-record");
    let data = dir.join("data");
    // Actor 1 of a run seeded 7 with 4 envs: env j's episode n is reset with
    // episode_seed(7 ^ 1 << 32, j, n). Recorded with `frames` frames over the default workers
    // (two on a multi-core machine) or `workers`.
    let record = |dest: &Path, frames: &str, workers: Option<&str>| {
        let mut cmd = actor(&[
            "--env",
            "gymnasium:CartPole-v1",
            "--envs",
            "4",
            "--steps",
            "64",
            "--frames",
            frames,
            "--seed",
            "7",
            "--actor-id",
            "1",
            "--record",
            dest.to_str().unwrap(),
        ]);
        if let Some(w) = workers {
            cmd.env("RECUR_GYM_WORKERS", w);
        }
        let (ok, out) = run(cmd);
        assert!(ok, "{out}");
    };
    record(&data, "4096", None);
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("dataset.json")).unwrap()).unwrap();
    assert_eq!(meta["env"], "gymnasium:CartPole-v1");
    assert_eq!(meta["seed"], 7);
    let replay = root().join("tests/python/replay_cartpole.py");
    let r = python_json(&[replay.to_str().unwrap(), data.to_str().unwrap()]);
    assert_eq!(r["steps"], 4096, "{r}");
    assert!(r["episodes"].as_u64().unwrap() > 20, "{r}");
    // The numpy reader agrees with the writer's counts.
    let sums = python_json(&[
        root().join("scripts/read_dataset.py").to_str().unwrap(),
        data.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(sums["chunks"], 16, "{sums}");

    // Split over 3 workers (envs 0, 1 and 2..4), the data is the same.
    let split = dir.join("split");
    record(&split, "1024", Some("3"));
    let r = python_json(&[replay.to_str().unwrap(), split.to_str().unwrap()]);
    assert_eq!(r["steps"], 1024, "{r}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The bridge worker's `episode_seed` (Python) is recur's, over small and extreme inputs.
#[test]
fn the_worker_computes_the_native_episode_seeds() {
    if !gymnasium_available() {
        return;
    }
    let inputs: Vec<(u64, u64, u64)> = [0, 1, 7, 1 << 32, 5 ^ (3 << 32) ^ (1 << 48), u64::MAX]
        .into_iter()
        .flat_map(|seed| {
            [
                (seed, 0, 0),
                (seed, 1, 0),
                (seed, 0, 1),
                (seed, 65535, u64::MAX),
            ]
        })
        .collect();
    let script = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
from gym_worker import episode_seed
print(json.dumps([episode_seed(s, j, n) for s, j, n in json.loads(sys.argv[2])]))
"#;
    let dir = root().join("common/src/envs");
    let got = python_json(&[
        "-c",
        script,
        dir.to_str().unwrap(),
        &serde_json::to_string(&inputs).unwrap(),
    ]);
    let want: Vec<u64> = inputs
        .iter()
        .map(|&(s, j, n)| episode_seed(s, j, n))
        .collect();
    assert_eq!(got, serde_json::json!(want));
}

/// Where `column` (`[E, T, ...]` row-major, `shape` = `(E, T)`) of two chunks first differs.
fn first_difference<T: PartialEq + std::fmt::Debug>(
    column: &str,
    native: &[T],
    bridged: &[T],
    (envs, steps): (usize, usize),
) -> Option<String> {
    if native.len() != bridged.len() {
        return Some(format!(
            "{column}: {} values native, {} bridged",
            native.len(),
            bridged.len()
        ));
    }
    let i = (0..native.len()).find(|&i| native[i] != bridged[i])?;
    let per_env = native.len() / envs;
    let per_step = per_env / steps;
    Some(format!(
        "{column}: env {} step {}: native {:?}, bridged {:?}",
        i / per_env,
        i % per_env / per_step,
        native[i],
        bridged[i]
    ))
}

/// Every column of `native` equals `bridged`'s, bit for bit (observations and rewards as
/// `f32` bits); the first difference otherwise.
fn chunk_difference(native: &Chunk, bridged: &Chunk) -> Option<String> {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let t = (native.meta.envs as usize, native.meta.steps as usize);
    let actions = match (&native.action, &bridged.action) {
        (ActionColumn::Discrete(a), ActionColumn::Discrete(b)) => {
            first_difference("action", a, b, t)
        }
        (ActionColumn::Continuous(a), ActionColumn::Continuous(b)) => {
            first_difference("action", &bits(a), &bits(b), t)
        }
        (a, b) => Some(format!("action kinds differ: {a:?} / {b:?}")),
    };
    let diff = first_difference(
        "observation",
        &bits(&native.observation),
        &bits(&bridged.observation),
        t,
    )
    .or(actions)
    .or_else(|| {
        first_difference(
            "next.observation",
            &bits(&native.next_observation),
            &bits(&bridged.next_observation),
            t,
        )
    })
    .or_else(|| {
        first_difference(
            "next.reward",
            &bits(&native.next_reward),
            &bits(&bridged.next_reward),
            t,
        )
    })
    .or_else(|| {
        first_difference(
            "next.terminated",
            &native.next_terminated,
            &bridged.next_terminated,
            t,
        )
    })
    .or_else(|| {
        first_difference(
            "next.truncated",
            &native.next_truncated,
            &bridged.next_truncated,
            t,
        )
    })
    .or_else(|| first_difference("next.done", &native.next_done, &bridged.next_done, t))
    .or_else(|| first_difference("is_init", &native.is_init, &bridged.is_init, t))
    .or_else(|| first_difference("traj_ids", &native.traj_ids, &bridged.traj_ids, t));
    // And the rest (log-probabilities, values, recurrent states, the header) as a whole.
    diff.or_else(|| (native != bridged).then(|| "another column or the header".to_string()))
}

/// The seed contract is one for both paths: `popgym-X` natively and `gymnasium:popgym-X`
/// through the bridge (two workers, so the second one's envs start at vector index 1), run
/// by `recur-actor --record` with the same seed and actor id, record the same dataset, column
/// for column, over several episodes per env (every episode reset with `episode_seed`).
/// The ids cover one-hot and Box observations, discrete, multi-discrete and continuous
/// actions, per-step noise, and a labyrinth (whose maze generator takes only seeds below
/// 2**32).
#[test]
fn native_and_bridged_popgym_ids_record_identical_datasets() {
    if !python_module_available("gymnasium, numpy, popgym, mazelib") {
        return;
    }
    let dir = temp_dir("gym-seed-contract");
    // (id, frames): 3 envs x 64 steps a chunk; at least 2 episodes end in every env.
    for (id, frames) in [
        ("popgym-RepeatPreviousEasy-v0", 3 * 64 * 3),
        ("popgym-NoisyPositionOnlyCartPoleEasy-v0", 3 * 64 * 2),
        ("popgym-BattleshipEasy-v0", 3 * 64 * 3),
        ("popgym-PositionOnlyPendulumEasy-v0", 3 * 64 * 8),
        ("popgym-LabyrinthEscapeEasy-v0", 3 * 64 * 33),
    ] {
        let record = |env: &str, dest: &Path| {
            let frames = frames.to_string();
            let mut cmd = actor(&[
                "--env",
                env,
                "--envs",
                "3",
                "--steps",
                "64",
                "--frames",
                &frames,
                "--seed",
                "5",
                "--actor-id",
                "1",
                "--record",
                dest.to_str().unwrap(),
            ]);
            if env.starts_with("gymnasium:") {
                cmd.args(["--env-import", "popgym"])
                    .env("RECUR_GYM_WORKERS", "2");
            }
            let (ok, out) = run(cmd);
            assert!(ok, "{env}: {out}");
            read_dataset(dest).unwrap()
        };
        let native = record(id, &dir.join(id));
        let bridged = record(&format!("gymnasium:{id}"), &dir.join(format!("gym-{id}")));
        assert_eq!(native.meta.schema, bridged.meta.schema, "{id}");
        assert_eq!(native.chunks.len(), frames / (3 * 64), "{id}");
        assert_eq!(native.chunks.len(), bridged.chunks.len(), "{id}");
        for (k, (a, b)) in native.chunks.iter().zip(&bridged.chunks).enumerate() {
            if let Some(diff) = chunk_difference(a, b) {
                panic!("{id}: chunk {k} differs native / bridged: {diff}");
            }
        }
        // Several episodes per env, so later resets are compared too, not just the first.
        for env in 0..3 {
            let ended: usize = native
                .chunks
                .iter()
                .map(|c| {
                    c.next_done[env * 64..(env + 1) * 64]
                        .iter()
                        .filter(|&&d| d == 1)
                        .count()
                })
                .sum();
            assert!(ended >= 2, "{id}: env {env} ended {ended} episodes");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn replay_evaluates_in_the_environment_the_dataset_recorded() {
    if !gymnasium_available() {
        return;
    }
    // Spaces-v0 with kwargs: a 2x2 Box observation (4 values; without the kwargs it would be
    // a 3-value Box) and 3-step episodes; the id exists only after `import recur_test_envs`.
    let dir = temp_dir("gym-replay-eval");
    let data = dir.join("data");
    let (ok, out) = run(actor(&[
        "--env",
        "gymnasium:RecurTest/Spaces-v0",
        "--env-import",
        "recur_test_envs",
        "--env-kwargs",
        r#"{"obs": "box2d", "action": "discrete", "length": 3}"#,
        "--envs",
        "4",
        "--steps",
        "16",
        "--frames",
        "256",
        "--record",
        data.to_str().unwrap(),
    ]));
    assert!(ok, "{out}");
    let cfg = dir.join("bc.toml");
    std::fs::write(
        &cfg,
        r#"
[replay]
algo = "bc"
updates = 4
seed = 3
eval_every = 2
eval_episodes = 5
checkpoint_every = 0

[policy]
cell = "gru"
hidden_size = 8
encoder = [8]

[bc]
slice_len = 8
burn_in = 0
num_slices = 4
lr = 1e-3
max_grad_norm = 1.0
initial_state = "zeros"
"#,
    )
    .unwrap();
    let run_dir = dir.join("run");
    let mut cmd = Command::new(binary("recur-learner"));
    cmd.arg("replay")
        .arg("--dataset")
        .arg(&data)
        .arg("--config")
        .arg(&cfg)
        .arg("--run-dir")
        .arg(&run_dir)
        .arg("--quiet")
        // The evaluation's Python worker must import the test environments itself.
        .env("PYTHONPATH", root().join("tests/python"));
    let (ok, out) = run(cmd);
    assert!(ok, "{out}");
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(s["env"], "gymnasium:RecurTest/Spaces-v0", "{s}");
    let evals = s["evaluations"].as_array().unwrap();
    assert_eq!(evals.len(), 2, "evaluations after updates 2 and 4: {s}");
    // Rewards are the actions' values (0, 1 or 2) over 3-step episodes: returns in [0, 6].
    for e in evals {
        let ret = e[1].as_f64().unwrap();
        assert!((0.0..=6.0).contains(&ret), "{s}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Records `frames` frames of RecurTest/Spaces-v0 with `obs` and `action` kinds (`extra`:
/// more flags, e.g. `--env-keys`).
fn record_spaces(dir: &Path, obs: &str, action: &str) -> (bool, String, PathBuf) {
    record_spaces_with(dir, obs, action, "", &[])
}

fn record_spaces_with(
    dir: &Path,
    obs: &str,
    action: &str,
    more_kwargs: &str,
    extra: &[&str],
) -> (bool, String, PathBuf) {
    let data = dir.join(format!("{obs}-{action}"));
    let kwargs = format!(r#"{{"obs": "{obs}", "action": "{action}"{more_kwargs}}}"#);
    let mut cmd = actor(&[
        "--env",
        "gymnasium:RecurTest/Spaces-v0",
        "--env-import",
        "recur_test_envs",
        "--env-kwargs",
        &kwargs,
        "--envs",
        "3",
        "--steps",
        "8",
        "--frames",
        "48",
        "--record",
        data.to_str().unwrap(),
    ]);
    cmd.args(extra);
    let (ok, out) = run(cmd);
    (ok, out, data)
}

/// Checks every recorded observation of a Spaces-v0 dataset against `expected_obs` and every
/// reward against the recorded action; prints the steps checked.
const CHECK_SPACES: &str = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from read_dataset import read_dataset
from recur_test_envs import expected_obs, expected_pixels
meta, chunks, _ = read_dataset(sys.argv[2])
kind = meta["env_kwargs"]["obs"]
assert meta["env_imports"] == ["recur_test_envs"], meta
n = 0
for c in chunks:
    e, t_len = c["is_init"].shape
    for i in range(e):
        for t in range(t_len):
            step = (c["seq"] * t_len + t) % 5  # episodes last 5 steps
            want = np.asarray(expected_obs(kind, step), np.float32)
            assert np.array_equal(c["observation"][i, t], want), (kind, i, t, c["observation"][i, t], want)
            nxt = np.asarray(expected_obs(kind, step + 1), np.float32)
            assert np.array_equal(c["next.observation"][i, t], nxt), (kind, "next", i, t)
            px = expected_pixels(kind, step)
            if len(px):
                # One uint8 array per image, in its own shape.
                shapes = {im["key"]: tuple(im["shape"]) for im in meta["schema"]["images"]}
                (key, shape), = shapes.items()
                assert c["pixels"].dtype == np.uint8 and c["images"][key].shape[2:] == shape
                assert np.array_equal(c["images"][key][i, t].reshape(-1), px), (kind, i, t)
                nxt = expected_pixels(kind, step + 1)
                assert np.array_equal(c["next.images"][key][i, t].reshape(-1), nxt)
            else:
                assert "pixels" not in c and not meta["schema"]["images"]
            assert c["is_init"][i, t] == (step == 0)
            assert c["next.terminated"][i, t] == (step == 4) and c["next.truncated"][i, t] == 0
            a = c["action"][i, t]
            assert np.isclose(c["next.reward"][i, t], np.sum(a), atol=1e-5), (a, c["next.reward"][i, t])
            n += 1
print(json.dumps({"checked": n}))
"#;

/// A conv encoder small enough for any test image (`recur-actor --cnn`).
const SMALL_CNN: &str = r#"{"layers": [{"type": "conv", "out_channels": 4, "kernel": 2}], "scale": 1.0, "features": 8}"#;

#[test]
fn every_supported_space_kind_flattens_as_documented() {
    if !gymnasium_available() {
        return;
    }
    let dir = temp_dir("gym-spaces");
    let scripts = root().join("scripts");
    for (obs, action) in [
        ("box", "discrete"),
        ("box2d", "box"),
        ("discrete", "discrete"),
        ("multidiscrete", "box"),
        ("tuple", "discrete"),
        ("dict", "discrete"),
        ("box", "multidiscrete"),
        ("dictimage", "discrete"),
    ] {
        // MiniGrid's keys: the mission string cannot be fed to a policy, so it is dropped; the
        // image goes through a small conv encoder.
        let keys: &[&str] = match obs {
            "dictimage" => &["--env-keys", "image,direction", "--cnn", SMALL_CNN],
            _ => &[],
        };
        let (ok, out, data) = record_spaces_with(&dir, obs, action, "", keys);
        assert!(ok, "{obs}/{action}: {out}");
        let r = python_json(&[
            "-c",
            CHECK_SPACES,
            scripts.to_str().unwrap(),
            data.to_str().unwrap(),
        ]);
        assert_eq!(r["checked"], 48, "{obs}/{action}: {r}");
    }
    // Refused before any step, naming the env id and the space.
    for (obs, action, space) in [
        ("text", "discrete", "Text("),
        ("box", "unbounded", "finite bounds"),
    ] {
        let (ok, out, _) = record_spaces(&dir, obs, action);
        assert!(!ok, "{obs}/{action} was accepted: {out}");
        assert!(
            out.contains("gymnasium:RecurTest/Spaces-v0")
                && out.contains(space)
                && out.contains("not supported"),
            "{obs}/{action}: {out}"
        );
    }
    // A Dict key the policy cannot take is refused naming it and the keys to keep.
    let (ok, out, _) = record_spaces(&dir, "dictimage", "discrete");
    assert!(!ok, "a Text key was accepted: {out}");
    assert!(
        out.contains("'mission'")
            && out.contains(r#"run.env_keys = ["direction", "image"]"#)
            && out.contains("--env-keys direction,image"),
        "{out}"
    );
    // An image of the wrong shape and dtype at env step 40 of a worker (in the second or third
    // chunk of 8 steps, depending on how many of the 3 envs the worker steps): an error naming
    // the env, the key, the shape and dtype expected and received; every chunk completed before
    // that vector step stays in the dataset.
    let keys = ["--env-keys", "image,direction", "--cnn", SMALL_CNN];
    let bad = r#", "bad_at": 40"#;
    let (ok, out, data) = record_spaces_with(&dir, "dictimage", "discrete", bad, &keys);
    assert!(!ok, "a float image was accepted: {out}");
    assert!(
        out.contains("gymnasium:RecurTest/Spaces-v0")
            && out.contains("key 'image': expected an image of shape (6, 5, 3) and dtype uint8")
            && out.contains("received shape (6, 5) and dtype float32"),
        "{out}"
    );
    let kept = python_json(&[
        "-c",
        "import json, sys; sys.path.insert(0, sys.argv[1]); from read_dataset import read_dataset; \
         m, c, _ = read_dataset(sys.argv[2]); print(json.dumps({'chunks': len(c)}))",
        scripts.to_str().unwrap(),
        data.to_str().unwrap(),
    ]);
    let step: u64 = out
        .split("step ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no step number in {out}"));
    assert!(step > 8, "{out}");
    assert_eq!(kept["chunks"], (step - 1) / 8, "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bridge_failures_are_clear_errors() {
    if !gymnasium_available() {
        return;
    }
    let dir = temp_dir("gym-failures");
    let expect_failure = |args: &[&str], env: &[(&str, &str)], needles: &[&str]| {
        let mut cmd = actor(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let (ok, out) = run(cmd);
        assert!(!ok, "{args:?} succeeded: {out}");
        for n in needles {
            assert!(out.contains(n), "{args:?}: no {n:?} in\n{out}");
        }
    };
    // Unknown id: the Python exception, first (the traceback's last line), then its frames.
    expect_failure(
        &["--env", "gymnasium:NoSuchEnv-v0", "--frames", "64"],
        &[],
        &[
            "gymnasium:NoSuchEnv-v0: gymnasium.error.NameNotFound",
            "gymnasium.make",
            "Traceback",
        ],
    );
    // A failing import: the module and the exception.
    expect_failure(
        &[
            "--env",
            "gymnasium:CartPole-v1",
            "--env-import",
            "no_such_module_xyz",
        ],
        &[],
        &["no_such_module_xyz", "ModuleNotFoundError"],
    );
    // No interpreter at all, and one without gymnasium/numpy (site-packages hidden by -S).
    let install = "pip install gymnasium numpy";
    expect_failure(
        &["--env", "gymnasium:CartPole-v1"],
        &[("RECUR_PYTHON", "/nonexistent/python3")],
        &["/nonexistent/python3", install],
    );
    let bare = dir.join("bare-python.sh");
    std::fs::write(&bare, format!("#!/bin/sh\nexec {} -S \"$@\"\n", python())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bare, std::fs::Permissions::from_mode(0o755)).unwrap();
    expect_failure(
        &["--env", "gymnasium:CartPole-v1"],
        &[("RECUR_PYTHON", bare.to_str().unwrap())],
        &["No module named", install],
    );
    let faulty = |kwargs: &str| {
        vec![
            "--env".to_string(),
            "gymnasium:RecurTest/Faulty-v0".into(),
            "--env-import".into(),
            "recur_test_envs".into(),
            "--env-kwargs".into(),
            kwargs.to_string(),
            "--envs".into(),
            "2".into(),
            "--steps".into(),
            "16".into(),
            "--frames".into(),
            "640".into(),
        ]
    };
    let args = |v: &Vec<String>| v.clone();
    // The faults count steps over the worker process: one worker holds both envs.
    let one_worker = ("RECUR_GYM_WORKERS", "1");
    // NaN in an observation: the chunk is refused naming field, env and step. Worker step 41
    // (counted over its 2 envs) is env 0 of vector step 21: step 4 of the second chunk.
    let nan = args(&faulty(r#"{"nan_at": 41}"#));
    let nan: Vec<&str> = nan.iter().map(String::as_str).collect();
    expect_failure(
        &nan,
        &[one_worker],
        &[
            "refused",
            "`next.observation` of environment 0",
            "NaN",
            "step 4 of the chunk",
            "actor step 21",
        ],
    );
    // A worker that dies, and one that hangs (timeout from RECUR_GYM_TIMEOUT_S).
    let crash = args(&faulty(r#"{"crash_at": 41}"#));
    let crash: Vec<&str> = crash.iter().map(String::as_str).collect();
    expect_failure(
        &crash,
        &[one_worker],
        &[
            "gymnasium:RecurTest/Faulty-v0",
            "exited during step 21",
            "exit status: 7",
        ],
    );
    let hang = args(&faulty(r#"{"hang_at": 41}"#));
    let hang: Vec<&str> = hang.iter().map(String::as_str).collect();
    expect_failure(
        &hang,
        &[("RECUR_GYM_TIMEOUT_S", "2"), one_worker],
        &["did not answer step 21 within 2.0 s", "killed"],
    );
    // A worker that never finishes starting: the start has its own, longer timeout
    // (RECUR_GYM_START_TIMEOUT_S), so the 2 s step timeout above cannot fail a start that a
    // loaded machine makes slow.
    let hang_start = args(&faulty(r#"{"hang_at_init": true}"#));
    let hang_start: Vec<&str> = hang_start.iter().map(String::as_str).collect();
    expect_failure(
        &hang_start,
        &[("RECUR_GYM_START_TIMEOUT_S", "2"), one_worker],
        &[
            "did not answer starting within 2.0 s",
            "RECUR_GYM_START_TIMEOUT_S",
            "killed",
        ],
    );
    // A start slower than a 1 s step timeout, with RECUR_GYM_START_TIMEOUT_S unset: the
    // start's default (the larger of the step timeout and 120 s) lets it finish. Two envs
    // of 1.5 s each in one worker: 3 s to start, which a 1 s start timeout refuses.
    let slow_start = args(&faulty(r#"{"init_seconds": 1.5}"#));
    let slow_start: Vec<&str> = slow_start.iter().map(String::as_str).collect();
    expect_failure(
        &slow_start,
        &[("RECUR_GYM_START_TIMEOUT_S", "1"), one_worker],
        &["did not answer starting within 1.0 s"],
    );
    let mut cmd = actor(&slow_start);
    cmd.env("RECUR_GYM_TIMEOUT_S", "1")
        .env(one_worker.0, one_worker.1)
        .env_remove("RECUR_GYM_START_TIMEOUT_S");
    let (ok, out) = run(cmd);
    assert!(
        ok,
        "a 3 s start failed under the default start timeout: {out}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A training run of 8192 frames on `RecurTest/Faulty-v0` with `fault` (`crash_at = 700` or
/// `hang_at = 700`) once (`dir/faulted-once` marks it), under `env`: (success, summary, log).
fn faulty_training_run(dir: &Path, fault: &str, env: &[(&str, &str)]) -> (bool, Value, String) {
    let once = dir.join("faulted-once");
    let cfg = dir.join("faulty.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[run]
env = "gymnasium:RecurTest/Faulty-v0"
env_imports = ["recur_test_envs"]
env_kwargs = {{ {fault}, once_file = "{}" }}
frames = 8192
seed = 0
actors = 1
checkpoint_every = 1000

[collector]
envs_per_actor = 4
steps = 32

[policy]
cell = "gru"
hidden_size = 16
encoder = [16]

[ppo]
frames_per_update = 512
epochs = 1
slice_len = 8
num_slices = 16
lr = 1e-3
gamma = 0.99
gae_lambda = 0.95
clip_eps = 0.2
value_coef = 0.5
entropy_coef = 0.01
max_grad_norm = 0.5
"#,
            once.display()
        ),
    )
    .unwrap();
    let mut cmd = Command::new(binary("recur-learner"));
    cmd.arg("train")
        .arg("--config")
        .arg(&cfg)
        .arg("--run-dir")
        .arg(dir.join("run"))
        .arg("--quiet")
        .env("PYTHONPATH", root().join("tests/python"))
        .env("RUST_LOG", "info")
        .envs(env.iter().copied());
    binary("recur-actor");
    let (ok, stdout, lines) = Watched::spawn(cmd).finish(Duration::from_secs(300));
    let log = lines.join("\n");
    assert!(once.exists(), "the fault never happened:\n{log}");
    let s = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_default();
    (ok, s, log)
}

/// Incarnation 0 delivered its chunks before the fault, incarnation 1 the rest; the run
/// reached its frames.
fn restarted_and_complete(s: &Value) {
    let incarnations = s["transport"]["incarnations"].as_array().unwrap();
    assert!(incarnations.len() >= 2, "{s}");
    assert!(
        incarnations
            .iter()
            .all(|i| i["chunks"].as_u64().unwrap() > 0),
        "{s}"
    );
    assert!(s["frames"].as_u64().unwrap() >= 8192, "{s}");
    assert_eq!(s["transport"]["corrupted"], 0, "{s}");
}

#[test]
fn a_crashed_worker_is_restarted_by_the_supervisor_and_the_run_completes() {
    if !gymnasium_available() {
        return;
    }
    let dir = temp_dir("gym-restart");
    let (ok, s, log) = faulty_training_run(&dir, "crash_at = 700", &[]);
    assert!(ok, "{log}");
    assert!(log.contains("exited during step"), "{log}");
    restarted_and_complete(&s);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A worker that hangs (its env sleeps forever at one step) in a training run: the bridge's
/// timeout (`RECUR_GYM_TIMEOUT_S = 10`, inherited by the actors; it also bounds the worker's
/// start, which takes seconds on a loaded machine) kills it, the actor exits naming the step,
/// the supervisor restarts the actor, and the run reaches its frames. The learner's own stall
/// bound (`collector.stall_timeout_s`, 30 s) is longer: the bridge fires first.
#[test]
fn a_hung_worker_times_out_and_the_supervisor_restarts_its_actor() {
    if !gymnasium_available() {
        return;
    }
    let dir = temp_dir("gym-hang");
    let (ok, s, log) = faulty_training_run(
        &dir,
        "hang_at = 700",
        &[("RECUR_GYM_TIMEOUT_S", "10"), ("RECUR_GYM_WORKERS", "1")],
    );
    assert!(ok, "{log}");
    assert!(
        log.contains("did not answer step") && log.contains("within 10.0 s"),
        "no bridge timeout:\n{log}"
    );
    assert!(log.contains("actor 0/1 started"), "{log}");
    assert_eq!(s["transport"]["stalled"], 0, "{s}");
    restarted_and_complete(&s);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bad_gymnasium_env_fails_the_run_before_any_actor_starts() {
    if !gymnasium_available() {
        return;
    }
    let dir = temp_dir("gym-learner-refuses");
    let cfg = dir.join("bad.toml");
    std::fs::write(
        &cfg,
        r#"
[run]
env = "gymnasium:RecurTest/Spaces-v0"
env_imports = ["recur_test_envs"]
env_kwargs = { obs = "text" }
frames = 4096

[collector]
envs_per_actor = 2
steps = 8

[policy]
cell = "gru"
hidden_size = 8

[ppo]
frames_per_update = 16
epochs = 1
slice_len = 8
num_slices = 2
lr = 1e-3
gamma = 0.99
gae_lambda = 0.95
clip_eps = 0.2
value_coef = 0.5
entropy_coef = 0.01
max_grad_norm = 0.5
"#,
    )
    .unwrap();
    binary("recur-actor");
    // `recur-learner train` on `cfg` into `dir/run`, with the actors' start logged.
    let train = || {
        let mut cmd = Command::new(binary("recur-learner"));
        cmd.arg("train")
            .arg("--config")
            .arg(&cfg)
            .arg("--run-dir")
            .arg(dir.join("run"))
            .arg("--quiet")
            .env("PYTHONPATH", root().join("tests/python"))
            .env("RUST_LOG", "info");
        run_with_deadline(cmd, Duration::from_secs(120))
    };
    let out = train();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("gymnasium:RecurTest/Spaces-v0")
            && stderr.contains("Text(")
            && stderr.contains("not supported"),
        "{stderr}"
    );
    assert!(
        !stderr.contains(" started (pid "),
        "an actor started: {stderr}"
    );
    // An observation with images and no `policy.encoder.cnn`: refused before any actor starts,
    // naming the key, rather than trained blind to its images.
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        r#"env_kwargs = { obs = "text" }"#,
        "env_kwargs = { obs = \"dictimage\" }\nenv_keys = [\"direction\", \"image\"]",
    );
    std::fs::write(&cfg, text).unwrap();
    let _ = std::fs::remove_dir_all(dir.join("run"));
    let out = train();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("observes images")
            && stderr.contains("policy.encoder.cnn")
            && stderr.contains(r#""image": Box(0, 255, (6, 5, 3), uint8)"#)
            && !stderr.contains(" started (pid "),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// MiniGrid's memory room through the bridge, as a user brings it (docs/images.md): its
/// `mission` is refused naming the keys to keep; with `--env-keys direction,image` every step
/// records the `[7, 7, 3]` uint8 image and the one-hot direction, and the recorded first
/// observation is the one MiniGrid gives for the actor's first reset seed.
#[test]
fn minigrid_memory_records_its_image_and_direction() {
    if !python_module_available("minigrid, gymnasium, numpy") {
        return;
    }
    let dir = temp_dir("gym-minigrid");
    let data = dir.join("data");
    let record = |keys: &[&str]| {
        let mut cmd = actor(&[
            "--env",
            "gymnasium:MiniGrid-MemoryS7-v0",
            "--env-import",
            "minigrid",
            "--envs",
            "2",
            "--steps",
            "16",
            "--frames",
            "64",
            "--seed",
            "5",
            "--record",
            data.to_str().unwrap(),
        ]);
        cmd.args(keys);
        run(cmd)
    };
    let (ok, out) = record(&[]);
    assert!(!ok, "the mission key was accepted: {out}");
    assert!(
        out.contains("'mission'") && out.contains("--env-keys direction,image"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&data);
    let (ok, out) = record(&["--env-keys", "image,direction", "--cnn", "minigrid"]);
    assert!(ok, "{out}");
    let check = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
import gymnasium as gym, minigrid, numpy as np
from read_dataset import read_dataset
meta, chunks, _ = read_dataset(sys.argv[2])
assert meta["env_keys"] == ["image", "direction"], meta
assert meta["schema"]["images"] == [{"key": "image", "shape": [7, 7, 3]}], meta["schema"]
first = chunks[0]
img = first["images"]["image"]
assert img.dtype == np.uint8 and img.shape == (2, 16, 7, 7, 3), (img.dtype, img.shape)
obs = first["observation"]
assert obs.shape == (2, 16, 4) and np.all(obs.sum(-1) == 1.0), obs
# Env 0's first reset under the seed contract (actor 0, run seed 5: episode_seed(5, 0, 0))
# gives MiniGrid's own first observation.
sys.path.insert(0, sys.argv[3])
from gym_worker import episode_seed
env = gym.make("MiniGrid-MemoryS7-v0")
o, _ = env.reset(seed=episode_seed(5, 0, 0))
assert np.array_equal(img[0, 0], o["image"]), "first image differs"
assert obs[0, 0].argmax() == o["direction"]
print(json.dumps({"frames": sum(c["is_init"].size for c in chunks)}))
"#;
    let r = python_json(&[
        "-c",
        check,
        root().join("scripts").to_str().unwrap(),
        data.to_str().unwrap(),
        root().join("common/src/envs").to_str().unwrap(),
    ]);
    assert_eq!(r["frames"], 64, "{r}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The shipped MiniGrid preset (the native id) trains (cut to a few updates), and its
/// evaluations report a success rate (MiniGrid's: a positive final reward), in `eval.csv`
/// beside training and in `recur-learner eval`'s JSON, consistent with the returns: the memory
/// room rewards only at the end, so an episode succeeded exactly when its return is positive.
/// The checkpoint then evaluates through the bridge (`--set run.env=gymnasium:...`) on the
/// same episodes to the same result: the native id and the package are one task.
#[test]
fn minigrid_evaluations_report_a_success_rate() {
    let dir = temp_dir("gym-minigrid-success");
    let run_dir = dir.join("run");
    let mut cmd = Command::new(binary("recur-learner"));
    cmd.args(["train", "--config"])
        .arg(root().join("configs/minigrid_memory_s7.toml"))
        .args([
            "--frames", "2048", "--actors", "1", "--seed", "7", "--quiet",
        ])
        .args(["--set", "collector.envs_per_actor=4"])
        .args(["--set", "ppo.frames_per_update=512"])
        .args(["--set", "ppo.num_slices=4"])
        .args(["--set", "policy.hidden_size=16"])
        .args(["--set", "eval.every_frames=1024"])
        .args(["--set", "eval.episodes=4"])
        .arg("--run-dir")
        .arg(&run_dir);
    let (ok, out) = run(cmd);
    assert!(ok, "{out}");
    let csv = std::fs::read_to_string(run_dir.join("eval.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("frames,wall_s,eval_return_mean,eval_return_std,episodes,eval_success_rate"),
        "{csv}"
    );
    let rows: Vec<&str> = lines.collect();
    assert!(
        rows.len() >= 2,
        "evaluations at 1024 frames and at the end: {csv}"
    );
    for row in rows {
        let rate: f64 = row.rsplit(',').next().unwrap().parse().unwrap();
        assert!([0.0, 0.25, 0.5, 0.75, 1.0].contains(&rate), "{csv}");
    }

    let evaluate = |sets: &[&str]| {
        let mut cmd = Command::new(binary("recur-learner"));
        cmd.args(["eval", "--episodes", "8", "--seed", "1000", "--checkpoint"])
            .arg(&run_dir);
        for set in sets {
            cmd.args(["--set", set]);
        }
        let (ok, out) = run(cmd);
        assert!(ok, "{out}");
        let e: Value = serde_json::from_str(out.lines().rfind(|l| l.starts_with('{')).unwrap())
            .unwrap_or_else(|err| panic!("{err}: {out}"));
        e
    };
    let e = evaluate(&[]);
    assert_eq!(e["env"], "MiniGrid-MemoryS7-v0", "{e}");
    let rate = e["success_rate"]
        .as_f64()
        .unwrap_or_else(|| panic!("no success_rate: {e}"));
    let (min, max) = (
        e["min_return"].as_f64().unwrap(),
        e["max_return"].as_f64().unwrap(),
    );
    let wins = rate * 8.0;
    assert!((wins - wins.round()).abs() < 1e-9, "{e}");
    assert_eq!(rate > 0.0, max > 0.0, "{e}");
    assert_eq!(rate == 1.0, min > 0.0, "{e}");

    if python_module_available("minigrid, gymnasium, numpy") {
        let bridged = evaluate(&[
            "run.env=\"gymnasium:MiniGrid-MemoryS7-v0\"",
            "run.env_imports=[\"minigrid\"]",
            "run.env_keys=[\"direction\", \"image\"]",
        ]);
        assert_eq!(
            bridged["env"], "gymnasium:MiniGrid-MemoryS7-v0",
            "{bridged}"
        );
        for key in [
            "mean_return",
            "std_return",
            "min_return",
            "max_return",
            "success_rate",
        ] {
            assert_eq!(bridged[key], e[key], "{key}: bridged {bridged} native {e}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

//! What `recur-learner train` takes from its command line and leaves for other tools, across
//! real processes: `--set` overrides reach the run's `config.toml` (and a bad one is refused
//! naming its key, before anything starts); TensorBoard's own reader finds every
//! `metrics.csv` and `eval.csv` value in the run's event file, and the config as text; the
//! best evaluation's weights are kept in `best/`, which `eval` and `export` read.
//!
//! The TensorBoard test needs Python with `tensorboard` and numpy; without them it reports
//! SKIPPED on stderr, or fails when `RECUR_REQUIRE_PYTHON=1` (CI).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use recur_tests::{binary, report_skip, run_with_deadline, temp_dir, Watched};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn train(args: &[&str]) -> Command {
    binary("recur-actor");
    let mut cmd = Command::new(binary("recur-learner"));
    cmd.arg("train").args(args).arg("--quiet");
    cmd.current_dir(root());
    cmd.env("RUST_LOG", "info").env("RUST_BACKTRACE", "0");
    cmd
}

/// A tiny CartPole run in `run_dir`, bounded by frames: 1 actor, 4 updates of 512 frames, a
/// greedy evaluation every 1024 frames, plus `extra` arguments. Returns the summary.
fn tiny_run(run_dir: &Path, extra: &[&str]) -> Value {
    let run_dir = run_dir.to_string_lossy();
    let mut args = vec![
        "--config",
        "configs/cartpole.toml",
        "--actors",
        "1",
        "--frames",
        "2048",
        "--run-dir",
        &run_dir,
        "--set",
        "ppo.frames_per_update=512",
        "--set",
        "eval.every_frames=1024",
        "--set",
        "eval.episodes=2",
    ];
    args.extend_from_slice(extra);
    let (ok, stdout, lines) = Watched::spawn(train(&args)).finish(Duration::from_secs(300));
    assert!(ok, "the tiny run failed:\n{}", lines.join("\n"));
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no summary ({e}): {stdout:?}"))
}

#[test]
fn set_overrides_reach_the_run_config_and_a_bad_key_is_refused() {
    let dir = temp_dir("cli-set");
    let run_dir = dir.join("run");
    let s = tiny_run(
        &run_dir,
        &[
            "--set",
            "ppo.lr=3e-4",
            "--set",
            "policy.hidden_size=32",
            // A bare word is a string.
            "--set",
            "run.env=CartPole-v1",
            // The dedicated flag (--frames 2048) wins over a --set of its key.
            "--set",
            "run.frames=999999",
            "--set",
            "run.tensorboard=false",
        ],
    );
    assert_eq!(s["frames"], 2048, "{s}");
    let config = std::fs::read_to_string(run_dir.join("config.toml")).unwrap();
    for line in [
        "env = \"CartPole-v1\"",
        "frames = 2048",
        "tensorboard = false",
        "hidden_size = 32",
        "frames_per_update = 512",
        "lr = 0.0003",
        "[eval]",
        "every_frames = 1024",
        "episodes = 2",
    ] {
        assert!(
            config.lines().any(|l| l.trim() == line),
            "config.toml lacks `{line}`:\n{config}"
        );
    }
    assert!(
        !run_dir.join("tb").exists(),
        "run.tensorboard = false writes no event file"
    );

    // `eval --set` overrides the run's config.toml, checked as a training config.
    let eval = |set: &str| {
        let mut cmd = Command::new(binary("recur-learner"));
        cmd.args(["eval", "--checkpoint"])
            .arg(&run_dir)
            .args(["--episodes", "2", "--set", set])
            .env("RUST_BACKTRACE", "0");
        run_with_deadline(cmd, Duration::from_secs(120))
    };
    let out = eval("run.env=CartPole-v1");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"env\":\"CartPole-v1\""));
    let out = eval("run.envv=CartPole-v1");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("unknown key `run.envv`"),
        "{stderr}"
    );

    // Bad overrides: refused before anything starts, naming the --set, the key and the value.
    for (set, expected) in [
        ("ppo.lrr=1", "unknown key `ppo.lrr`"),
        ("ppo.lr=fast", "`ppo.lr` = \"fast\""),
        ("ppo.gamma=1.5", "`ppo.gamma` = 1.5 is invalid"),
    ] {
        let refused = dir.join("refused");
        let out = run_with_deadline(
            train(&[
                "--config",
                "configs/cartpole.toml",
                "--run-dir",
                &refused.to_string_lossy(),
                "--set",
                set,
            ]),
            Duration::from_secs(60),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--set {set} was accepted");
        assert!(
            stderr.contains(&format!("--set {set}")) && stderr.contains(expected),
            "--set {set}: {stderr}"
        );
        assert!(!refused.exists(), "a refused config starts no run");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `eval.keep_best`: the run keeps its best evaluation's weights in `best/`, and what other
/// processes read there is those weights: `recur-learner eval` on the evaluation's own seeds
/// gives its mean return again, and `export` takes the directory as a checkpoint.
#[test]
fn the_best_evaluation_is_kept_and_reads_back_as_a_checkpoint() {
    let dir = temp_dir("cli-best");
    let run_dir = dir.join("run");
    let s = tiny_run(&run_dir, &["--set", "eval.seed=777"]);
    let text = std::fs::read_to_string(run_dir.join("eval.csv")).unwrap();
    let rows: Vec<(u64, f64)> = text
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[0].parse().unwrap(), f[2].parse().unwrap())
        })
        .collect();
    assert!(rows.len() >= 2, "{text}");
    // The best row; of equal ones, the later.
    let (frames, mean) = rows
        .iter()
        .copied()
        .reduce(|b, r| if r.1 >= b.1 { r } else { b })
        .unwrap();
    assert_eq!(s["best_eval_return"].as_f64(), Some(mean), "{s}");
    assert_eq!(s["best_eval_frames"].as_u64(), Some(frames), "{s}");
    let best = run_dir.join("best");
    let kept: Value =
        serde_json::from_slice(&std::fs::read(best.join("best.json")).unwrap()).unwrap();
    assert_eq!(
        (kept["frames"].as_u64(), kept["eval_return_mean"].as_f64()),
        (Some(frames), Some(mean)),
        "{kept}"
    );

    let mut cmd = Command::new(binary("recur-learner"));
    cmd.args(["eval", "--checkpoint"])
        .arg(&best)
        .args(["--episodes", "2", "--seed", "777"]);
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let eval: Value = serde_json::from_str(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or_default(),
    )
    .unwrap();
    assert_eq!(eval["mean_return"].as_f64(), Some(mean), "{eval}");
    assert_eq!(eval["version"], kept["version"], "{eval} vs {kept}");

    let mut cmd = Command::new(binary("recur-learner"));
    cmd.args(["export", "--checkpoint"])
        .arg(&best)
        .arg("--out")
        .arg(dir.join("exported"));
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.join("exported").read_dir().unwrap().next().is_some());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Whether Python can import tensorboard and numpy; says SKIPPED when not, and fails instead
/// under `RECUR_REQUIRE_PYTHON`.
fn tensorboard_available() -> bool {
    let python = std::env::var("RECUR_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&python)
        .args(["-c", "import numpy, tensorboard"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("RECUR_REQUIRE_PYTHON").is_none(),
            "RECUR_REQUIRE_PYTHON=1 but {python} cannot import tensorboard and numpy \
             (python3 -m pip install numpy tensorboard)"
        );
        report_skip(&format!(
            "{python} cannot import tensorboard and numpy; install them \
             (python3 -m pip install numpy tensorboard) to run this test"
        ));
    }
    ok
}

#[test]
fn tensorboard_reads_every_metric_and_evaluation_and_the_config() {
    if !tensorboard_available() {
        return;
    }
    let dir = temp_dir("cli-tensorboard");
    let run_dir = dir.join("run");
    tiny_run(&run_dir, &[]);
    let files: Vec<String> = std::fs::read_dir(run_dir.join("tb"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        files.len() == 1 && files[0].starts_with("events.out.tfevents."),
        "{files:?}"
    );
    let python = std::env::var("RECUR_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut check = Command::new(python);
    check
        .arg(root().join("tests/python/tensorboard_matches_metrics.py"))
        .arg(&run_dir);
    let out = run_with_deadline(check, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "TensorBoard's reader disagrees with metrics.csv:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    // 4 updates x 14 columns with a value from the first row on (the mean returns may start
    // as NaN), plus the evaluations (at 1024 and 2048 frames) x 4 columns.
    let tags = r["scalar_tags"].as_array().unwrap();
    assert!(
        tags.len() == 20
            && tags.contains(&"eval/mean_reward".into())
            && tags.contains(&"rollout/ep_rew_mean_100".into()),
        "{r}"
    );
    assert!(r["points"].as_u64().unwrap() >= 4 * 14 + 2 * 4, "{r}");
    std::fs::remove_dir_all(&dir).unwrap();
}

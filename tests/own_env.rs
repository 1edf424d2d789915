//! Your own environment in Rust: the T-maze example (`actor/examples/tmaze.rs`, its own actor
//! binary through `actor::main_with`) is described to the learner, trained end to end by
//! `recur-learner train` with `collector.actor_bin`, and a mismatch between the spaces the
//! learner was told and the ones the actors register with is refused naming both.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use recur_tests::{binary, example, temp_dir, Watched};
use serde_json::Value;

/// A PPO config for TMaze-v0 run by `actor_bin`.
fn tmaze_config(dir: &Path, actor_bin: &Path, frames: u64) -> std::path::PathBuf {
    let text = format!(
        r#"
[run]
env = "TMaze-v0"
frames = {frames}
seed = 0
actors = 2
checkpoint_every = 1000
target_return = 0.9
stop_at_target = true

[collector]
actor_bin = "{}"
envs_per_actor = 16
steps = 16
max_policy_lag = 4

[policy]
cell = "gru"
hidden_size = 32
encoder = [32]

[ppo]
frames_per_update = 1024
epochs = 4
slice_len = 8
num_slices = 32
lr = 2e-3
gamma = 0.9
gae_lambda = 0.95
clip_eps = 0.2
value_coef = 0.5
entropy_coef = 0.01
max_grad_norm = 0.5
"#,
        actor_bin.display()
    );
    let path = dir.join("tmaze.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn train(config: &Path, run_dir: &Path) -> Command {
    let mut cmd = Command::new(binary("recur-learner"));
    cmd.arg("train")
        .arg("--config")
        .arg(config)
        .arg("--run-dir")
        .arg(run_dir)
        .arg("--quiet");
    cmd.env("RUST_LOG", "info");
    cmd
}

#[test]
fn the_rust_example_env_describes_itself_and_trains_to_its_threshold() {
    let tmaze = example("recur-actor", "tmaze");
    let out = Command::new(&tmaze)
        .args(["--describe-env", "--env", "TMaze-v0"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let spec: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(spec["action_space"]["Discrete"]["n"], 2, "{spec}");
    assert_eq!(spec["max_episode_steps"], 6, "{spec}");
    // The built-in actor does not know the id.
    let out = Command::new(binary("recur-actor"))
        .args(["--describe-env", "--env", "TMaze-v0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"TMaze-v0\""));

    // Frame-bounded: the memory task is solved (mean return >= 0.9, memoryless best 0.5)
    // within 400k frames.
    let dir = temp_dir("own-env-tmaze");
    let cfg = tmaze_config(&dir, &tmaze, 400_000);
    let (ok, stdout, lines) =
        Watched::spawn(train(&cfg, &dir.join("run"))).finish(Duration::from_secs(900));
    assert!(ok, "training failed:\n{}", lines.join("\n"));
    let s: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    assert_eq!(s["env"], "TMaze-v0");
    let frames = s["frames_to_target"].as_u64();
    assert!(
        frames.is_some_and(|f| f <= 400_000),
        "no mean return >= 0.9 within 400k frames: {s}"
    );
    assert_eq!(s["transport"]["rejected"], 0, "{s}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn actors_reporting_other_spaces_are_refused_naming_both() {
    let tmaze = example("recur-actor", "tmaze");
    let dir = temp_dir("own-env-mismatch");
    // An actor binary whose --describe-env answer (what the run is built for) differs from the
    // spaces its environments really have (what it registers with): same sizes, other bounds.
    let wrapper = dir.join("lying-actor.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ \"$1\" = --describe-env ]; then\n  echo '{}'\n  exit 0\nfi\nexec {} \"$@\"\n",
            r#"{"id":"TMaze-v0","observation_space":{"Box":{"low":[0,0,0],"high":[5,5,5]}},"action_space":{"Discrete":{"n":2}},"max_episode_steps":6}"#,
            tmaze.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = tmaze_config(&dir, &wrapper, 100_000);
    let run = Watched::spawn(train(&cfg, &dir.join("run")));
    let line = run.wait_for("a refused registration", Duration::from_secs(120), |l| {
        l.contains("refused actor")
    });
    assert!(
        line.contains("Box(low=[0, 0, 0], high=[1, 1, 1], shape=(3,))")
            && line.contains("Box(low=[0, 0, 0], high=[5, 5, 5], shape=(3,))"),
        "{line}"
    );
    drop(run);
    std::fs::remove_dir_all(&dir).unwrap();
}

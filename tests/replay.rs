//! Learner-only replay across real processes: `recur-actor --record` writes a dataset (cut
//! short as by a crash), `recur-learner replay` trains on it alone (BC lowers its loss, DQN
//! runs), and the checkpoint it writes drives `recur-actor --checkpoint`. Online DQN with
//! epsilon-greedy actor processes runs end to end.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use recur_tests::{binary, run_with_deadline, temp_dir, Watched};
use serde_json::Value;

fn learner(args: &[&str]) -> Command {
    binary("recur-actor");
    let mut cmd = Command::new(binary("recur-learner"));
    cmd.args(args).arg("--quiet");
    cmd.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    cmd.env("RUST_LOG", "info");
    cmd
}

fn summary(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

/// The `loss` column of metrics.csv.
fn losses(dir: &Path) -> Vec<f64> {
    let text = std::fs::read_to_string(dir.join("metrics.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = header.iter().position(|&c| c == "loss").unwrap();
    lines
        .map(|l| l.split(',').nth(col).unwrap().parse().unwrap())
        .collect()
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

#[test]
fn recorded_data_trains_offline_and_the_checkpoint_drives_an_actor() {
    let root = temp_dir("replay-offline");
    let data = root.join("data");
    // A greedy (deterministic) recurrent policy: its actions depend on the history only, so
    // behaviour cloning can drive the loss far below a uniform guess.
    let mut cmd = Command::new(binary("recur-actor"));
    cmd.args([
        "--env",
        "RepeatPrevious-v0",
        "--envs",
        "16",
        "--steps",
        "32",
        "--frames",
        "8192",
        "--cell",
        "gru",
        "--hidden",
        "16",
        "--seed",
        "5",
        "--exploration",
        "greedy",
        "--record",
    ])
    .arg(&data);
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A crash mid-write: the last chunk is cut short.
    let file = data.join("chunks-00000.bin");
    let len = std::fs::metadata(&file).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(len - 1000)
        .unwrap();

    let bc_dir = root.join("bc");
    let (ok, _, lines) = Watched::spawn(learner(&[
        "replay",
        "--dataset",
        &data.to_string_lossy(),
        "--algo",
        "bc",
        "--updates",
        "200",
        "--run-dir",
        &bc_dir.to_string_lossy(),
    ]))
    .finish(Duration::from_secs(300));
    assert!(ok, "replay bc failed:\n{}", lines.join("\n"));
    assert!(
        lines
            .iter()
            .any(|l| l.contains("ignored") && l.contains("cut short")),
        "the cut chunk is reported:\n{}",
        lines.join("\n")
    );
    let s = summary(&bc_dir);
    assert_eq!(s["algo"], "bc");
    assert_eq!(s["updates"], 200);
    assert_eq!(
        s["dataset_chunks"], 15,
        "16 chunks recorded, the last one cut"
    );
    assert!(s["ignored_tail_bytes"].as_u64().unwrap() > 0);
    assert!(!s["evaluations"].as_array().unwrap().is_empty(), "{s}");
    let loss = losses(&bc_dir);
    assert_eq!(loss.len(), 200);
    let (first, last) = (loss[0], mean(&loss[180..]));
    assert!(
        first > 1.2 && last < 0.5 * first,
        "BC loss should fall from about ln 4: first {first:.3}, mean of the last 20 {last:.3}"
    );

    // The checkpoint runs in an actor, greedily.
    let mut cmd = Command::new(binary("recur-actor"));
    cmd.args([
        "--env",
        "RepeatPrevious-v0",
        "--exploration",
        "greedy",
        "--frames",
        "4096",
        "--checkpoint",
    ])
    .arg(&bc_dir);
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("running checkpoint weights version 200"));

    // DQN on the same data.
    let dqn_dir = root.join("dqn");
    let (ok, _, lines) = Watched::spawn(learner(&[
        "replay",
        "--dataset",
        &data.to_string_lossy(),
        "--algo",
        "dqn",
        "--updates",
        "40",
        "--run-dir",
        &dqn_dir.to_string_lossy(),
    ]))
    .finish(Duration::from_secs(300));
    assert!(ok, "replay dqn failed:\n{}", lines.join("\n"));
    let s = summary(&dqn_dir);
    assert_eq!(s["algo"], "dqn");
    assert_eq!(s["updates"], 40);
    assert!(s["trained_frames_per_s"].as_f64().unwrap() > 0.0);

    // A config error names the key.
    let bad = root.join("bad.toml");
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/replay/dqn.toml"
    ))
    .unwrap()
    .replace("n_step = 3", "n_step = 0");
    std::fs::write(&bad, text).unwrap();
    let out = run_with_deadline(
        learner(&[
            "replay",
            "--dataset",
            &data.to_string_lossy(),
            "--config",
            &bad.to_string_lossy(),
        ]),
        Duration::from_secs(60),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("`dqn.n_step` = 0"));
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn online_dqn_runs_with_epsilon_greedy_actors_and_saves_the_replay() {
    let root = temp_dir("train-dqn");
    let run = root.join("run");
    let saved = root.join("saved");
    let (ok, stdout, lines) = Watched::spawn(learner(&[
        "train",
        "--config",
        "configs/repeat_previous_dqn.toml",
        "--actors",
        "2",
        "--frames",
        "40000",
        "--run-dir",
        &run.to_string_lossy(),
        "--save-replay",
        &saved.to_string_lossy(),
    ]))
    .finish(Duration::from_secs(400));
    assert!(ok, "dqn training failed:\n{}", lines.join("\n"));
    let s: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    // learning_starts = 5000 frames: every later chunk is one update.
    let updates = s["updates"].as_u64().unwrap();
    assert!(updates >= 40, "{s}");
    assert_eq!(s["transport"]["corrupted"], 0);
    assert!(run.join("checkpoint/policy.json").exists());
    // Everything the learner received is in the saved dataset.
    let data = common::dataset::read_dataset(&saved).unwrap();
    assert_eq!(data.meta.env, "RepeatPrevious-v0");
    assert_eq!(
        data.chunks.len() as u64,
        s["transport"]["chunks"].as_u64().unwrap()
    );
    // The actors explored epsilon-greedily from epsilon ~1: the recorded mixture
    // probabilities of the first chunk's actions are all close to uniform (1/4).
    let first = &data.chunks[0];
    assert!(
        first
            .sample_log_prob
            .iter()
            .all(|&lp| (lp - 0.25f32.ln()).abs() < 0.02),
        "epsilon starts at 1: near-uniform actions, {:?}",
        &first.sample_log_prob[..8]
    );
    std::fs::remove_dir_all(&root).unwrap();
}

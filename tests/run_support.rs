//! Commands and checks shared by the tests that run `recur-learner train` and inspect what it
//! leaves behind (`crash.rs`, `faults.rs`, `train.rs`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{binary, process_alive, segments_containing};

/// `recur-learner train ARGS --quiet` with info logs and no fault seam (the actor built too).
pub fn learner(args: &[&str]) -> Command {
    binary("recur-actor");
    let mut cmd = Command::new(binary("recur-learner"));
    cmd.arg("train").args(args).arg("--quiet");
    cmd.env("RUST_LOG", "info");
    cmd.env_remove("RECUR_FAULT_CHECKPOINT");
    cmd
}

/// A new run of `config` in `run_dir`, with `extra` flags.
pub fn new_run(config: &Path, run_dir: &Path, extra: &[&str]) -> Command {
    let mut args = vec![
        "--config",
        config.to_str().unwrap(),
        "--run-dir",
        run_dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    learner(&args)
}

/// `--resume run_dir`, with `extra` flags.
pub fn resume(run_dir: &Path, extra: &[&str]) -> Command {
    let mut args = vec!["--resume", run_dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    learner(&args)
}

/// The summary: the last line of a run's stdout, as JSON.
pub fn last_json(stdout: &str) -> Value {
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no summary ({e}): {stdout:?}"))
}

/// The update numbers in `metrics.csv`, in file order.
pub fn metrics_updates(run_dir: &Path) -> Vec<u64> {
    std::fs::read_to_string(run_dir.join("metrics.csv"))
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').nth(2)?.parse().ok())
        .collect()
}

/// The pids of the actors a learner log says it started.
pub fn actor_pids(lines: &[String]) -> Vec<u32> {
    lines
        .iter()
        .filter(|l| l.contains(" started (pid "))
        .filter_map(|l| l.split("(pid ").nth(1)?.trim_end_matches(')').parse().ok())
        .collect()
}

/// The run id in a learner log's ring names (`ring recur-<id>-ring-...`).
pub fn run_id(lines: &[String]) -> Option<String> {
    lines.iter().find_map(|l| {
        l.split("ring recur-")
            .nth(1)?
            .split("-ring-")
            .next()
            .map(str::to_string)
    })
}

/// No orphan actors (each gets 10 s to exit) and no segments of the run.
pub fn nothing_left(lines: &[String]) {
    for pid in actor_pids(lines) {
        let start = Instant::now();
        while process_alive(pid) && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!process_alive(pid), "actor {pid} outlived the run");
    }
    if let Some(id) = run_id(lines) {
        assert!(
            segments_containing(&id).is_empty(),
            "segments left: {:?}",
            segments_containing(&id)
        );
    }
}

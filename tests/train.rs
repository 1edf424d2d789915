//! The main job across real processes: `recur-learner train` with 2 `recur-actor`s on
//! CartPole-v1. The mean return must rise above 150; resuming from the checkpoint restores
//! bit-identical weights and continues the run; no orphan processes and no segments remain.
//! Also the default config with evaluation, sync mode, bad configs, and the minGRU preset.

use std::process::Command;
use std::time::Duration;

use recur_tests::run_support::last_json;
use recur_tests::{binary, process_alive, segments_containing, temp_dir, Watched};
use serde_json::Value;

fn train(args: &[&str]) -> Command {
    binary("recur-actor");
    let mut cmd = Command::new(binary("recur-learner"));
    cmd.arg("train").args(args).arg("--quiet");
    cmd.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    cmd.env("RUST_LOG", "info");
    cmd
}

/// `recur-learner eval --checkpoint RUN --episodes N`: its JSON line, after checking it
/// succeeded.
fn eval_checkpoint(run_dir: &str, episodes: u32) -> Value {
    let out = Command::new(binary("recur-learner"))
        .args(["eval", "--checkpoint", run_dir, "--episodes"])
        .arg(episodes.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    last_json(&String::from_utf8_lossy(&out.stdout))
}

fn actor_pids(lines: &[String]) -> Vec<u32> {
    lines
        .iter()
        .filter(|l| l.contains(" started (pid "))
        .filter_map(|l| l.split("(pid ").nth(1)?.trim_end_matches(')').parse().ok())
        .collect()
}

#[test]
fn cartpole_trains_resumes_bit_identically_and_leaves_nothing_behind() {
    let dir = temp_dir("train-cartpole");
    let dir_s = dir.to_string_lossy().into_owned();
    let run = Watched::spawn(train(&[
        "--config",
        "configs/cartpole.toml",
        "--actors",
        "2",
        "--run-dir",
        &dir_s,
        // Bounded by frames, not by wall time: the outcome does not depend on the machine's
        // speed (the deadline below only catches a hang).
        "--frames",
        "250000",
    ]));
    let (ok, stdout, lines) = run.finish(Duration::from_secs(400));
    assert!(ok, "training failed:\n{}", lines.join("\n"));
    let s = last_json(&stdout);
    let best = s["best_mean_return"].as_f64().unwrap();
    assert!(best > 150.0, "mean return only reached {best}: {s}");
    assert_eq!(s["transport"]["corrupted"], 0);
    assert_eq!(s["transport"]["rejected"], 0);

    // The run directory.
    let header = std::fs::read_to_string(dir.join("metrics.csv")).unwrap();
    let header = header.lines().next().unwrap();
    assert!(
        header.starts_with("frames,wall_s,updates,mean_return,policy_lag"),
        "{header}"
    );
    assert!(
        std::fs::metadata(dir.join("learning_curve.png"))
            .unwrap()
            .len()
            > 1000
    );
    assert!(dir.join("config.toml").exists());
    let weights = std::fs::read(dir.join("checkpoint/weights.bin")).unwrap();

    // No orphans, no segments.
    for pid in actor_pids(&lines) {
        assert!(!process_alive(pid), "actor {pid} outlived the run");
    }
    let run_id = lines
        .iter()
        .find_map(|l| {
            l.split("ring recur-")
                .nth(1)?
                .split("-ring-")
                .next()
                .map(str::to_string)
        })
        .unwrap();
    assert!(
        segments_containing(&run_id).is_empty(),
        "segments left: {:?}",
        segments_containing(&run_id)
    );

    // Resume at the same frame count: nothing more to train (no actor is started, nothing
    // stalls), the weights come back bit for bit.
    let frames = s["frames"].as_u64().unwrap().to_string();
    let (ok, stdout, lines) = Watched::spawn(train(&["--resume", &dir_s, "--frames", &frames]))
        .finish(Duration::from_secs(120));
    assert!(ok, "{}", lines.join("\n"));
    assert!(
        lines.iter().any(|l| l.contains("the run is complete")) && actor_pids(&lines).is_empty(),
        "{}",
        lines.join("\n")
    );
    assert_eq!(
        std::fs::read(dir.join("checkpoint/weights.bin")).unwrap(),
        weights,
        "resumed weights differ"
    );
    assert_eq!(last_json(&stdout)["updates"], s["updates"]);

    // Resume with more frames: the run continues where it stopped.
    let more = (s["frames"].as_u64().unwrap() + 20_000).to_string();
    let (ok, stdout, lines) = Watched::spawn(train(&["--resume", &dir_s, "--frames", &more]))
        .finish(Duration::from_secs(200));
    assert!(ok, "{}", lines.join("\n"));
    let r = last_json(&stdout);
    assert!(
        r["updates"].as_u64().unwrap() > s["updates"].as_u64().unwrap(),
        "{r}"
    );
    assert!(r["frames"].as_u64().unwrap() >= s["frames"].as_u64().unwrap() + 20_000);
    let rows = std::fs::read_to_string(dir.join("metrics.csv"))
        .unwrap()
        .lines()
        .count()
        - 1;
    assert_eq!(
        rows as u64,
        r["updates"].as_u64().unwrap(),
        "metrics.csv continues across the resume"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs `recur-learner train` on configs/cartpole.toml with `from` replaced by `to`, written
/// as `dir/name`, and run dir `dir/run`; returns its stderr after checking that it failed.
fn refused_cartpole_variant(dir: &std::path::Path, name: &str, from: &str, to: &str) -> String {
    let cfg = dir.join(name);
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/cartpole.toml"
    ))
    .unwrap();
    assert!(text.contains(from), "cartpole.toml has `{from}`");
    std::fs::write(&cfg, text.replace(from, to)).unwrap();
    let out = recur_tests::run_with_deadline(
        train(&[
            "--config",
            &cfg.to_string_lossy(),
            "--run-dir",
            &dir.join("run").to_string_lossy(),
        ]),
        Duration::from_secs(60),
    );
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_bad_config_is_refused_naming_the_key() {
    let dir = temp_dir("train-badconfig");
    let err =
        refused_cartpole_variant(&dir, "bad.toml", "gamma = 0.99", "gamma = 0.99\ngama = 0.9");
    assert!(
        err.contains("bad.toml") && err.contains("unknown field `gama`"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `recur_tests::binary` builds the learner without features: `device = "cuda:0"` is refused
/// before anything starts, saying how to get a CUDA build.
#[test]
fn a_cuda_device_is_refused_by_a_build_without_cuda() {
    let dir = temp_dir("train-cuda");
    let err =
        refused_cartpole_variant(&dir, "cuda.toml", "device = \"cpu\"", "device = \"cuda:0\"");
    assert!(
        err.contains("cuda.toml")
            && err.contains("`run.device` = \"cuda:0\"")
            && err.contains("--features cuda"),
        "{err}"
    );
    assert!(
        !dir.join("run").exists(),
        "nothing is started for a refused config"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Sync collection: every update consumes one chunk per actor made with the current weights
/// (policy lag exactly 0 in every metrics row). SIGINT (Ctrl-C) ends the run cleanly with a
/// final checkpoint and a summary.
#[test]
fn sync_mode_has_zero_lag_and_ctrl_c_ends_the_run_with_a_checkpoint() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let dir = temp_dir("train-sync");
    let cfg = dir.join("sync.toml");
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/cartpole.toml"
    ))
    .unwrap();
    std::fs::write(&cfg, text.replace("mode = \"async\"", "mode = \"sync\"")).unwrap();
    let run_dir = dir.join("run");
    let run = Watched::spawn(train(&[
        "--config",
        &cfg.to_string_lossy(),
        "--actors",
        "2",
        "--run-dir",
        &run_dir.to_string_lossy(),
    ]));
    // Wait for a few updates, then press Ctrl-C.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let rows = std::fs::read_to_string(run_dir.join("metrics.csv"))
            .map_or(0, |t| t.lines().count().saturating_sub(1));
        if rows >= 5 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no 5 updates within 120 s:\n{}",
            run.lines().join("\n")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    kill(Pid::from_raw(run.child.id() as i32), Signal::SIGINT).unwrap();
    let (ok, stdout, lines) = run.finish_interrupted(Duration::from_secs(60));
    assert!(ok, "{}", lines.join("\n"));
    let s = last_json(&stdout);
    assert_eq!(s["stopped_by_request"], true, "{s}");
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(run_dir.join("checkpoint/state.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        state["updates"], s["updates"],
        "the final checkpoint holds the last update"
    );
    let metrics = std::fs::read_to_string(run_dir.join("metrics.csv")).unwrap();
    for row in metrics.lines().skip(1) {
        let lag: f64 = row.split(',').nth(4).unwrap().parse().unwrap();
        assert_eq!(lag, 0.0, "sync mode row with policy lag: {row}");
    }
    for pid in actor_pids(&lines) {
        assert!(!process_alive(pid), "actor {pid} outlived the run");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The default config (MaskedCartPole-v1, observation and reward normalization, linear
/// schedules, `[eval]`): 50k frames learn (the greedy evaluation rises well above a random
/// policy's ~25), eval.csv has one row per 5k frames plus the end, the normalizer's statistics
/// travel in the checkpoint's weights, and `recur-learner eval` reads the run back.
#[test]
fn default_config_evaluates_during_training_and_from_the_checkpoint() {
    let dir = temp_dir("train-eval");
    let dir_s = dir.to_string_lossy().into_owned();
    let (ok, stdout, lines) = Watched::spawn(train(&[
        "--config",
        "configs/masked_cartpole.toml",
        "--run-dir",
        &dir_s,
        "--frames",
        "50000",
        "--seed",
        "3",
    ]))
    .finish(Duration::from_secs(400));
    assert!(ok, "training failed:\n{}", lines.join("\n"));
    let s = last_json(&stdout);
    let csv = std::fs::read_to_string(dir.join("eval.csv")).unwrap();
    let mut rows = csv.lines();
    assert_eq!(
        rows.next(),
        Some("frames,wall_s,eval_return_mean,eval_return_std,episodes")
    );
    let rows: Vec<Vec<f64>> = rows
        .map(|l| l.split(',').map(|x| x.parse().unwrap()).collect())
        .collect();
    // One evaluation per 5k frames (at the first update past each multiple) and the end.
    assert_eq!(rows.len(), 10, "{csv}");
    for (k, row) in rows.iter().take(9).enumerate() {
        let at = (k as f64 + 1.0) * 5000.0;
        assert!(row[0] >= at && row[0] < at + 512.0, "{csv}");
        assert_eq!(row[4], 20.0);
    }
    let last = rows.last().unwrap();
    assert_eq!(last[0], s["frames"].as_f64().unwrap());
    assert_eq!(s["final_eval_return"].as_f64(), Some(last[2]));
    assert!(last[2] >= 150.0, "greedy return after 50k frames: {csv}");
    if let Some(f) = s["eval_frames_to_target"].as_f64() {
        assert!(rows.iter().any(|r| r[0] == f && r[2] >= 475.0), "{s}");
    }

    // The normalizer's statistics lead the weight blob (header of 32 bytes, then the
    // [4, obs_dim = 2] rows mean, var, count, clip): set by the learner, not the identity.
    let blob = std::fs::read(dir.join("checkpoint/weights.bin")).unwrap();
    let value = |i: usize| f32::from_le_bytes(blob[32 + 4 * i..36 + 4 * i].try_into().unwrap());
    assert!(
        value(4) >= 50_000.0 && value(5) == value(4),
        "count {}",
        value(4)
    );
    assert_eq!(value(6), 10.0, "clip");
    assert!(value(2) > 0.0 && value(2) != 1.0, "variance {}", value(2));

    // recur-learner eval: one JSON line for the checkpoint.
    let e = eval_checkpoint(&dir_s, 7);
    assert_eq!(e["env"], "MaskedCartPole-v1");
    assert_eq!(e["episodes"], 7);
    assert!(e["mean_return"].as_f64().unwrap() >= 9.0, "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The minGRU preset across real processes: actors step the minGRU policy sequentially, the
/// learner trains it in recurrent mode on the fused minGRU kernel, and its checkpoint
/// evaluates. (Its learning-quality figures are in docs/BENCHMARKS.md; this guards the
/// wiring: a random policy scores about 20, a policy that learned nothing the same.)
#[test]
fn mingru_preset_trains_across_processes_and_its_checkpoint_evaluates() {
    let dir = temp_dir("train-mingru");
    let dir_s = dir.to_string_lossy().into_owned();
    let (ok, stdout, lines) = Watched::spawn(train(&[
        "--config",
        "configs/masked_cartpole_mingru.toml",
        "--run-dir",
        &dir_s,
        "--frames",
        "50000",
        "--seed",
        "4",
    ]))
    .finish(Duration::from_secs(400));
    assert!(ok, "training failed:\n{}", lines.join("\n"));
    let s = last_json(&stdout);
    let greedy = s["final_eval_return"].as_f64().unwrap();
    assert!(greedy >= 100.0, "greedy return after 50k frames: {s}");
    assert_eq!(s["transport"]["corrupted"], 0);
    let config = std::fs::read_to_string(dir.join("config.toml")).unwrap();
    assert!(config.contains("cell = \"mingru\""), "{config}");
    let e = eval_checkpoint(&dir_s, 5);
    assert!(e["mean_return"].as_f64().unwrap() >= 50.0, "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

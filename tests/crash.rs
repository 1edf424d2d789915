//! Crash safety and bad input across real processes (issue 20): the end of a run with attached
//! actors, signals in every phase, checkpoint writes killed between every pair of filesystem
//! steps and resumed, damaged checkpoints, the run-directory lock, actors gone for good, a
//! stopped learner, and a kill/resume soak. Every phase is reached by a log line or a file,
//! never by a sleep.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use recur_tests::run_support::{
    actor_pids, last_json, metrics_updates, new_run, nothing_left, resume, run_id,
};
use recur_tests::{binary, process_alive, segments_containing, temp_dir, Watched};
use serde_json::Value;

/// A small CartPole run: 4 envs x 16 steps per chunk, PPO on every chunk, LSTM 16.
const TINY: &str = r#"
[run]
env = "CartPole-v1"
frames = 1_000_000_000
seed = 3
actors = 1
checkpoint_every = 1

[collector]
mode = "sync"
envs_per_actor = 4
steps = 16
ring_slots = 2
max_restarts = 1
restart_backoff_s = 0.01

[policy]
cell = "lstm"
hidden_size = 16
encoder = [16]

[ppo]
frames_per_update = 64
epochs = 1
slice_len = 16
num_slices = 4
lr = 1e-3
gamma = 0.99
gae_lambda = 0.95
clip_eps = 0.2
value_coef = 0.5
entropy_coef = 0.01
max_grad_norm = 0.5
"#;

/// Writes the tiny config (with `edit` applied) as `dir/tiny.toml`.
fn tiny_config(dir: &Path, edit: impl Fn(String) -> String) -> PathBuf {
    let path = dir.join("tiny.toml");
    std::fs::write(&path, edit(TINY.to_string())).unwrap();
    path
}

fn wait_rows(run: &Watched, run_dir: &Path, rows: usize) {
    let start = Instant::now();
    while metrics_updates(run_dir).len() < rows {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no {rows} updates within 120 s:\n{}",
            run.lines().join("\n")
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn signal(w: &Watched, sig: Signal) {
    kill(Pid::from_raw(w.child.id() as i32), sig).unwrap();
}

/// Waits (at most 30 s each) for the actors of a killed learner to notice and exit.
fn wait_for_orphans(lines: &[String]) {
    for pid in actor_pids(lines) {
        let start = Instant::now();
        while process_alive(pid) && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `recur-actor --connect` with the tiny config's architecture, as a user attaches one.
fn attached_actor(socket: &Path, actor_id: u32) -> Watched {
    let mut cmd = Command::new(binary("recur-actor"));
    cmd.args(["--connect", socket.to_str().unwrap()])
        .args(["--env", "CartPole-v1", "--envs", "4", "--steps", "16"])
        .args(["--cell", "lstm", "--hidden", "16", "--layers", "1"])
        .args(["--encoder", "16", "--seed", "9"])
        .args(["--actor-id", &actor_id.to_string()])
        .env("RUST_LOG", "info");
    Watched::spawn(cmd)
}

/// The end of a run with actors it did not spawn: one attached actor stops when told (exit 0),
/// one that never answers (SIGSTOP) is waited for a bounded time and left alone (not killed:
/// not the learner's child); the learner exits within 30 s with its summary, no log spam; a
/// second SIGTERM during that wait ends the learner at once (exit 130) in a second run.
#[test]
fn attached_actors_at_the_end_of_a_run() {
    let dir = temp_dir("crash-attached");
    let config = tiny_config(&dir, |t| t);
    let run_dir = dir.join("run");
    let run = Watched::spawn(new_run(&config, &run_dir, &[]));
    run.wait_for("the spawned actor", Duration::from_secs(60), |l| {
        l.contains("actor 0/0") && l.contains("registered")
    });
    let socket = run_dir.join("control.sock");
    let polite = attached_actor(&socket, 7);
    let stubborn = attached_actor(&socket, 8);
    for id in [7, 8] {
        run.wait_for("the attached actor", Duration::from_secs(60), |l| {
            l.contains(&format!("actor {id}/0")) && l.contains("registered")
        });
    }
    // The stubborn one stops answering (it holds no lock the learner needs).
    kill(Pid::from_raw(stubborn.child.id() as i32), Signal::SIGSTOP).unwrap();
    let asked = Instant::now();
    signal(&run, Signal::SIGTERM);
    let (ok, stdout, lines) = run.finish_interrupted(Duration::from_secs(30));
    let took = asked.elapsed();
    assert!(ok, "{}", lines.join("\n"));
    assert!(took < Duration::from_secs(30), "the learner took {took:?}");
    let s = last_json(&stdout);
    assert_eq!(s["stopped_by_request"], true, "{s}");
    assert!(run_dir.join("summary.json").exists());
    let gave_up: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("did not stop within"))
        .collect();
    assert_eq!(gave_up.len(), 1, "{}", lines.join("\n"));
    let stubborn_pid = stubborn.child.id();
    assert!(
        gave_up[0].contains(&stubborn_pid.to_string()),
        "{}",
        gave_up[0]
    );
    // The polite one was told to stop and did (exit 0); the stubborn one was not killed.
    let (polite_ok, _, polite_lines) = polite.finish(Duration::from_secs(20));
    assert!(polite_ok, "{}", polite_lines.join("\n"));
    assert!(
        process_alive(stubborn_pid),
        "the learner killed an actor it does not own"
    );
    // Woken, it notices the learner is gone and exits by itself.
    kill(Pid::from_raw(stubborn_pid as i32), Signal::SIGCONT).unwrap();
    let _ = stubborn.finish(Duration::from_secs(20));
    nothing_left(&lines);

    // A second signal ends the run at once, even while the learner waits for its actors.
    let run_dir = dir.join("run2");
    let mut run = Watched::spawn(new_run(&config, &run_dir, &[]));
    run.wait_for("the spawned actor", Duration::from_secs(60), |l| {
        l.contains("actor 0/0") && l.contains("registered")
    });
    let stubborn = attached_actor(&run_dir.join("control.sock"), 8);
    run.wait_for("the attached actor", Duration::from_secs(60), |l| {
        l.contains("actor 8/0") && l.contains("registered")
    });
    kill(Pid::from_raw(stubborn.child.id() as i32), Signal::SIGSTOP).unwrap();
    signal(&run, Signal::SIGTERM);
    run.wait_for("the first signal's line", Duration::from_secs(20), |l| {
        l.contains("SIGTERM: ending the run")
    });
    let asked = Instant::now();
    signal(&run, Signal::SIGTERM);
    let code = loop {
        if let Some(status) = run.child.try_wait().unwrap() {
            break status.code();
        }
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "no exit after the second signal"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(code, Some(130));
    // Its last line says how to continue the run.
    let again = run.wait_for("the second signal's line", Duration::from_secs(5), |l| {
        l.contains("SIGTERM again: exiting now")
    });
    assert!(
        again.ends_with(&format!("continue it with --resume {}", run_dir.display())),
        "{again}"
    );
    kill(Pid::from_raw(stubborn.child.id() as i32), Signal::SIGCONT).unwrap();
    let _ = stubborn.finish(Duration::from_secs(20));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The tiny config whose first update needs more frames than any test waits for.
fn no_update_soon(t: String) -> String {
    t.replace("mode = \"sync\"", "mode = \"async\"")
        .replace("frames_per_update = 64", "frames_per_update = 1_280_000")
}

/// SIGTERM ends a run cleanly in every phase: during setup, before the first update, while
/// training, and in the middle of a checkpoint write (raised by the fault seam between two of
/// its filesystem steps). Each time: exit 130, `stopped_by_request`, a final checkpoint holding
/// the last update, no orphans, no segments.
#[test]
fn sigterm_ends_the_run_cleanly_in_every_phase() {
    let dir = temp_dir("crash-sigterm");
    for phase in [
        "setup",
        "before the first update",
        "training",
        "checkpointing",
    ] {
        let slow = matches!(phase, "setup" | "before the first update");
        let config = if slow {
            tiny_config(&dir, no_update_soon)
        } else {
            tiny_config(&dir, |t| t)
        };
        let run_dir = dir.join(phase.replace(' ', "-"));
        let mut cmd = new_run(&config, &run_dir, &[]);
        if phase == "checkpointing" {
            cmd.env("RECUR_FAULT_CHECKPOINT", "3:5:term");
        }
        let run = Watched::spawn(cmd);
        match phase {
            "setup" => {
                run.wait_for("setup", Duration::from_secs(60), |l| l.contains("(locked)"));
                signal(&run, Signal::SIGTERM);
            }
            "before the first update" => {
                run.wait_for("a registration", Duration::from_secs(60), |l| {
                    l.contains("registered")
                });
                signal(&run, Signal::SIGTERM);
            }
            "training" => {
                wait_rows(&run, &run_dir, 3);
                signal(&run, Signal::SIGTERM);
            }
            _ => {
                run.wait_for("the injected SIGTERM", Duration::from_secs(60), |l| {
                    l.contains("SIGTERM after step 5 of checkpoint write 3")
                });
            }
        }
        let (ok, stdout, lines) = run.finish_interrupted(Duration::from_secs(60));
        assert!(ok, "{phase}: {}", lines.join("\n"));
        let s = last_json(&stdout);
        assert_eq!(s["stopped_by_request"], true, "{phase}: {s}");
        if slow {
            assert_eq!(s["updates"], 0, "{phase}: {s}");
        } else {
            assert!(s["updates"].as_u64().unwrap() >= 3, "{phase}: {s}");
        }
        let state: Value = serde_json::from_str(
            &std::fs::read_to_string(run_dir.join("checkpoint/state.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(state["updates"], s["updates"], "{phase}: final checkpoint");
        nothing_left(&lines);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The learner killed (SIGKILL, by the fault seam) right after each filesystem step of a
/// checkpoint write resumes every time, from the checkpoint the step left complete: the new
/// one once it is renamed in place, the previous one before (from `checkpoint.old/` between the
/// two renames, saying so). Killed inside its first checkpoint write, a run resumes from update
/// 0, saying so. metrics.csv never holds an update twice.
#[test]
fn a_checkpoint_write_killed_between_any_two_steps_resumes() {
    let dir = temp_dir("crash-ckpt-steps");
    let config = tiny_config(&dir, |t| t);
    let mut cases: Vec<(u32, u32)> = (1..=13).map(|step| (2, step)).collect();
    cases.push((1, 3));
    for (save, step) in cases {
        let run_dir = dir.join(format!("run-{save}-{step}"));
        let mut cmd = new_run(&config, &run_dir, &[]);
        cmd.env("RECUR_FAULT_CHECKPOINT", format!("{save}:{step}"));
        let (ok, _, lines) = Watched::spawn(cmd).finish(Duration::from_secs(120));
        assert!(!ok, "the fault did not fire:\n{}", lines.join("\n"));
        assert!(
            lines.iter().any(|l| l.contains(&format!(
                "SIGKILL after step {step} of checkpoint write {save}"
            ))),
            "{}",
            lines.join("\n")
        );
        // Wait for the killed learner's actors to notice and go (they are its orphans now).
        wait_for_orphans(&lines);
        let (ok, stdout, lines) =
            Watched::spawn(resume(&run_dir, &["--frames", "256"])).finish(Duration::from_secs(120));
        assert!(
            ok,
            "resume after step {step} of save {save}:\n{}",
            lines.join("\n")
        );
        let expected = match (save, step) {
            (1, _) => 0,
            (_, 1..=11) => 1,
            _ => 2,
        };
        let text = lines.join("\n");
        if expected == 0 {
            assert!(text.contains("holds no checkpoint"), "{text}");
        } else {
            assert!(
                text.contains(&format!("resumed at update {expected} ")),
                "step {step}: expected update {expected}:\n{text}"
            );
        }
        assert_eq!(
            text.contains("resuming from the previous checkpoint"),
            step == 11 && save == 2,
            "step {step}:\n{text}"
        );
        let s = last_json(&stdout);
        assert_eq!(s["updates"], 4, "{s}");
        assert_eq!(metrics_updates(&run_dir), [1, 2, 3, 4], "step {step}");
        nothing_left(&lines);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Copies a run directory (files only, one level of subdirectories).
fn copy_run(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_run(&entry.path(), &target);
        } else if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Every file of a run directory and its bytes (the lock file aside).
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n != "run.lock") {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// Resumes `run_dir`, expecting a refusal: returns stderr after checking the exit code (an
/// error, not a panic) and that nothing in the directory changed.
fn refused_resume(run_dir: &Path) -> String {
    let before = snapshot(run_dir);
    let out = recur_tests::run_with_deadline(
        resume(run_dir, &["--frames", "512"]),
        Duration::from_secs(60),
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        snapshot(run_dir) == before,
        "a refused resume changed the run directory:\n{err}"
    );
    err
}

/// Damaged and mismatched checkpoints: a truncated file falls back to the previous checkpoint
/// (saying which file and why); flipped bits in both are an error naming both files; a NaN
/// weight (with a matching checksum) is refused; a config edited to another architecture is an
/// error naming the field. Never a panic, and a refused resume changes nothing.
#[test]
fn damaged_and_mismatched_checkpoints_are_named_and_never_overwritten() {
    let dir = temp_dir("crash-ckpt-damage");
    let config = tiny_config(&dir, |t| t);
    let good = dir.join("good");
    let (ok, _, lines) = Watched::spawn(new_run(&config, &good, &["--frames", "192"]))
        .finish(Duration::from_secs(120));
    assert!(ok, "{}", lines.join("\n"));
    assert!(good.join("checkpoint.old/manifest.json").exists());

    // Truncated model.bin: the previous checkpoint is used, and the log says why.
    let run = dir.join("truncated");
    copy_run(&good, &run);
    let model = run.join("checkpoint/model.bin");
    let len = std::fs::metadata(&model).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&model)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let (ok, _, lines) =
        Watched::spawn(resume(&run, &["--frames", "256"])).finish(Duration::from_secs(120));
    let text = lines.join("\n");
    assert!(ok, "{text}");
    assert!(
        text.contains("model.bin")
            && text.contains("truncated")
            && text.contains("resuming from the previous checkpoint"),
        "{text}"
    );

    // Flipped bits in both checkpoints: an error naming both files; nothing written.
    let run = dir.join("flipped");
    copy_run(&good, &run);
    for file in ["checkpoint/weights.bin", "checkpoint.old/optim.bin"] {
        let mut bytes = std::fs::read(run.join(file)).unwrap();
        let at = bytes.len() / 2;
        bytes[at] ^= 0x10;
        std::fs::write(run.join(file), bytes).unwrap();
    }
    let err = refused_resume(&run);
    assert!(
        err.contains("checkpoint/weights.bin")
            && err.contains("checkpoint.old/optim.bin")
            && err.contains("CRC-32"),
        "{err}"
    );

    // A NaN weight with a checksum that matches: refused (here in both checkpoints).
    let run = dir.join("nan");
    copy_run(&good, &run);
    for ckpt in ["checkpoint", "checkpoint.old"] {
        let path = run.join(ckpt).join("weights.bin");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[32..36].copy_from_slice(&f32::NAN.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let manifest_path = run.join(ckpt).join("manifest.json");
        let mut manifest: Value =
            serde_json::from_str(&std::fs::read_to_string(&manifest_path).unwrap()).unwrap();
        for f in manifest["files"].as_array_mut().unwrap() {
            if f["name"] == "weights.bin" {
                f["crc32"] = crc32fast::hash(&bytes).into();
            }
        }
        std::fs::write(&manifest_path, manifest.to_string()).unwrap();
    }
    let err = refused_resume(&run);
    assert!(
        err.contains("weights.bin") && err.contains("NaN") && err.contains("finite"),
        "{err}"
    );

    // The config edited to another architecture: refused before anything loads.
    let run = dir.join("mismatch");
    copy_run(&good, &run);
    let cfg = run.join("config.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains("hidden_size = 16"));
    std::fs::write(&cfg, text.replace("hidden_size = 16", "hidden_size = 32")).unwrap();
    let err = refused_resume(&run);
    assert!(
        err.contains("hidden_size = 16 (the config asks for 32)"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The run directory: a second run in a directory a run holds is refused while it runs (lock)
/// and after it ended (pointing at --resume); a world-writable directory recur did not create
/// is refused and its mode left alone.
#[test]
fn a_run_directory_is_locked_and_never_clobbered() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("crash-rundir");
    let config = tiny_config(&dir, |t| t);
    let run_dir = dir.join("run");
    let run = Watched::spawn(new_run(&config, &run_dir, &[]));
    wait_rows(&run, &run_dir, 1);
    let out =
        recur_tests::run_with_deadline(new_run(&config, &run_dir, &[]), Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("in use by another recur process")
            && err.contains(&run.child.id().to_string()),
        "{err}"
    );
    // The running one is unharmed: its socket is there, and it ends cleanly.
    assert!(run_dir.join("control.sock").exists());
    let rows = metrics_updates(&run_dir).len();
    wait_rows(&run, &run_dir, rows + 2);
    signal(&run, Signal::SIGTERM);
    let (ok, _, lines) = run.finish_interrupted(Duration::from_secs(60));
    assert!(ok, "{}", lines.join("\n"));
    let weights = std::fs::read(run_dir.join("checkpoint/weights.bin")).unwrap();

    let out =
        recur_tests::run_with_deadline(new_run(&config, &run_dir, &[]), Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("already holds a run") && err.contains("--resume"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(run_dir.join("checkpoint/weights.bin")).unwrap(),
        weights
    );

    let shared = dir.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let out =
        recur_tests::run_with_deadline(new_run(&config, &shared, &[]), Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("can be written by every user") && err.contains("1777"),
        "{err}"
    );
    let mode = std::fs::metadata(&shared).unwrap().permissions().mode() & 0o7777;
    assert_eq!(
        mode, 0o1777,
        "recur changed the mode of a directory it did not create"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An executable `dir/name` that answers the learner's `--describe-env` as recur-actor does
/// (the learner asks before any actor starts) and runs the shell line `body` at every start.
fn fake_actor(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    let script = format!(
        "#!/bin/sh\n[ \"$1\" = --describe-env ] && exec {} \"$@\"\n{body}\n",
        binary("recur-actor").display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Actors that die for good (here: an actor program that exits with code 3 at once): the run
/// still writes its final checkpoint and summary, and its error names the last actor exit.
#[test]
fn actors_gone_for_good_still_leave_a_checkpoint_and_a_summary() {
    let dir = temp_dir("crash-actors-gone");
    let config = tiny_config(&dir, |t| t);
    let dying = fake_actor(&dir, "dying-actor", "exit 3");
    let run_dir = dir.join("run");
    let (ok, _, lines) = Watched::spawn(new_run(
        &config,
        &run_dir,
        &["--actor-bin", dying.to_str().unwrap()],
    ))
    .finish(Duration::from_secs(60));
    let text = lines.join("\n");
    assert!(!ok, "{text}");
    assert!(
        text.contains("every actor stopped for good") && text.contains("exit code 3"),
        "{text}"
    );
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("summary.json")).unwrap())
            .unwrap();
    assert!(
        summary["actors_gone"]
            .as_str()
            .unwrap()
            .contains("exit code 3"),
        "{summary}"
    );
    assert!(run_dir.join("checkpoint/manifest.json").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A stopped learner (SIGSTOP: alive, but answering nothing): its actors exit within seconds
/// instead of blocking on their full rings.
#[test]
fn actors_exit_when_the_learner_stops_answering() {
    let dir = temp_dir("crash-sigstop");
    let config = tiny_config(&dir, |t| t);
    let run_dir = dir.join("run");
    let run = Watched::spawn(new_run(&config, &run_dir, &[]));
    wait_rows(&run, &run_dir, 2);
    let pids = actor_pids(&run.lines());
    assert!(!pids.is_empty());
    signal(&run, Signal::SIGSTOP);
    let stopped = Instant::now();
    for pid in &pids {
        while process_alive(*pid) {
            assert!(
                stopped.elapsed() < Duration::from_secs(30),
                "actor {pid} still runs 30 s after its learner stopped"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    eprintln!(
        "actors exited {:?} after the learner stopped",
        stopped.elapsed()
    );
    signal(&run, Signal::SIGKILL);
    drop(run);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A soak: the learner SIGKILLed at random instants during training (`checkpoint_every = 1`),
/// each time followed by `--resume`; `RECUR_SOAK_KILLS` kills (default 5; 50 for the
/// developer run in benchmarks/history/). Every resume succeeds from a readable checkpoint, the
/// last run ends cleanly, metrics.csv holds each update once, and no segment is left.
#[test]
fn soak_learner_sigkills_each_followed_by_resume() {
    let kills: usize = std::env::var("RECUR_SOAK_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let dir = temp_dir("crash-soak");
    let config = tiny_config(&dir, |t| t);
    let run_dir = dir.join("run");
    let mut rng = std::process::id() as u64 ^ 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut run_ids = Vec::new();
    let mut fallbacks = 0;
    for k in 0..kills {
        let cmd = if k == 0 {
            new_run(&config, &run_dir, &[])
        } else {
            resume(&run_dir, &[])
        };
        let run = Watched::spawn(cmd);
        if k > 0 {
            let line = run.wait_for("the resume", Duration::from_secs(60), |l| {
                l.contains("resumed at update") || l.contains("holds no checkpoint")
            });
            fallbacks += run
                .lines()
                .iter()
                .filter(|l| l.contains("previous checkpoint"))
                .count();
            assert!(!line.contains("error"), "{line}");
        }
        // A random instant: after 1-3 more updates, plus 0-20 ms.
        let rows = metrics_updates(&run_dir).len();
        wait_rows(&run, &run_dir, rows + 1 + (next() % 3) as usize);
        std::thread::sleep(Duration::from_millis(next() % 20));
        signal(&run, Signal::SIGKILL);
        let (_, _, lines) = run.finish(Duration::from_secs(30));
        run_ids.extend(run_id(&lines));
    }
    let done = (metrics_updates(&run_dir).len() as u64 + 3) * 64;
    let (ok, stdout, lines) = Watched::spawn(resume(&run_dir, &["--frames", &done.to_string()]))
        .finish(Duration::from_secs(120));
    assert!(ok, "{}", lines.join("\n"));
    let s = last_json(&stdout);
    let updates = metrics_updates(&run_dir);
    let expected: Vec<u64> = (1..=s["updates"].as_u64().unwrap()).collect();
    assert_eq!(updates, expected, "metrics.csv rows after {kills} kills");
    run_ids.extend(run_id(&lines));
    nothing_left(&lines);
    // Segments of the killed runs: reclaimed by the runs that followed (or the actors).
    for id in &run_ids {
        assert!(
            segments_containing(id).is_empty(),
            "segments of run {id} left"
        );
    }
    eprintln!(
        "{kills} kills, {fallbacks} fallbacks to the previous checkpoint, {} updates",
        updates.len()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The metrics of each update without its timings (`wall_s`, `frames_per_s`).
fn metrics_without_timings(run_dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(run_dir.join("metrics.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|l| {
            l.split(',')
                .zip(&header)
                .filter(|(_, h)| !matches!(**h, "wall_s" | "frames_per_s"))
                .map(|(v, _)| v)
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect()
}

/// Resume is exact: in `sync` mode a run whose learner is killed (SIGKILL) mid-training and
/// resumed, and whose actor is then killed and restarted by the supervisor, ends with the same
/// weights, bit for bit, and the same metrics as the same run uninterrupted. Two actors (their
/// chunks arrive in either order), reward normalization on, episodes longer than a chunk: the
/// environments' states, the actors' recurrent states and samplers, the learner's sampler and
/// reward statistics and the open episode returns all cross the checkpoint.
#[test]
fn a_killed_and_resumed_sync_run_ends_bit_identical_to_the_uninterrupted_run() {
    exact_resume("crash-exact", |t| t);
}

/// The same with images: PixelCartPole's frames through a small conv encoder (the fused
/// update's), so the pixels lane crosses the rings, the actors' saved states (their frames
/// are drawn again from the environments' states on load) and the checkpoint.
#[test]
fn a_killed_and_resumed_sync_image_run_ends_bit_identical_to_the_uninterrupted_run() {
    exact_resume("crash-exact-images", |t| {
        t.replace("\"CartPole-v1\"", "\"PixelCartPole-v1\"")
            .replace(
            "encoder = [16]",
            "[policy.encoder]\nmlp = []\ncnn = { channels = [4], kernels = [8], strides = [8], \
             scale = 0.00392156862, features = 8 }",
        )
    });
}

fn exact_resume(name: &str, edit: impl Fn(String) -> String) {
    let dir = temp_dir(name);
    let config = tiny_config(&dir, |t| {
        edit(t)
            .replace("actors = 1", "actors = 2")
            // 48 updates of 128 frames: after the actor is killed at update ~6 of the resumed
            // run, dozens of updates remain that need its restart (a sync update waits for
            // every actor's chunk), however fast the learner finishes the ones it can.
            .replace("frames = 1_000_000_000", "frames = 6_144")
            .replace("max_restarts = 1", "max_restarts = 3")
            .replace(
                "max_grad_norm = 0.5",
                "max_grad_norm = 0.5\nreward_norm = true",
            )
    });
    let uninterrupted = dir.join("uninterrupted");
    let (ok, stdout, lines) =
        Watched::spawn(new_run(&config, &uninterrupted, &[])).finish(Duration::from_secs(180));
    assert!(ok, "{}", lines.join("\n"));
    let expected = last_json(&stdout);
    assert_eq!(expected["updates"], 48, "{expected}");

    let killed = dir.join("killed");
    let run = Watched::spawn(new_run(&config, &killed, &[]));
    wait_rows(&run, &killed, 4);
    signal(&run, Signal::SIGKILL);
    let (_, _, lines) = run.finish(Duration::from_secs(30));
    wait_for_orphans(&lines);
    let run = Watched::spawn(resume(&killed, &[]));
    for id in [0, 1] {
        run.wait_for("a restored actor", Duration::from_secs(60), |l| {
            l.contains(&format!("actor {id}/0 continues from its saved state"))
        });
    }
    // An actor killed mid-run continues from its saved state too (a new incarnation).
    let rows = metrics_updates(&killed).len();
    wait_rows(&run, &killed, rows + 2);
    let pid = actor_pids(&run.lines())[0];
    kill(Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap();
    let (ok, stdout, lines) = run.finish(Duration::from_secs(180));
    assert!(ok, "{}", lines.join("\n"));
    let text = lines.join("\n");
    assert!(
        text.contains("/1 continues from its saved state"),
        "the restarted actor did not continue:\n{text}"
    );
    let got = last_json(&stdout);
    for key in [
        "updates",
        "frames",
        "episodes",
        "final_mean_return",
        "dropped_chunks",
    ] {
        assert_eq!(got[key], expected[key], "{key}: {got} vs {expected}");
    }
    assert_eq!(
        metrics_without_timings(&killed),
        metrics_without_timings(&uninterrupted),
        "metrics.csv"
    );
    let weights = |run: &Path| std::fs::read(run.join("checkpoint/weights.bin")).unwrap();
    assert!(
        weights(&killed) == weights(&uninterrupted),
        "the resumed run's final weights differ from the uninterrupted run's"
    );
    nothing_left(&lines);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `recur-learner replay` ends cleanly on SIGTERM too: exit 130 with its final checkpoint and
/// summary, long before its updates are done.
#[test]
fn sigterm_ends_a_replay_run_cleanly() {
    let dir = temp_dir("crash-replay");
    let data = dir.join("data");
    let mut cmd = Command::new(binary("recur-actor"));
    cmd.args([
        "--env",
        "RepeatPrevious-v0",
        "--envs",
        "16",
        "--steps",
        "32",
    ])
    .args([
        "--frames", "2048", "--cell", "gru", "--hidden", "16", "--seed", "5",
    ])
    .arg("--record")
    .arg(&data);
    let out = recur_tests::run_with_deadline(cmd, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_dir = dir.join("run");
    let mut cmd = Command::new(binary("recur-learner"));
    cmd.args([
        "replay",
        "--dataset",
        data.to_str().unwrap(),
        "--algo",
        "bc",
    ])
    .args([
        "--updates",
        "100000000",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--quiet",
    ])
    .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
    .env("RUST_LOG", "info");
    let run = Watched::spawn(cmd);
    wait_rows(&run, &run_dir, 2);
    signal(&run, Signal::SIGTERM);
    let (ok, _, lines) = run.finish_interrupted(Duration::from_secs(120));
    assert!(ok, "{}", lines.join("\n"));
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("summary.json")).unwrap())
            .unwrap();
    assert!(
        summary["updates"].as_u64().unwrap() < 100_000_000,
        "{summary}"
    );
    assert!(run_dir.join("checkpoint/manifest.json").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An update that produces non-finite weights (here: `ppo.lr = 1e38` overflows within a few
/// updates) stops the run with an error naming the update; the weights are neither published
/// nor checkpointed (every checkpoint on disk holds finite weights).
#[test]
fn non_finite_weights_are_never_published_or_checkpointed() {
    let dir = temp_dir("crash-nan");
    let config = tiny_config(&dir, |t| t.replace("lr = 1e-3", "lr = 1e38"));
    let run_dir = dir.join("run");
    let (ok, _, lines) = Watched::spawn(new_run(&config, &run_dir, &["--frames", "6400"]))
        .finish(Duration::from_secs(120));
    let text = lines.join("\n");
    assert!(!ok, "{text}");
    assert!(
        text.contains("produced weights that are not finite"),
        "{text}"
    );
    for ckpt in ["checkpoint", "checkpoint.old"] {
        let Ok(blob) = std::fs::read(run_dir.join(ckpt).join("weights.bin")) else {
            continue;
        };
        assert!(
            blob[32..]
                .chunks_exact(4)
                .all(|b| f32::from_le_bytes(b.try_into().unwrap()).is_finite()),
            "{ckpt} holds non-finite weights"
        );
    }
    nothing_left(&lines);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The natural end of a run (its frames reached) whose chunks all come from an attached
/// `recur-actor --connect`: the run's own actor slot holds a program that never registers
/// (`sleep`), so the run cannot end before the attached actor delivers. At the end the attached
/// actor is told to stop (exit 0), the silent child is killed after the grace period, and the
/// learner exits within 30 s of its last update with its summary.
#[test]
fn an_attached_actor_at_the_natural_end_of_a_run() {
    let dir = temp_dir("crash-attached-end");
    let config = tiny_config(&dir, |t| t);
    let silent = fake_actor(&dir, "silent-actor", "exec sleep 1000");
    let run_dir = dir.join("run");
    let run = Watched::spawn(new_run(
        &config,
        &run_dir,
        &["--frames", "640", "--actor-bin", silent.to_str().unwrap()],
    ));
    run.wait_for("the control socket", Duration::from_secs(60), |l| {
        l.contains("actor 0/0 started")
    });
    let attached = attached_actor(&run_dir.join("control.sock"), 7);
    wait_rows(&run, &run_dir, 10);
    let last_update = Instant::now();
    let (ok, stdout, lines) = run.finish(Duration::from_secs(30));
    assert!(ok, "{}", lines.join("\n"));
    eprintln!(
        "the learner exited {:?} after its last update",
        last_update.elapsed()
    );
    assert!(last_update.elapsed() < Duration::from_secs(30));
    let s = last_json(&stdout);
    assert_eq!(s["updates"], 10, "{s}");
    assert_eq!(s["stopped_by_request"], false, "{s}");
    assert!(run_dir.join("summary.json").exists());
    let (attached_ok, _, attached_lines) = attached.finish(Duration::from_secs(20));
    assert!(attached_ok, "{}", attached_lines.join("\n"));
    nothing_left(&lines);
    std::fs::remove_dir_all(&dir).unwrap();
}

//! Provoked faults of issue 34 across real processes: a full disk under every file a run writes
//! (a checkpoint, `metrics.csv` and the `tb/` events, the `--save-replay` dataset,
//! `recur-actor --record`), and a local actor that stops answering (SIGSTOP). Every phase is
//! reached by a log line or a file, never by a sleep; a stall is detected within its stated
//! bound and the test waits for it up to a generous deadline.
//!
//! The full disk is a small tmpfs the test mounts (root). Where mounting is refused these tests
//! say so on stderr and pass without running, unless `RECUR_REQUIRE_ROOT` (or CI's
//! `RECUR_REQUIRE_NETNS`) is set, which makes them fail.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::dataset::read_dataset;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use recur_tests::run_support::{actor_pids, metrics_updates, new_run, nothing_left, resume};
use recur_tests::{binary, process_alive, temp_dir, Watched};
use serde_json::Value;

/// A small CartPole run: one actor, 4 envs x 16 steps per chunk, an update per chunk (sync),
/// a checkpoint after every update. Hidden size 32: a checkpoint takes well over the room a
/// full-disk test leaves.
const TINY: &str = r#"
[run]
env = "CartPole-v1"
frames = 1_000_000_000
seed = 5
actors = 1
checkpoint_every = 1

[collector]
mode = "sync"
envs_per_actor = 4
steps = 16
ring_slots = 2
restart_backoff_s = 0.01

[policy]
cell = "lstm"
hidden_size = 32
encoder = [32]

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

fn tiny_config(dir: &Path) -> PathBuf {
    let path = dir.join("tiny.toml");
    std::fs::write(&path, TINY).unwrap();
    path
}

/// Waits (up to 120 s) until `metrics.csv` holds update `update`.
fn wait_update(run: &Watched, run_dir: &Path, update: u64) {
    let start = Instant::now();
    while metrics_updates(run_dir).last().is_none_or(|&u| u < update) {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no update {update} within 120 s:\n{}",
            run.lines().join("\n")
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn signal(pid: u32, sig: Signal) {
    kill(Pid::from_raw(pid as i32), sig).unwrap();
}

fn summary(run_dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(run_dir.join("summary.json")).unwrap()).unwrap()
}

/// A resumed run continues from update `at`, adds two updates, ends on SIGTERM (exit 130), and
/// `metrics.csv` holds every update once, in order.
fn resumes_from(run_dir: &Path, at: u64) {
    let run = Watched::spawn(resume(run_dir, &[]));
    run.wait_for("the resume line", Duration::from_secs(60), |l| {
        l.contains(&format!("resumed at update {at} "))
    });
    wait_update(&run, run_dir, at + 2);
    signal(run.child.id(), Signal::SIGTERM);
    let (ok, _, lines) = run.finish_interrupted(Duration::from_secs(60));
    assert!(ok, "{}", lines.join("\n"));
    let updates = metrics_updates(run_dir);
    assert_eq!(
        updates,
        (1..=updates.len() as u64).collect::<Vec<_>>(),
        "metrics.csv"
    );
}

/// A small tmpfs mounted on a directory of its own; unmounted on drop (also when a test fails).
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts `bytes` of tmpfs on `dir`, or says why not (`None` after the skip message when
    /// mounting is refused and root is not required).
    fn mount(dir: &Path, bytes: u64) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={bytes},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .output();
        let why = match out {
            Ok(o) if o.status.success() => {
                return Some(Tmpfs {
                    dir: dir.to_path_buf(),
                })
            }
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => e.to_string(),
        };
        let required = ["RECUR_REQUIRE_ROOT", "RECUR_REQUIRE_NETNS"]
            .iter()
            .any(|v| std::env::var_os(v).is_some());
        assert!(
            !required,
            "root is required (RECUR_REQUIRE_ROOT/RECUR_REQUIRE_NETNS) but a tmpfs cannot be \
             mounted on {}: {why}",
            dir.display()
        );
        recur_tests::report_skip(&format!(
            "cannot mount a tmpfs ({why}); run as root (CI does) to run this test"
        ));
        None
    }

    fn filler(&self) -> PathBuf {
        self.dir.join("filler")
    }

    /// Fills the filesystem, then gives back `room` bytes.
    fn fill(&self, room: u64) {
        let mut f = std::fs::File::create(self.filler()).unwrap();
        let block = vec![0xa5u8; 1 << 16];
        for size in [1 << 16, 512, 1] {
            while matches!(f.write(&block[..size]), Ok(n) if n > 0) {}
        }
        let len = f.metadata().unwrap().len();
        f.set_len(len.saturating_sub(room)).unwrap();
    }

    /// Makes room again.
    fn free(&self) {
        std::fs::remove_file(self.filler()).unwrap();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// The update named in a failed run's "the last complete checkpoint: update N" line.
fn last_complete_checkpoint(log: &str) -> u64 {
    log.split("the last complete checkpoint: update ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no last complete checkpoint named:\n{log}"))
}

/// A disk that fills up under a checkpoint write: the learner is paused while the tmpfs holding
/// its run directory fills up to 12 KiB (room for its next metrics row and event, not for a
/// checkpoint), then continued. The checkpoint write fails: the error names the file and the
/// full disk, `checkpoint.tmp/` is removed (its space given back), no other checkpoint is
/// attempted, the actor is stopped, `summary.json` says `failed`, exit 1. With room again,
/// `--resume` continues from the last complete checkpoint, which the failure left intact.
#[test]
fn a_full_disk_fails_a_checkpoint_cleanly_and_the_run_resumes() {
    let dir = temp_dir("enospc-checkpoint");
    let Some(fs) = Tmpfs::mount(&dir.join("fs"), 8 << 20) else {
        return;
    };
    let run_dir = fs.dir.join("run");
    let run = Watched::spawn(new_run(&tiny_config(&dir), &run_dir, &[]));
    wait_update(&run, &run_dir, 3);
    let pid = run.child.id();
    signal(pid, Signal::SIGSTOP);
    fs.fill(12 << 10);
    signal(pid, Signal::SIGCONT);
    let (ok, _, lines) = run.finish(Duration::from_secs(120));
    let log = lines.join("\n");
    assert!(!ok, "{log}");
    for needle in [
        "writing the checkpoint",
        "checkpoint not written",
        "checkpoint.tmp/",
        "No space left on device",
    ] {
        assert!(log.contains(needle), "{needle:?} not in:\n{log}");
    }
    // Update 3's metrics row is written before its checkpoint: the disk may fill up between
    // the two, so the last complete checkpoint is update 2 or later.
    let at = last_complete_checkpoint(&log);
    assert!(at >= 2, "{log}");
    assert!(!run_dir.join("checkpoint.tmp").exists());
    let s = summary(&run_dir);
    assert!(
        s["failed"]
            .as_str()
            .is_some_and(|f| f.contains("No space left on device")),
        "{s}"
    );
    // The failed update's row is there; the resumed run drops it and writes it again.
    assert!(metrics_updates(&run_dir).contains(&(at + 1)), "{log}");
    nothing_left(&lines);
    fs.free();
    resumes_from(&run_dir, at);
    drop(fs);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A disk that fills up under `metrics.csv` (TensorBoard off) and then under the metrics and
/// the `tb/` event file: a run stopped cleanly at update N (SIGTERM, its checkpoint) is
/// resumed without periodic checkpoints, paused while the tmpfs fills up completely, and
/// continued. The first row or event that needs a new page fails: the error names that file
/// and the full disk; the final checkpoint is attempted, fails too and leaves the one of update
/// N intact; the actor is stopped; exit 1. With room again the run resumes from update N.
#[test]
fn a_full_disk_under_the_metrics_and_events_stops_the_run_cleanly() {
    let dir = temp_dir("enospc-metrics");
    let Some(fs) = Tmpfs::mount(&dir.join("fs"), 8 << 20) else {
        return;
    };
    let run_dir = fs.dir.join("run");
    let run = Watched::spawn(new_run(&tiny_config(&dir), &run_dir, &[]));
    wait_update(&run, &run_dir, 2);
    signal(run.child.id(), Signal::SIGTERM);
    let (ok, _, lines) = run.finish_interrupted(Duration::from_secs(60));
    assert!(ok, "{}", lines.join("\n"));
    for (tensorboard, names) in [
        ("false", &["metrics.csv"][..]),
        ("true", &["metrics.csv", "tb/events.out.tfevents."][..]),
    ] {
        let at = *metrics_updates(&run_dir).last().unwrap();
        let run = Watched::spawn(resume(
            &run_dir,
            &[
                "--set",
                "run.checkpoint_every=1000000",
                "--set",
                &format!("run.tensorboard={tensorboard}"),
            ],
        ));
        wait_update(&run, &run_dir, at + 1);
        let pid = run.child.id();
        signal(pid, Signal::SIGSTOP);
        fs.fill(0);
        signal(pid, Signal::SIGCONT);
        let (ok, _, lines) = run.finish(Duration::from_secs(120));
        let log = lines.join("\n");
        assert!(!ok, "{log}");
        assert!(
            log.contains("writing the metrics (metrics.csv, tb/)")
                && log.contains("No space left on device")
                && names.iter().any(|n| log.contains(n)),
            "tensorboard = {tensorboard}: no error naming {names:?}:\n{log}"
        );
        assert_eq!(last_complete_checkpoint(&log), at, "{log}");
        assert!(log.contains("the final checkpoint failed"), "{log}");
        assert!(!run_dir.join("checkpoint.tmp").exists());
        nothing_left(&lines);
        fs.free();
        resumes_from(&run_dir, at);
    }
    drop(fs);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A disk that fills up under a recording. `--save-replay` on a full tmpfs (the run directory
/// elsewhere): the append that fails names the dataset file and the full disk, the run stops
/// cleanly with its final checkpoint and a summary that says `failed`, exit 1; the dataset
/// reads back whole up to the failed chunk. `recur-actor --record` likewise exits with the
/// error, its dataset readable.
#[test]
fn a_full_disk_under_a_recording_stops_cleanly_and_keeps_the_dataset_readable() {
    let dir = temp_dir("enospc-record");
    let Some(fs) = Tmpfs::mount(&dir.join("fs"), 64 << 20) else {
        return;
    };
    let run_dir = dir.join("run");
    let data = fs.dir.join("replay");
    let run = Watched::spawn(new_run(
        &tiny_config(&dir),
        &run_dir,
        &["--save-replay", data.to_str().unwrap()],
    ));
    wait_update(&run, &run_dir, 2);
    let pid = run.child.id();
    signal(pid, Signal::SIGSTOP);
    fs.fill(0);
    signal(pid, Signal::SIGCONT);
    let (ok, _, lines) = run.finish(Duration::from_secs(120));
    let log = lines.join("\n");
    assert!(!ok, "{log}");
    assert!(
        log.contains("recording the received chunks (--save-replay)")
            && log.contains("No space left on device")
            && log.contains(data.to_str().unwrap()),
        "{log}"
    );
    let s = summary(&run_dir);
    assert!(
        s["failed"]
            .as_str()
            .is_some_and(|f| f.contains("--save-replay")),
        "{s}"
    );
    // The final checkpoint (on a disk with room) holds the last update.
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(run_dir.join("checkpoint/state.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(state["updates"], s["updates"], "{state}");
    let read = read_dataset(&data).unwrap_or_else(|e| panic!("{e}"));
    assert!(!read.chunks.is_empty());
    nothing_left(&lines);
    fs.free();

    // recur-actor --record.
    let data = fs.dir.join("actor");
    let mut cmd = Command::new(binary("recur-actor"));
    cmd.args(["--env", "CartPole-v1", "--envs", "4", "--steps", "16"])
        .args(["--frames", "1000000000", "--record", data.to_str().unwrap()]);
    let actor = Watched::spawn(cmd);
    let start = Instant::now();
    while std::fs::metadata(data.join("index.bin")).map_or(0, |m| m.len()) < 1024 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no chunks recorded"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = actor.child.id();
    signal(pid, Signal::SIGSTOP);
    fs.fill(0);
    signal(pid, Signal::SIGCONT);
    let (ok, _, lines) = actor.finish(Duration::from_secs(60));
    let log = lines.join("\n");
    assert!(
        !ok && log.contains("No space left on device") && log.contains(data.to_str().unwrap()),
        "{log}"
    );
    let read = read_dataset(&data).unwrap_or_else(|e| panic!("{e}"));
    assert!(!read.chunks.is_empty());
    drop(fs);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A local actor stopped with SIGSTOP (alive, silent): the learner notices the missing
/// heartbeats within its stall bound (`collector.stall_timeout_s`, 2 s here; the actor beats
/// every 250 ms while it waits), SIGKILLs it and restarts it under a new incarnation, and
/// training goes on (a sync run: no update happens without it). Detection time is bounded
/// by the stall timeout plus the loop's poll: asserted under 2 + 3 s.
#[test]
fn a_stopped_local_actor_is_killed_and_restarted_and_training_goes_on() {
    let dir = temp_dir("stalled-actor");
    let run_dir = dir.join("run");
    let run = Watched::spawn(new_run(
        &tiny_config(&dir),
        &run_dir,
        &["--set", "collector.stall_timeout_s=2"],
    ));
    wait_update(&run, &run_dir, 3);
    let started = run.wait_for("actor 0/0's start", Duration::from_secs(10), |l| {
        l.contains("actor 0/0 started (pid ")
    });
    let pid = actor_pids(&[started])[0];
    signal(pid, Signal::SIGSTOP);
    let stopped = Instant::now();
    run.wait_for("the stall", Duration::from_secs(60), |l| {
        l.contains("actor 0/0") && l.contains("stalled: no heartbeat for")
    });
    let detected = stopped.elapsed();
    assert!(
        detected < Duration::from_secs(5),
        "the stall was detected after {detected:?}"
    );
    run.wait_for("actor 0/1's start", Duration::from_secs(60), |l| {
        l.contains("actor 0/1 started (pid ")
    });
    // Updates go on with the new incarnation.
    let at = *metrics_updates(&run_dir).last().unwrap();
    wait_update(&run, &run_dir, at + 3);
    assert!(
        !process_alive(pid),
        "the stopped actor {pid} was not killed"
    );
    signal(run.child.id(), Signal::SIGTERM);
    let (ok, _, lines) = run.finish_interrupted(Duration::from_secs(60));
    assert!(ok, "{}", lines.join("\n"));
    let s = summary(&run_dir);
    let t = &s["transport"];
    assert_eq!(t["stalled"], 1, "{s}");
    assert_eq!(t["restarts"], 1, "{s}");
    for i in t["incarnations"].as_array().unwrap() {
        assert_eq!(i["seq_errors"], 0, "{i}");
        assert_eq!(i["duplicates"], 0, "{i}");
        assert!(i["chunks"].as_u64().unwrap() > 0, "{i}");
        assert_eq!(i["chunks"].as_u64(), i["last_seq"].as_u64().map(|l| l + 1));
    }
    nothing_left(&lines);
    eprintln!("stall detected after {detected:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

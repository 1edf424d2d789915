//! The transport across real processes: `recur-learner collect` spawning `recur-actor`s that
//! stream chunks through shared memory. Checks what crosses (counts, checksums, contiguous
//! sequence numbers per incarnation) and the failure model: a SIGKILLed actor, a SIGKILLed
//! learner, a schema mismatch.

use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use recur_tests::{binary, process_alive, segments_containing, temp_dir, Watched};
use serde_json::Value;

fn learner(run_dir: &std::path::Path, extra: &[&str]) -> Command {
    binary("recur-actor"); // the learner spawns it from next to itself
    let mut cmd = Command::new(binary("recur-learner"));
    cmd.arg("collect")
        .arg("--run-dir")
        .arg(run_dir)
        .args(["--env", "MaskedCartPole-v1"])
        .args(extra);
    cmd.env("RUST_LOG", "info");
    cmd
}

fn summary(stdout: &str) -> Value {
    let line = stdout
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no summary on stdout: {stdout:?}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("summary is not JSON ({e}): {line}"))
}

/// Every incarnation's chunks arrived exactly once and in order: received == last seq + 1.
fn assert_exactly_once(s: &Value) {
    assert_eq!(s["corrupted"], 0, "{s}");
    assert_eq!(s["rejected"], 0, "{s}");
    for inc in s["incarnations"].as_array().unwrap() {
        assert_eq!(inc["seq_errors"], 0, "{inc}");
        assert_eq!(inc["foreign"], 0, "{inc}");
        if inc["chunks"].as_u64().unwrap() > 0 {
            assert_eq!(
                inc["chunks"].as_u64().unwrap(),
                inc["last_seq"].as_u64().unwrap() + 1,
                "{inc}"
            );
        }
    }
    let total: u64 = s["incarnations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["chunks"].as_u64().unwrap())
        .sum();
    assert_eq!(total, s["chunks"].as_u64().unwrap());
}

/// The actors' own counts of chunks pushed, from their exit lines.
fn sent_per_actor(lines: &[String]) -> Vec<(String, u64)> {
    lines
        .iter()
        .filter_map(|l| {
            let rest = l.split("actor ").nth(1)?;
            let (id, rest) = rest.split_once(": pushed ")?;
            let n = rest.split_whitespace().next()?.parse().ok()?;
            Some((id.to_string(), n))
        })
        .collect()
}

#[test]
fn four_actors_deliver_every_chunk_exactly_once() {
    let dir = temp_dir("transport-4x1m");
    // 4 actors x 1M steps: 64 envs x 32 steps = 2048 frames per chunk, 1,953 chunks.
    let run = Watched::spawn(learner(
        &dir,
        &[
            "--actors",
            "4",
            "--envs",
            "64",
            "--steps",
            "32",
            "--frames",
            "4000000",
            "--publish-every",
            "50",
        ],
    ));
    let (ok, stdout, lines) = run.finish(Duration::from_secs(240));
    assert!(ok, "learner failed:\n{}", lines.join("\n"));
    let s = summary(&stdout);
    assert_exactly_once(&s);
    // What each actor says it pushed is what the learner received from it.
    let sent = sent_per_actor(&lines);
    assert_eq!(
        sent.len(),
        4,
        "every actor reported on exit: {sent:?}\n{}",
        lines.join("\n")
    );
    for (id, n) in sent {
        let (a, i) = id.split_once('/').unwrap();
        let inc = s["incarnations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| {
                x["actor_id"] == a.parse::<u64>().unwrap()
                    && x["incarnation"] == i.parse::<u64>().unwrap()
            })
            .unwrap();
        assert_eq!(inc["chunks"].as_u64().unwrap(), n, "actor {id}");
    }
    assert!(s["frames"].as_u64().unwrap() >= 4_000_000, "{s}");
    let incs = s["incarnations"].as_array().unwrap();
    assert_eq!(incs.len(), 4, "four actors, no restarts: {s}");
    assert_eq!(s["restarts"], 0);
    assert!(
        s["policy_version"].as_u64().unwrap() > 10,
        "weights were republished: {s}"
    );
    assert!(segments_containing(&dir.file_name().unwrap().to_string_lossy()).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_killed_actor_is_restarted_and_nothing_corrupt_is_accepted() {
    let dir = temp_dir("transport-kill-actor");
    let run = Watched::spawn(learner(
        &dir,
        &[
            "--actors", "2", "--envs", "32", "--steps", "32", "--frames", "3000000",
        ],
    ));
    let line = run.wait_for("actor 1/0 start", Duration::from_secs(60), |l| {
        l.contains("actor 1/0 started")
    });
    let pid: i32 = line
        .split("pid ")
        .nth(1)
        .unwrap()
        .trim_end_matches(')')
        .parse()
        .unwrap();
    run.wait_for("actor 1/0 registration", Duration::from_secs(60), |l| {
        l.contains("actor 1/0 (pid")
    });
    std::thread::sleep(Duration::from_millis(700));
    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    run.wait_for("actor 1/1 registration", Duration::from_secs(60), |l| {
        l.contains("actor 1/1 (pid")
    });
    let (ok, stdout, _) = run.finish(Duration::from_secs(240));
    assert!(ok);
    let s = summary(&stdout);
    assert_exactly_once(&s);
    assert!(s["restarts"].as_u64().unwrap() >= 1, "{s}");
    let incs = s["incarnations"].as_array().unwrap();
    let chunks = |a: u64, i: u64| {
        incs.iter()
            .find(|x| x["actor_id"] == a && x["incarnation"] == i)
            .map_or(0, |x| x["chunks"].as_u64().unwrap())
    };
    assert!(chunks(1, 0) > 0, "the killed incarnation had streamed: {s}");
    assert!(chunks(1, 1) > 0, "the restarted actor streams again: {s}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_killed_learner_leaves_no_orphans_and_the_next_run_reclaims_its_segments() {
    let dir = temp_dir("transport-kill-learner");
    let run = Watched::spawn(learner(
        &dir,
        &[
            "--actors",
            "2",
            "--envs",
            "16",
            "--steps",
            "16",
            "--frames",
            "100000000",
        ],
    ));
    let mut pids = Vec::new();
    for a in 0..2 {
        let line = run.wait_for("actor start", Duration::from_secs(60), |l| {
            l.contains(&format!("actor {a}/0 started"))
        });
        pids.push(
            line.split("pid ")
                .nth(1)
                .unwrap()
                .trim_end_matches(')')
                .parse::<u32>()
                .unwrap(),
        );
        run.wait_for("registration", Duration::from_secs(60), |l| {
            l.contains(&format!("actor {a}/0 (pid"))
        });
    }
    let ring = run.wait_for("ring name", Duration::from_secs(10), |l| {
        l.contains("; ring recur-")
    });
    let run_id = ring
        .split("ring recur-")
        .nth(1)
        .unwrap()
        .split("-ring-")
        .next()
        .unwrap()
        .to_string();
    assert!(
        !segments_containing(&run_id).is_empty(),
        "the run's segments exist while it runs"
    );
    kill(Pid::from_raw(run.child.id() as i32), Signal::SIGKILL).unwrap();
    let killed = Instant::now();
    for pid in &pids {
        while process_alive(*pid) {
            assert!(
                killed.elapsed() < Duration::from_secs(5),
                "actor {pid} still runs 5 s after the learner died"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    drop(run);
    assert!(
        !segments_containing(&run_id).is_empty(),
        "a SIGKILLed learner cannot clean up: its segments stay behind"
    );
    // The next run removes them.
    let next = temp_dir("transport-after-kill");
    let (ok, stdout, _) = Watched::spawn(learner(
        &next,
        &[
            "--actors", "1", "--envs", "4", "--steps", "8", "--frames", "320",
        ],
    ))
    .finish(Duration::from_secs(120));
    assert!(ok);
    let s = summary(&stdout);
    let reclaimed: Vec<&str> = s["reclaimed_segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        reclaimed.iter().any(|n| n.contains(&run_id)),
        "{reclaimed:?}"
    );
    assert!(
        segments_containing(&run_id).is_empty(),
        "stale segments left: {:?}",
        segments_containing(&run_id)
    );
    for d in [&dir, &next] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn an_actor_with_another_schema_is_refused_clearly() {
    let dir = temp_dir("transport-schema");
    let run = Watched::spawn(learner(
        &dir,
        &[
            "--actors",
            "1",
            "--envs",
            "8",
            "--steps",
            "16",
            "--frames",
            "100000000",
            "--hidden",
            "64",
        ],
    ));
    run.wait_for("registration", Duration::from_secs(60), |l| {
        l.contains("actor 0/0 (pid")
    });
    let mut intruder = Command::new(binary("recur-actor"));
    intruder
        .arg("--connect")
        .arg(dir.join("control.sock"))
        .args([
            "--env",
            "MaskedCartPole-v1",
            "--envs",
            "8",
            "--steps",
            "16",
            "--hidden",
            "32",
            "--actor-id",
            "9",
        ]);
    let out = recur_tests::run_with_deadline(intruder, Duration::from_secs(60));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refused actor 9/0") && err.contains("hidden_size = 32 (the run has 64)"),
        "{err}"
    );
    // SIGTERM ends the run cleanly, with a summary.
    kill(Pid::from_raw(run.child.id() as i32), Signal::SIGTERM).unwrap();
    let (ok, stdout, _) = run.finish_interrupted(Duration::from_secs(60));
    assert!(ok);
    let s = summary(&stdout);
    assert_eq!(s["refused_registrations"], 1, "{s}");
    assert_eq!(s["stopped_by_request"], true);
    assert_exactly_once(&s);
    let _ = std::fs::remove_dir_all(&dir);
}

//! Remote actors over authenticated TCP (issue 21), across real processes. Actors run in
//! network namespaces of their own (`ip netns` + a veth pair per actor, created and always
//! deleted by the test), so their traffic crosses a real link that a test can cut. Every phase
//! is reached by a log line or a counter, never by a sleep (the one timed wait is the 5 s a
//! link stays cut: the fault's duration).
//!
//! Network namespaces need root (CI runs as root). Where the kernel refuses them the netns
//! tests say so on stderr and pass without running, unless `RECUR_REQUIRE_NETNS` is set, which
//! makes them fail.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use recur_tests::remote_support::{
    actor, collect, exits_within, learner, listen_address, run_refusals, summary, Netns,
};
use recur_tests::{process_alive, temp_dir, Watched};
use serde_json::Value;

/// The summary's record of actor `actor_id`'s incarnation `incarnation`.
fn incarnation(s: &Value, actor_id: u64, incarnation: u64) -> Value {
    s["transport"]["incarnations"]
        .as_array()
        .or_else(|| s["incarnations"].as_array())
        .unwrap()
        .iter()
        .find(|i| i["actor_id"] == actor_id && i["incarnation"] == incarnation)
        .unwrap_or_else(|| panic!("no incarnation {actor_id}/{incarnation} in {s}"))
        .clone()
}

/// Every incarnation in `s` delivered its chunks complete: sequence numbers contiguous from 0
/// (`chunks == last_seq + 1`), no gap, no duplicate, nothing foreign.
fn assert_lossless(s: &Value) {
    let incs = s["transport"]["incarnations"]
        .as_array()
        .or_else(|| s["incarnations"].as_array())
        .unwrap();
    assert!(!incs.is_empty(), "{s}");
    for i in incs {
        assert_eq!(i["seq_errors"], 0, "{i}");
        assert_eq!(i["duplicates"], 0, "{i}");
        assert_eq!(i["foreign"], 0, "{i}");
        if i["chunks"].as_u64().unwrap() > 0 {
            assert_eq!(
                i["chunks"].as_u64().unwrap(),
                i["last_seq"].as_u64().unwrap() + 1,
                "lost chunks: {i}"
            );
        }
    }
}

/// The default config (MaskedCartPole-v1) trained by a learner with no actors of its own:
/// two remote actors, each in its own network namespace, reach the target (a greedy
/// evaluation of 475) within 60k frames; every chunk arrives once, in order, counted per actor.
#[test]
fn remote_actors_in_network_namespaces_train_masked_cartpole() {
    let (Some(ns_a), Some(ns_b)) = (Netns::create(), Netns::create()) else {
        return;
    };
    let dir = temp_dir("remote-train");
    let run_dir = dir.join("run");
    let run = Watched::spawn(learner(&[
        "train",
        "--config",
        "configs/masked_cartpole.toml",
        "--actors",
        "0",
        "--listen",
        "0.0.0.0:0",
        "--run-dir",
        &run_dir.to_string_lossy(),
        "--frames",
        "60000",
        "--quiet",
    ]));
    let token = run_dir.join("token");
    let addr_a = listen_address(&run, &ns_a.host_ip);
    let addr_b = listen_address(&run, &ns_b.host_ip);
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "RUN_DIR/token mode {mode:o}");
        // The secret, then (TLS: the default off loopback) the certificate's fingerprint.
        let text = std::fs::read_to_string(&token).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0].len(), 64, "{text}");
        assert!(lines[1].starts_with("tls-sha256 "), "{text}");
    }
    let a = Watched::spawn(ns_a.actor(&addr_a, &token, 0));
    let b = Watched::spawn(ns_b.actor(&addr_b, &token, 1));
    let (ok, stdout, lines) = run.finish(Duration::from_secs(600));
    assert!(ok, "training failed:\n{}", lines.join("\n"));
    let s: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let eval = std::fs::read_to_string(run_dir.join("eval.csv")).unwrap();
    assert!(
        s["eval_frames_to_target"].as_u64().is_some(),
        "no greedy evaluation reached 475 within 60k frames:\n{eval}\n{s}"
    );
    assert_eq!(s["transport"]["corrupted"], 0);
    assert_eq!(s["transport"]["rejected"], 0);
    assert_lossless(&s);
    for (actor_id, ns) in [(0, &ns_a), (1, &ns_b)] {
        let inc = incarnation(&s, actor_id, 0);
        assert!(inc["chunks"].as_u64().unwrap() > 0, "{inc}");
        assert!(inc["bytes"].as_u64().unwrap() > 0, "{inc}");
        // The chunks came from the actor's namespace, across its link.
        let prefix = ns.host_ip.rsplit_once('.').unwrap().0;
        assert!(
            inc["remote"].as_str().unwrap().starts_with(prefix),
            "{inc} (namespace {})",
            ns.name
        );
    }
    // The end of the run stops the remote actors (exit 0).
    for (w, what) in [(a, "actor 0"), (b, "actor 1")] {
        let (ok, lines) = exits_within(w, Duration::from_secs(30), what);
        assert!(ok, "{what}:\n{}", lines.join("\n"));
        assert!(
            lines.iter().any(|l| l.contains("the run ended")),
            "{}",
            lines.join("\n")
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A remote actor killed with SIGKILL and started again joins under a new incarnation; a link
/// cut for 5 s and restored resumes the same incarnation: per incarnation, every chunk the
/// learner holds is there once, in order (sequence numbers contiguous from 0), and the resumed
/// one continued past the cut. The run keeps collecting from the other actor throughout.
#[test]
fn a_killed_actor_rejoins_and_a_cut_link_resumes_without_loss_or_duplicates() {
    let (Some(ns_a), Some(ns_b)) = (Netns::create(), Netns::create()) else {
        return;
    };
    let dir = temp_dir("remote-faults");
    let run_dir = dir.join("run");
    let run = Watched::spawn(collect(
        "0",
        "0.0.0.0:0",
        &run_dir,
        &["--publish-every", "16"],
    ));
    let token = run_dir.join("token");
    let addr_a = listen_address(&run, &ns_a.host_ip);
    let addr_b = listen_address(&run, &ns_b.host_ip);
    let a0 = Watched::spawn(ns_a.actor(&addr_a, &token, 0));
    let b = Watched::spawn(ns_b.actor(&addr_b, &token, 1));
    let arrived = |who: &str| {
        let who = format!("remote actor {who}: chunk ");
        move |l: &str| l.contains(&who) && l.contains("received through")
    };
    let long = Duration::from_secs(120);
    run.wait_for("actor 0/0's first chunk", long, arrived("0/0"));
    run.wait_for("actor 1/0's first chunk", long, arrived("1/0"));

    // SIGKILL actor 0; the launcher's restart joins as incarnation 1.
    kill(Pid::from_raw(a0.child.id() as i32), Signal::SIGKILL).unwrap();
    let (ok, _) = exits_within(a0, Duration::from_secs(10), "the killed actor");
    assert!(!ok);
    run.wait_for("actor 0/0's disconnect", long, |l| {
        l.contains("remote actor 0/0") && l.contains("disconnected")
    });
    let a1 = Watched::spawn(ns_a.actor(&addr_a, &token, 0));
    run.wait_for("actor 0/1's first chunk", long, arrived("0/1"));

    // Cut actor 1's link for 5 s (the fault's duration), then restore it.
    ns_b.link(false);
    let cut_at = Instant::now();
    b.wait_for("actor 1 noticing the cut", long, |l| {
        l.contains("link to the learner lost")
    });
    std::thread::sleep(Duration::from_secs(5).saturating_sub(cut_at.elapsed()));
    ns_b.link(true);
    let resumed = b.wait_for("actor 1's reconnect", long, |l| {
        l.contains("reconnected; continuing at chunk")
    });
    let at: u64 = resumed
        .rsplit("chunk ")
        .next()
        .and_then(|n| n.trim().parse().ok())
        .expect("a chunk number");
    run.wait_for("chunks through the new connection", long, |l| {
        l.contains("remote actor 1/0: chunk ") && l.contains("received through") && {
            l.split("chunk ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| n >= at && n > 0)
        }
    });

    // End the run: both actors are told to stop.
    kill(Pid::from_raw(run.child.id() as i32), Signal::SIGTERM).unwrap();
    let (ok, _, lines) = run.finish_interrupted(Duration::from_secs(60));
    assert!(ok, "{}", lines.join("\n"));
    let s = summary(&run_dir);
    assert_eq!(s["corrupted"], 0, "{s}");
    assert_eq!(s["rejected"], 0, "{s}");
    assert_lossless(&s);
    let killed = incarnation(&s, 0, 0);
    let restarted = incarnation(&s, 0, 1);
    let cut = incarnation(&s, 1, 0);
    assert!(killed["chunks"].as_u64().unwrap() > 0, "{killed}");
    assert!(restarted["chunks"].as_u64().unwrap() > 0, "{restarted}");
    assert_eq!(cut["reconnects"], 1, "{cut}");
    assert!(
        cut["last_seq"].as_u64().unwrap() >= at,
        "{cut} (resumed at {at})"
    );
    for (w, what) in [(a1, "actor 0/1"), (b, "actor 1/0")] {
        let (ok, lines) = exits_within(w, Duration::from_secs(30), what);
        assert!(ok, "{what}:\n{}", lines.join("\n"));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Links that stall without closing, seen from the learner: one remote actor's veth link
/// goes down (packets vanish, no FIN, no RST), another actor is stopped (SIGSTOP). The learner
/// hears nothing on either connection and drops each within its silence bound (10 s after the
/// last frame; asserted under 10 + 5 s from the fault) while it keeps collecting from a third
/// actor. The link comes back and the stopped actor is continued: both reconnect, continue
/// their incarnations past the stall, and every chunk is there once, in order.
#[test]
fn stalled_remote_links_are_dropped_by_the_learner_and_rejoin_when_they_return() {
    let (Some(ns_a), Some(ns_b), Some(ns_c)) = (Netns::create(), Netns::create(), Netns::create())
    else {
        return;
    };
    let dir = temp_dir("remote-stalls");
    let run_dir = dir.join("run");
    let run = Watched::spawn(collect(
        "0",
        "0.0.0.0:0",
        &run_dir,
        &["--publish-every", "16"],
    ));
    let token = run_dir.join("token");
    let addr = |ns: &Netns| listen_address(&run, &ns.host_ip);
    let cut = Watched::spawn(ns_a.actor(&addr(&ns_a), &token, 0));
    let stopped = Watched::spawn(ns_b.actor(&addr(&ns_b), &token, 1));
    let _healthy = Watched::spawn(ns_c.actor(&addr(&ns_c), &token, 2));
    let long = Duration::from_secs(120);
    let chunk_of = |who: &'static str| {
        move |l: &str| l.contains(&format!("remote actor {who}: chunk ")) && l.contains("received")
    };
    for who in ["0/0", "1/0", "2/0"] {
        run.wait_for("a first chunk", long, chunk_of(who));
    }

    ns_a.link(false);
    kill(Pid::from_raw(stopped.child.id() as i32), Signal::SIGSTOP).unwrap();
    let fault = Instant::now();
    let dropped = |who: &'static str| {
        move |l: &str| l.contains(&format!("closed: actor {who} ")) && l.contains("silent for")
    };
    run.wait_for("actor 0's silent link dropped", long, dropped("0/0"));
    run.wait_for("actor 1's silent link dropped", long, dropped("1/0"));
    let detected = fault.elapsed();
    assert!(
        detected < Duration::from_secs(15),
        "the learner dropped the stalled links {detected:?} after the fault"
    );
    eprintln!("stalled links dropped {detected:?} after the fault");

    ns_a.link(true);
    kill(Pid::from_raw(stopped.child.id() as i32), Signal::SIGCONT).unwrap();
    let mut resumed_at = Vec::new();
    for w in [&cut, &stopped] {
        let line = w.wait_for("the reconnect", long, |l| {
            l.contains("reconnected; continuing at chunk")
        });
        resumed_at.push(
            line.rsplit("chunk ")
                .next()
                .and_then(|n| n.trim().parse::<u64>().ok())
                .expect("a chunk number"),
        );
    }
    for (who, at) in [("0/0", resumed_at[0]), ("1/0", resumed_at[1])] {
        run.wait_for("chunks through the new connection", long, |l| {
            l.contains(&format!("remote actor {who}: chunk "))
                && l.contains("received through")
                && l.split("chunk ")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|n| n.parse::<u64>().ok())
                    .is_some_and(|n| n >= at && n > 0)
        });
    }

    kill(Pid::from_raw(run.child.id() as i32), Signal::SIGTERM).unwrap();
    let (ok, _, lines) = run.finish_interrupted(Duration::from_secs(60));
    assert!(ok, "{}", lines.join("\n"));
    let s = summary(&run_dir);
    assert_eq!(s["corrupted"], 0, "{s}");
    assert_eq!(s["rejected"], 0, "{s}");
    assert_lossless(&s);
    for (actor_id, at) in [(0, resumed_at[0]), (1, resumed_at[1])] {
        let inc = incarnation(&s, actor_id, 0);
        assert_eq!(inc["reconnects"], 1, "{inc}");
        assert!(
            inc["last_seq"].as_u64().unwrap() >= at,
            "{inc} (resumed at {at})"
        );
    }
    assert!(incarnation(&s, 2, 0)["chunks"].as_u64().unwrap() > 0);
    for (w, what) in [(cut, "actor 0"), (stopped, "actor 1")] {
        let (ok, lines) = exits_within(w, Duration::from_secs(30), what);
        assert!(ok, "{what}:\n{}", lines.join("\n"));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Bad connections on loopback: a wrong token, a remote actor claiming a local actor's id,
/// random bytes and an oversized frame are refused and counted (`refused_registrations`), and
/// the learner keeps collecting from its local actor and a good remote one (both kinds in one
/// run).
#[test]
fn bad_connections_are_refused_and_counted_beside_local_and_remote_actors() {
    let dir = temp_dir("remote-refused");
    let run_dir = dir.join("run");
    let run = Watched::spawn(collect("1", "127.0.0.1:0", &run_dir, &[]));
    let addr = listen_address(&run, "127.0.0.1");
    let token = run_dir.join("token");

    // A wrong token: refused, named; the actor exits with an error.
    let wrong = dir.join("wrong-token");
    std::fs::write(&wrong, format!("{}\n", "ab".repeat(32))).unwrap();
    let out = recur_tests::run_with_deadline(actor(&addr, &wrong, 1), Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("wrong token"),
        "{err}"
    );
    // A local actor's id.
    let out = recur_tests::run_with_deadline(actor(&addr, &token, 0), Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("local actors"),
        "{err}"
    );
    // Random bytes, then a frame claiming 4 GiB: each connection is refused and closed.
    let port = addr.rsplit(':').next().unwrap();
    for bytes in [
        (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect::<Vec<u8>>(),
        [u32::MAX.to_le_bytes().as_slice(), &[1u8]].concat(),
    ] {
        let mut s = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let _ = s.write_all(&bytes);
        // The learner answers (a refusal) and closes: read to the end.
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    }
    run.wait_for("four refusals", Duration::from_secs(30), |_| {
        run_refusals(&run) >= 4
    });

    // A good remote actor joins beside the local one.
    let good = Watched::spawn(actor(&addr, &token, 1));
    let long = Duration::from_secs(120);
    run.wait_for("the remote actor's first chunk", long, |l| {
        l.contains("remote actor 1/0: chunk ") && l.contains("received through")
    });
    assert!(
        process_alive(run.child.id()),
        "the learner died of bad input"
    );
    kill(Pid::from_raw(run.child.id() as i32), Signal::SIGTERM).unwrap();
    let (ok, _, lines) = run.finish_interrupted(Duration::from_secs(60));
    assert!(ok, "{}", lines.join("\n"));
    let s = summary(&run_dir);
    assert_eq!(s["refused_registrations"], 4, "{s}");
    assert_eq!(s["corrupted"], 0, "{s}");
    assert_eq!(s["rejected"], 0, "{s}");
    assert_lossless(&s);
    let local = incarnation(&s, 0, 0);
    let remote = incarnation(&s, 1, 0);
    assert!(
        local["remote"].is_null() && local["chunks"].as_u64().unwrap() > 0,
        "{local}"
    );
    assert!(
        remote["remote"].is_string() && remote["chunks"].as_u64().unwrap() > 0,
        "{remote}"
    );
    let refused: Vec<&String> = lines.iter().filter(|l| l.contains("refused")).collect();
    assert!(
        refused.iter().any(|l| l.contains("wrong token"))
            && refused.iter().any(|l| l.contains("local actors"))
            && refused.iter().any(|l| l.contains("at most 4096")),
        "{refused:?}"
    );
    let (ok, lines) = exits_within(good, Duration::from_secs(30), "the remote actor");
    assert!(
        ok && lines.iter().any(|l| l.contains("the run ended")),
        "{}",
        lines.join("\n")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A learner killed with SIGKILL: its remote actor notices (the connection closes) and exits
/// within seconds.
#[test]
fn remote_actors_exit_when_the_learner_dies() {
    let dir = temp_dir("remote-learner-dies");
    let run_dir = dir.join("run");
    let run = Watched::spawn(collect("0", "127.0.0.1:0", &run_dir, &[]));
    let addr = listen_address(&run, "127.0.0.1");
    let remote = Watched::spawn(actor(&addr, &run_dir.join("token"), 0));
    run.wait_for(
        "the remote actor's first chunk",
        Duration::from_secs(120),
        |l| l.contains("remote actor 0/0: chunk ") && l.contains("received through"),
    );
    kill(Pid::from_raw(run.child.id() as i32), Signal::SIGKILL).unwrap();
    let killed = Instant::now();
    let (_, lines) = exits_within(remote, Duration::from_secs(20), "the remote actor");
    assert!(
        lines.iter().any(|l| l.contains("the learner is gone")),
        "{}",
        lines.join("\n")
    );
    assert!(
        killed.elapsed() < Duration::from_secs(10),
        "{:?}",
        killed.elapsed()
    );
    drop(run);
    std::fs::remove_dir_all(&dir).unwrap();
}

//! TLS 1.3 on the remote-actor port (issue 34), across real processes: what a passive observer
//! of the link sees (a `tcpdump` capture on the learner's end of a veth pair), a recorded
//! handshake replayed, an actor pinning the wrong certificate, and the cap on connections
//! waiting for their token. Every phase is reached by a log line, a file or a process exit,
//! never by a sleep.
//!
//! The capture test needs root (network namespaces) and `tcpdump`; without them it says so on
//! stderr and passes without running, unless `RECUR_REQUIRE_NETNS` is set (CI: root, and
//! `.ci/run` installs tcpdump), which makes it fail.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use recur_tests::remote_support::{
    actor, collect, exits_within, listen_address, run_refusals, summary, Netns,
};
use recur_tests::{temp_dir, Watched};

const LONG: Duration = Duration::from_secs(120);

/// A `tcpdump` writing every TCP packet of one interface to a file as it arrives.
struct Capture {
    tcpdump: Watched,
    file: PathBuf,
}

impl Capture {
    /// Starts capturing on `iface` into `file` (returns once tcpdump listens); `None` after
    /// the skip message when tcpdump is missing and not required.
    fn start(iface: &str, file: &Path) -> Option<Capture> {
        if Command::new("tcpdump").arg("--version").output().is_err() {
            assert!(
                std::env::var_os("RECUR_REQUIRE_NETNS").is_none(),
                "RECUR_REQUIRE_NETNS is set but tcpdump is missing (apt-get install tcpdump)"
            );
            recur_tests::report_skip("tcpdump is not installed; the capture test needs it");
            return None;
        }
        let mut cmd = Command::new("tcpdump");
        // A 64 MiB kernel buffer (-B, KiB): on a loaded machine the default 2 MiB overflows
        // while the actor streams chunks at full speed.
        cmd.args([
            "-i",
            iface,
            "-n",
            "-s",
            "0",
            "-B",
            "65536",
            "-U",
            "--immediate-mode",
            "-w",
        ])
        .arg(file)
        .arg("tcp");
        let tcpdump = Watched::spawn(cmd);
        tcpdump.wait_for("tcpdump listening", Duration::from_secs(30), |l| {
            l.contains("listening on")
        });
        Some(Capture {
            tcpdump,
            file: file.to_path_buf(),
        })
    }

    /// The TCP segments captured so far (the file is written packet by packet).
    fn segments(&self) -> Vec<Segment> {
        segments(&std::fs::read(&self.file).unwrap())
    }

    /// Stops tcpdump (SIGINT: it writes what it holds and exits) and returns every segment.
    fn stop(self) -> Vec<Segment> {
        kill(
            Pid::from_raw(self.tcpdump.child.id() as i32),
            Signal::SIGINT,
        )
        .unwrap();
        let (_, _, lines) = self.tcpdump.finish(Duration::from_secs(30));
        assert!(
            lines.iter().any(|l| l.contains("packets captured")),
            "{lines:?}"
        );
        segments(&std::fs::read(&self.file).unwrap())
    }
}

/// One captured TCP segment (IPv4).
struct Segment {
    src: ([u8; 4], u16),
    dst: ([u8; 4], u16),
    seq: u32,
    syn: bool,
    payload: Vec<u8>,
}

/// The TCP/IPv4 segments of a pcap file (little-endian, Ethernet) in capture order; a record
/// cut short at the end (tcpdump still writing) is left out.
fn segments(pcap: &[u8]) -> Vec<Segment> {
    let u32le = |b: &[u8]| u32::from_le_bytes(b[..4].try_into().unwrap());
    let u16be = |b: &[u8]| u16::from_be_bytes(b[..2].try_into().unwrap());
    assert!(pcap.len() >= 24, "a pcap file of {} bytes", pcap.len());
    assert!(
        matches!(u32le(pcap), 0xa1b2_c3d4 | 0xa1b2_3c4d),
        "pcap magic {:x}",
        u32le(pcap)
    );
    assert_eq!(u32le(&pcap[20..]), 1, "link type (1: Ethernet)");
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= pcap.len() {
        let len = u32le(&pcap[at + 8..]) as usize;
        let Some(frame) = pcap.get(at + 16..at + 16 + len) else {
            break;
        };
        at += 16 + len;
        // Ethernet, IPv4, TCP.
        if frame.len() < 34 || frame[12..14] != [0x08, 0x00] || frame[23] != 6 {
            continue;
        }
        let ip = &frame[14..];
        let ip = &ip[..(u16be(&ip[2..]) as usize).min(ip.len())];
        let tcp = &ip[(ip[0] & 0x0f) as usize * 4..];
        let payload = &tcp[(tcp[12] >> 4) as usize * 4..];
        out.push(Segment {
            src: (ip[12..16].try_into().unwrap(), u16be(tcp)),
            dst: (ip[16..20].try_into().unwrap(), u16be(&tcp[2..])),
            seq: u32::from_be_bytes(tcp[4..8].try_into().unwrap()),
            syn: tcp[13] & 0x02 != 0,
            payload: payload.to_vec(),
        });
    }
    out
}

/// The byte streams of every connection in `segs`, one per direction, each reassembled from
/// its SYN on (retransmissions overlap and are merged; bytes the capture dropped are zeros):
/// (source, destination, bytes), in the order the connections opened.
type Flow = (([u8; 4], u16), ([u8; 4], u16), Vec<u8>);

fn streams(segs: &[Segment]) -> Vec<Flow> {
    let mut flows: Vec<(Flow, u32, BTreeMap<u32, Vec<u8>>)> = Vec::new();
    for s in segs {
        let i = match flows
            .iter()
            .position(|((a, b, _), _, _)| (*a, *b) == (s.src, s.dst))
        {
            Some(i) => i,
            None if s.syn => {
                flows.push((
                    (s.src, s.dst, Vec::new()),
                    s.seq.wrapping_add(1),
                    BTreeMap::new(),
                ));
                continue;
            }
            None => continue,
        };
        if !s.payload.is_empty() {
            let rel = s.seq.wrapping_sub(flows[i].1);
            flows[i].2.insert(rel, s.payload.clone());
        }
    }
    flows
        .into_iter()
        .map(|((a, b, mut bytes), _, parts)| {
            for (rel, p) in parts {
                let (rel, have) = (rel as usize, bytes.len());
                if rel > have {
                    // Packets the kernel dropped before tcpdump read them (a loaded machine):
                    // zeros stand for them, so offsets stay true; zeros neither hold a token nor
                    // a chunk's magic, and nothing replayed comes from past the handshake.
                    eprintln!("capture: {} bytes missing at byte {have}", rel - have);
                    bytes.resize(rel, 0);
                }
                if rel + p.len() > bytes.len() {
                    let have = bytes.len();
                    bytes.extend_from_slice(&p[have - rel..]);
                }
            }
            (a, b, bytes)
        })
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The bytes a token file's secret is sent as (raw, in the hello; first) and stored as (hex).
fn token_forms(token_file: &Path) -> Vec<Vec<u8>> {
    let text = std::fs::read_to_string(token_file).unwrap();
    let hex = text.lines().next().unwrap().trim().to_string();
    let raw: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    vec![raw, hex.into_bytes()]
}

/// A chunk's encoding starts with this magic (common::chunk::CHUNK_MAGIC): every chunk sent in
/// clear shows it.
const CHUNK_MAGIC: &[u8] = b"RECURCK1";

fn learner_ip(ns: &Netns) -> [u8; 4] {
    let v: Vec<u8> = ns.host_ip.split('.').map(|o| o.parse().unwrap()).collect();
    v.try_into().unwrap()
}

/// A passive capture on the veth of a remote run: in plaintext (`--insecure-plaintext`, the
/// control) it shows the token and the chunks; with TLS (the default on a non-loopback
/// address) it holds neither, though every chunk crossed it. The recorded client side of
/// that TLS connection, replayed to the learner, is refused; an actor whose token file pins
/// another certificate refuses the learner (and sends no token). Both refusals are counted.
#[test]
fn a_capture_of_a_tls_run_shows_no_token_or_chunk_and_replays_and_wrong_pins_are_refused() {
    let Some(ns) = Netns::create() else {
        return;
    };
    let dir = temp_dir("tls-capture");
    let first_chunk = |l: &str| l.contains("remote actor 0/0: chunk ") && l.contains("received");
    let stop = |run: Watched| {
        kill(Pid::from_raw(run.child.id() as i32), Signal::SIGTERM).unwrap();
        let (ok, _, lines) = run.finish_interrupted(Duration::from_secs(60));
        assert!(ok, "{}", lines.join("\n"));
    };

    // The control: plaintext shows the token and the chunks to the capture.
    let plain_dir = dir.join("plain");
    let run = Watched::spawn(collect(
        "0",
        "0.0.0.0:0",
        &plain_dir,
        &["--insecure-plaintext"],
    ));
    let addr = listen_address(&run, &ns.host_ip);
    run.wait_for("the plaintext warning", LONG, |l| {
        l.contains("IN PLAINTEXT") && l.contains("in clear")
    });
    let token = plain_dir.join("token");
    assert_eq!(std::fs::read_to_string(&token).unwrap().lines().count(), 1);
    // An actor does not send a token in clear across a link unless told to.
    let out = recur_tests::run_with_deadline(ns.actor(&addr, &token, 0), LONG);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("not a loopback address")
            && err.contains("--insecure-plaintext"),
        "{err}"
    );
    let Some(capture) = Capture::start(&ns.host_if, &dir.join("plain.pcap")) else {
        return;
    };
    let mut cmd = ns.actor(&addr, &token, 0);
    cmd.arg("--insecure-plaintext");
    let a = Watched::spawn(cmd);
    run.wait_for("the plaintext actor's first chunk", LONG, first_chunk);
    stop(run);
    exits_within(a, Duration::from_secs(30), "the plaintext actor");
    let seen: Vec<u8> = streams(&capture.stop())
        .into_iter()
        .flat_map(|(_, _, b)| b)
        .collect();
    let sent = &token_forms(&token)[0];
    assert!(
        contains(&seen, sent),
        "the control capture misses the token"
    );
    assert!(
        contains(&seen, CHUNK_MAGIC),
        "the control capture misses the chunks"
    );

    // TLS, the default on this address.
    let tls_dir = dir.join("tls");
    let run = Watched::spawn(collect("0", "0.0.0.0:0", &tls_dir, &[]));
    let addr = listen_address(&run, &ns.host_ip);
    let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
    run.wait_for("the TLS listening line", LONG, |l| l.contains("TLS 1.3"));
    let token = tls_dir.join("token");
    let Some(capture) = Capture::start(&ns.host_if, &dir.join("tls.pcap")) else {
        return;
    };
    let good = Watched::spawn(ns.actor(&addr, &token, 0));
    run.wait_for("the TLS actor's first chunk", LONG, first_chunk);
    good.wait_for("the pinned registration", LONG, |l| {
        l.contains("TLS 1.3, pinned")
    });

    // Replay what the actor sent on its connection (handshake, token, chunks) to the learner.
    let (_, _, recorded) = streams(&capture.segments())
        .into_iter()
        .find(|(_, (ip, p), _)| *ip == learner_ip(&ns) && *p == port)
        .expect("the actor's connection in the capture");
    assert!(recorded.len() > 1000, "{} bytes recorded", recorded.len());
    let mut replay = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let replay_from = replay.local_addr().unwrap().to_string();
    replay.set_read_timeout(Some(LONG)).unwrap();
    let _ = replay.write_all(&recorded);
    let _ = replay.read_to_end(&mut Vec::new());
    run.wait_for("the replay's refusal", LONG, |l| {
        l.contains(&format!(
            "remote connection from {replay_from} refused: TLS handshake"
        ))
    });

    // An actor pinning another certificate stops at the handshake.
    let wrong = dir.join("wrong-pin");
    let text = std::fs::read_to_string(&token).unwrap();
    let flipped = if text.trim_end().ends_with('0') {
        "1"
    } else {
        "0"
    };
    std::fs::write(
        &wrong,
        format!(
            "{}{flipped}\n",
            &text.trim_end()[..text.trim_end().len() - 1]
        ),
    )
    .unwrap();
    let out = recur_tests::run_with_deadline(ns.actor(&addr, &wrong, 1), LONG);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("not the pinned learner")
            && err.contains("the token file pins"),
        "{err}"
    );
    run.wait_for("two refusals", LONG, |_| run_refusals(&run) >= 2);

    stop(run);
    let (ok, lines) = exits_within(good, Duration::from_secs(30), "the TLS actor");
    assert!(ok, "{}", lines.join("\n"));
    let s = summary(&tls_dir);
    assert_eq!(s["refused_registrations"], 2, "{s}");
    let inc = &s["incarnations"][0];
    let flows = streams(&capture.stop());
    // Every chunk crossed the captured link...
    let to_learner: usize = flows
        .iter()
        .filter(|(_, (ip, p), _)| *ip == learner_ip(&ns) && *p == port)
        .map(|(_, _, b)| b.len())
        .sum();
    assert!(
        to_learner as u64 > inc["bytes"].as_u64().unwrap(),
        "{to_learner} bytes captured, {inc}"
    );
    // ... and neither the token nor any chunk is in it.
    for (from, to, bytes) in &flows {
        for form in token_forms(&token) {
            assert!(
                !contains(bytes, &form),
                "the token in clear {from:?} -> {to:?}"
            );
        }
        assert!(
            !contains(bytes, CHUNK_MAGIC),
            "a chunk in clear {from:?} -> {to:?}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--tls` on loopback: an actor with the token file joins through TLS; one with a token file
/// of the secret alone and `--tls` is told why it cannot. 64 connections that never finish
/// the handshake hold every pending place: the 65th is closed at once and counted, and once
/// they go, an actor joins again.
#[test]
fn the_65th_pending_connection_is_refused_and_counted() {
    let dir = temp_dir("tls-pending");
    let run_dir = dir.join("run");
    let run = Watched::spawn(collect("0", "127.0.0.1:0", &run_dir, &["--tls"]));
    let addr = listen_address(&run, "127.0.0.1");
    run.wait_for("the TLS listening line", LONG, |l| l.contains("TLS 1.3"));
    let token = run_dir.join("token");
    {
        use std::os::unix::fs::PermissionsExt;
        for name in ["token", "tls-cert.der", "tls-key.der"] {
            let mode = std::fs::metadata(run_dir.join(name))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "RUN_DIR/{name} mode {mode:o}");
        }
    }
    // A token file of the secret alone (as written before TLS): --tls refuses it, by name.
    let old = dir.join("old-token");
    let text = std::fs::read_to_string(&token).unwrap();
    std::fs::write(&old, format!("{}\n", text.lines().next().unwrap())).unwrap();
    let mut cmd = actor(&addr, &old, 0);
    cmd.arg("--tls");
    let out = recur_tests::run_with_deadline(cmd, LONG);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no TLS certificate fingerprint"),
        "{err}"
    );

    let port = addr.rsplit(':').next().unwrap();
    let waiting: Vec<TcpStream> = (0..64)
        .map(|_| TcpStream::connect(format!("127.0.0.1:{port}")).unwrap())
        .collect();
    let mut extra = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    extra.set_read_timeout(Some(LONG)).unwrap();
    run.wait_for("the 65th refused", LONG, |l| {
        l.contains("64 connections are already waiting to authenticate")
    });
    // Closed at once, long before the 5 s a pending connection has.
    assert!(matches!(extra.read(&mut [0u8; 16]), Ok(0) | Err(_)));
    drop(waiting);
    run.wait_for("65 refusals", LONG, |_| run_refusals(&run) >= 65);

    let good = Watched::spawn(actor(&addr, &token, 0));
    run.wait_for("the actor's first chunk", LONG, |l| {
        l.contains("remote actor 0/0: chunk ") && l.contains("received")
    });
    kill(Pid::from_raw(run.child.id() as i32), Signal::SIGTERM).unwrap();
    let (ok, _, lines) = run.finish_interrupted(Duration::from_secs(60));
    assert!(ok, "{}", lines.join("\n"));
    assert_eq!(summary(&run_dir)["refused_registrations"], 65);
    let (ok, lines) = exits_within(good, Duration::from_secs(30), "the actor");
    assert!(
        ok && lines.iter().any(|l| l.contains("TLS 1.3, pinned")),
        "{}",
        lines.join("\n")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Images over TLS, bit for bit: a learner training PixelCartPole from one remote actor on a
/// TLS link (loopback, `--tls`), recording every chunk it receives (`--save-replay`). Each
/// environment of the recording is then replayed in a fresh PixelCartPole: reset with the
/// actor's episode seeds, stepped with the recorded actions, its frames (`pixels`,
/// `next.pixels`), rewards and ends equal the received ones at every step.
#[test]
fn image_chunks_cross_a_tls_link_bit_exactly() {
    use common::dataset::read_dataset;
    use common::envs::{episode_seed, make, ActionRef};
    let dir = temp_dir("tls-images");
    let (run_dir, data) = (dir.join("run"), dir.join("data"));
    let config = dir.join("pixel.toml");
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/pixel_cartpole.toml"
    ))
    .unwrap()
    .replace("frames = 1_000_000", "frames = 2_048")
    .replace("frames_per_update = 2048", "frames_per_update = 512")
    .replace("envs_per_actor = 8", "envs_per_actor = 4")
    .replace("seed = 0", "seed = 21");
    std::fs::write(&config, text).unwrap();
    let mut cmd = recur_tests::remote_support::learner(&["train", "--config"]);
    cmd.arg(&config)
        .args([
            "--actors",
            "0",
            "--listen",
            "127.0.0.1:0",
            "--tls",
            "--quiet",
        ])
        .arg("--run-dir")
        .arg(&run_dir)
        .arg("--save-replay")
        .arg(&data);
    let run = Watched::spawn(cmd);
    let addr = listen_address(&run, "127.0.0.1");
    let remote = Watched::spawn(actor(&addr, &run_dir.join("token"), 0));
    let (ok, _, lines) = run.finish(LONG);
    assert!(ok, "{}", lines.join("\n"));
    assert!(
        lines.iter().any(|l| l.contains("TLS")),
        "the link is TLS:\n{}",
        lines.join("\n")
    );
    let _ = exits_within(remote, LONG, "the remote actor");
    let dataset = read_dataset(&data).unwrap();
    let s = &dataset.meta.schema;
    assert_eq!(s.pixels(), 64 * 64, "{s:?}");
    assert!(
        dataset.chunks.len() >= 2048 / (4 * 32),
        "{}",
        dataset.chunks.len()
    );
    let (envs, steps, px) = (s.envs, s.steps, s.pixels());
    // The actor's vector seed: the run's seed with its id and incarnation (0, 0) mixed in.
    let vector_seed = 21u64;
    let (mut compared, mut episodes) = (0usize, 0usize);
    for j in 0..envs {
        let mut env = make("PixelCartPole-v1").unwrap();
        let mut episode = 0u64;
        env.reset(episode_seed(vector_seed, j as u64, episode), &mut []);
        let mut frame = vec![0u8; px];
        for (k, chunk) in dataset.chunks.iter().enumerate() {
            assert_eq!((chunk.meta.actor_id, chunk.meta.seq), (0, k as u64));
            for t in 0..steps {
                let p = j * steps + t;
                env.pixels(&mut frame);
                assert!(
                    chunk.pixels[p * px..(p + 1) * px] == frame[..],
                    "env {j}, chunk {k}, step {t}: pixels differ from the environment's"
                );
                let a = match &chunk.action {
                    common::chunk::ActionColumn::Discrete(a) => a[p],
                    other => panic!("{other:?}"),
                };
                let r = env.step(ActionRef::Discrete(a), &mut []);
                env.pixels(&mut frame);
                assert!(
                    chunk.next_pixels[p * px..(p + 1) * px] == frame[..],
                    "env {j}, chunk {k}, step {t}: next.pixels differ"
                );
                assert_eq!(
                    (chunk.next_reward[p] as f64, chunk.next_terminated[p] == 1),
                    (r.reward, r.terminated),
                    "env {j}, chunk {k}, step {t}"
                );
                compared += 1;
                if r.terminated || r.truncated {
                    episode += 1;
                    episodes += 1;
                    env.reset(episode_seed(vector_seed, j as u64, episode), &mut []);
                }
            }
        }
    }
    assert!(
        compared >= 2048 && episodes >= envs,
        "{compared} steps, {episodes} episodes"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

//! The loopback-TCP rows of `recur-bench transport`: the remote-actor path
//! ([`learner::actors::transport::tcp`]) measured beside the shared-memory rings in the same run,
//! plaintext (`tcp_bandwidth`, `tcp_weights`: documented in docs/recur-bench.md), then through
//! TLS 1.3 (`tls_bandwidth`, `tls_weights`: the learner's `--tls`, rustls with ring, the
//! producers pinning a fresh self-signed certificate; the cost of the encryption).

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use common::chunk::Chunk;
use common::envs::Space;
use common::remote::{
    data_head, new_token, parse_token, read_frame, token_hex, write_message, ActorMsg, LearnerMsg,
    Limits, WireError, KIND_CHUNK, KIND_WEIGHTS, TOKEN_BYTES,
};
use common::tls::Fingerprint;
use learner::actors::transport::tcp::{RemoteLink, RemoteOptions, RemoteServer};
use serde::Serialize;

use super::chunks::{bench_chunk, bench_schema, set_seq};
use super::latency::{Subscriber, WeightsRow};
use super::{summarize, BandwidthRow, Producers, ROW_DEADLINE};

/// A loopback-TCP bandwidth line.
#[derive(Clone, Debug, Serialize)]
pub struct TcpBandwidthRow {
    pub bench: &'static str,
    pub kind: &'static str,
    pub chunk_bytes: usize,
    pub producers: usize,
    pub gb_per_s: f64,
    pub shm_gb_per_s: f64,
    pub ratio_to_shm: f64,
    pub chunks: usize,
    pub median_ms: f64,
    pub encoded_bytes: usize,
    pub window: usize,
    pub iters: usize,
    /// `tls_bandwidth` only: the plaintext row's bandwidth, measured just before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_gb_per_s: Option<f64>,
    /// `tls_bandwidth` only: `gb_per_s / tcp_gb_per_s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_tcp: Option<f64>,
}

/// A listener on 127.0.0.1 with a fresh token, and with `tls` a fresh self-signed certificate
/// (its fingerprint returned for the producers to pin).
fn server(
    chunk_bytes: usize,
    weight_bytes: usize,
    window: usize,
    tls: bool,
) -> anyhow::Result<(RemoteServer, [u8; TOKEN_BYTES], Option<Fingerprint>)> {
    let token = new_token().map_err(|e| anyhow::anyhow!("drawing a token: {e}"))?;
    let (config, fingerprint) = if tls {
        let made = rcgen::generate_simple_self_signed(vec![common::tls::SERVER_NAME.into()])
            .context("making a TLS certificate")?;
        let cert = made.cert.der().to_vec();
        let fingerprint = Fingerprint::of(&cert);
        let config = common::tls::server_config(cert, made.signing_key.serialize_der())?;
        (Some(config), Some(fingerprint))
    } else {
        (None, None)
    };
    let server = RemoteServer::start(RemoteOptions {
        listen: "127.0.0.1:0".into(),
        token,
        args: Default::default(),
        chunk_bytes,
        weight_bytes,
        window,
        local_actors: 0,
        group: learner::ranks::Rank::SINGLE,
        tls: config,
    })?;
    Ok((server, token, fingerprint))
}

/// Accepts `n` registrations (every one), returning their links.
fn accept(server: &RemoteServer, n: usize) -> anyhow::Result<Vec<RemoteLink>> {
    let mut links = Vec::with_capacity(n);
    while links.len() < n {
        let reg = server
            .registrations
            .recv_timeout(Duration::from_secs(30))
            .context("a benchmark producer did not register within 30 s")?;
        let _ = reg.reply.send(Ok(0));
        links.push(reg.link);
    }
    Ok(links)
}

/// The loopback-TCP bandwidth row beside the ring row `shm`: its chunk size, producers, window
/// and slots (the chunks queued per connection), each producer sending `chunks / producers *
/// (iters + 1)` chunks; through TLS 1.3 (the `tls_bandwidth` row) when `tcp`, the plaintext
/// row of the same size to compare with, is given.
pub fn tcp_bandwidth(
    shm: &BandwidthRow,
    iters: usize,
    tcp: Option<&TcpBandwidthRow>,
) -> anyhow::Result<TcpBandwidthRow> {
    let tls = tcp.is_some();
    let (chunk_bytes, producers) = (shm.chunk_bytes, shm.producers);
    let len = bench_chunk(chunk_bytes)?.len();
    let windows = iters + 1;
    let per_producer = shm.chunks / producers;
    let (server, token, fingerprint) = server(len, 64, shm.slots, tls)?;
    let exe = std::env::current_exe().context("locating recur-bench to spawn producers")?;
    let mut children = Producers(Vec::new());
    for k in 0..producers {
        let mut cmd = Command::new(&exe);
        cmd.arg("transport-producer");
        if let Some(f) = fingerprint {
            cmd.args(["--tls-fingerprint", &f.to_string()]);
        }
        children.0.push(
            cmd.args(["--tcp", &server.local_addr().to_string()])
                .args(["--token", token_hex(&token).trim()])
                .args(["--actor-id", &k.to_string()])
                .args(["--chunk-bytes", &chunk_bytes.to_string()])
                .args(["--count", &(per_producer * windows).to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .with_context(|| format!("spawning {} transport-producer --tcp", exe.display()))?,
        );
    }
    let mut links = accept(&server, producers)?;
    let total = per_producer * producers * windows;
    let window = per_producer * producers;
    let mut received = 0usize;
    let mut boundaries = Vec::with_capacity(windows + 1);
    let start = Instant::now();
    while received < total {
        let mut got = false;
        for link in links.iter_mut() {
            while let Ok(bytes) = link.chunks.try_recv() {
                ensure!(bytes.len() == len, "a chunk of {} bytes", bytes.len());
                // The learner's receive path without the schema decode, as the ring rows.
                Chunk::verify_checksum(&bytes)?;
                if received == 0 {
                    boundaries.push(Instant::now());
                }
                received += 1;
                got = true;
                if received.is_multiple_of(window) {
                    boundaries.push(Instant::now());
                }
            }
        }
        if !got {
            ensure!(
                start.elapsed() < ROW_DEADLINE,
                "tcp bench: only {received} of {total} chunks arrived within {ROW_DEADLINE:?}"
            );
            std::thread::yield_now();
        }
    }
    drop(children);
    let times: Vec<Duration> = boundaries.windows(2).skip(1).map(|w| w[1] - w[0]).collect();
    let (median_ms, _, _) = summarize(&times);
    let gb_per_s = (window * len) as f64 / (median_ms / 1e3) / 1e9;
    Ok(TcpBandwidthRow {
        bench: "transport",
        kind: if tls {
            "tls_bandwidth"
        } else {
            "tcp_bandwidth"
        },
        chunk_bytes,
        producers,
        gb_per_s,
        shm_gb_per_s: shm.gb_per_s,
        ratio_to_shm: gb_per_s / shm.gb_per_s,
        chunks: window,
        median_ms,
        encoded_bytes: len,
        window: shm.slots,
        iters,
        tcp_gb_per_s: tcp.map(|t| t.gb_per_s),
        ratio_to_tcp: tcp.map(|t| gb_per_s / t.gb_per_s),
    })
}

/// A benchmark actor's connection: a bare socket, or a TLS session that pins the learner's
/// certificate (as `recur-actor` does).
trait Conn: Read + Write {
    fn socket(&self) -> &TcpStream;

    /// Ends the sending direction (after a TLS `close_notify`); reading goes on.
    fn close_write(&mut self) -> std::io::Result<()> {
        self.socket().shutdown(std::net::Shutdown::Write)
    }
}

impl Conn for TcpStream {
    fn socket(&self) -> &TcpStream {
        self
    }
}

impl Conn for rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    fn socket(&self) -> &TcpStream {
        self.get_ref()
    }

    fn close_write(&mut self) -> std::io::Result<()> {
        self.conn.send_close_notify();
        self.flush()?;
        self.sock.shutdown(std::net::Shutdown::Write)
    }
}

/// Joins the learner at `addr` as actor `actor_id` with `token` (through TLS pinning
/// `fingerprint`, if given); returns the connection and the weight frame limit.
fn join(
    addr: &str,
    token: [u8; TOKEN_BYTES],
    fingerprint: Option<Fingerprint>,
    actor_id: u32,
    chunk_bytes: usize,
) -> anyhow::Result<(Box<dyn Conn>, usize)> {
    let socket = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    socket.set_nodelay(true)?;
    let mut stream: Box<dyn Conn> = match fingerprint {
        None => Box::new(socket),
        Some(f) => {
            let conn = rustls::ClientConnection::new(
                common::tls::client_config(f),
                common::tls::server_name(),
            )?;
            Box::new(rustls::StreamOwned::new(conn, socket))
        }
    };
    let hello = ActorMsg::Hello {
        token,
        actor_id,
        resume: None,
        pid: std::process::id(),
        host: "bench".into(),
    };
    write_message(&mut stream, &hello)?;
    let limits = Limits::messages(0);
    let weight_bytes = match read_frame(&mut stream, &limits)?.message::<LearnerMsg>()? {
        LearnerMsg::Welcome { weight_bytes, .. } => weight_bytes as usize,
        other => bail!("expected a welcome, got {other:?}"),
    };
    let register = ActorMsg::Register {
        env: "bench".into(),
        observation_space: Space::Discrete { n: 2 },
        action_space: Space::Discrete { n: 2 },
        schema: bench_schema(chunk_bytes)?,
    };
    write_message(&mut stream, &register)?;
    match read_frame(&mut stream, &limits)?.message::<LearnerMsg>()? {
        LearnerMsg::Registered { .. } => Ok((stream, weight_bytes)),
        other => bail!("expected registered, got {other:?}"),
    }
}

/// The `transport-producer --tcp` side: joins (through TLS pinning `fingerprint`, 64 hex
/// digits, if given), then sends `count` chunks (sequence numbers 0..count) as fast as the
/// connection takes them; what the learner sends back (acknowledgements, a few small frames a
/// second) is read and dropped at the end.
pub fn run_tcp_producer(
    addr: &str,
    token: &str,
    fingerprint: Option<&str>,
    actor_id: u32,
    chunk_bytes: usize,
    count: u64,
) -> anyhow::Result<()> {
    let token = parse_token(token).map_err(|e| anyhow::anyhow!("--token: {e}"))?;
    let fingerprint = fingerprint
        .map(Fingerprint::parse)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--tls-fingerprint: {e}"))?;
    let (mut stream, weight_bytes) = join(addr, token, fingerprint, actor_id, chunk_bytes)?;
    let mut encoded = bench_chunk(chunk_bytes)?;
    let head = data_head(KIND_CHUNK, encoded.len());
    for seq in 0..count {
        set_seq(&mut encoded, seq);
        stream.write_all(&head)?;
        stream.write_all(&encoded)?;
    }
    stream.flush()?;
    // Half-close, then read until the learner closes (it has everything then). Exiting with
    // its acknowledgements unread would reset the connection and drop chunks still in flight.
    stream.close_write()?;
    while read_frame(&mut stream, &Limits::messages(weight_bytes)).is_ok() {}
    Ok(())
}

/// `RemoteServer::publish` -> a connected actor holds the whole blob, for `bytes`-sized blobs
/// (`tls`: through TLS 1.3, the `tls_weights` row).
pub fn tcp_weight_latency(bytes: usize, samples: usize, tls: bool) -> anyhow::Result<WeightsRow> {
    ensure!(bytes >= 8, "--weight-sizes: at least 8 bytes, got {bytes}");
    let (server, token, fingerprint) = server(1 << 16, bytes, 2, tls)?;
    let addr = server.local_addr().to_string();
    let client = Subscriber::spawn(samples, "actor", move |seen| {
        let (mut stream, weight_bytes) = join(&addr, token, fingerprint, 0, 1 << 16)?;
        stream
            .socket()
            .set_read_timeout(Some(Duration::from_millis(500)))?;
        let limits = Limits::messages(weight_bytes);
        while seen.running() {
            let frame = match read_frame(&mut stream, &limits) {
                Ok(f) => f,
                Err(WireError::Io(e))
                    if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
                {
                    continue
                }
                Err(e) => return Err(e.into()),
            };
            if frame.kind == KIND_WEIGHTS {
                let at = Instant::now();
                let v = u64::from_le_bytes(frame.body[..8].try_into().expect("8 bytes"));
                ensure!(frame.body.len() == bytes, "weights version {v}: wrong size");
                seen.saw(v, at);
            }
        }
        Ok(())
    });
    let _link = accept(&server, 1)?;
    let kind = if tls { "tls_weights" } else { "tcp_weights" };
    client.measure(kind, bytes, |_, blob| {
        server.publish(blob);
        Ok(())
    })
}

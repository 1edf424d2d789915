//! `recur-bench transport`: the shared-memory transport's bandwidth (actor processes pushing
//! encoded chunks through their rings, this process receiving and verifying them) against a
//! plain memcpy measured in the same run, and the latency of a weight update (publish start ->
//! a subscriber holds the full copy).
//!
//! Rows, one JSON object each (and, unless `--no-tcp`, the loopback-TCP rows of
//! [`super::tcp`] after each of them):
//!
//! - `{"bench":"transport","kind":"bandwidth","chunk_bytes":..,"producers":..,"gb_per_s":..,
//!   "memcpy_gb_per_s":..,"ratio":..,"chunks":..,"median_ms":..}` plus `encoded_bytes`,
//!   `slots`, `iters`. `producers` separate processes (this binary's hidden
//!   `transport-producer` subcommand) each push real encoded chunks (valid checksums, about
//!   `chunk_bytes` each: `encoded_bytes` is the exact size) into their own ring; this process
//!   is the learner side, round-robin `try_recv` over the rings (copy + checksum). A timed
//!   window receives `chunks` chunks; `median_ms` is the median window, `gb_per_s` its
//!   bandwidth (1e9 bytes/s), `memcpy_gb_per_s` a single-threaded copy of the same bytes
//!   between two buffers of `encoded_bytes` (median of rounds timed before and after the
//!   transfer), `ratio = gb_per_s / memcpy_gb_per_s`.
//! - `{"bench":"transport","kind":"weights","weight_bytes":..,"median_us":..,"p90_us":..,
//!   "samples":..}` plus `max_us`: a publisher publishes a blob of `weight_bytes`; a subscriber
//!   thread with its own mapping of the segment polls `latest_version` and copies the new
//!   version out; the latency is publish start -> copy complete.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use common::chunk::{ActionKind, Chunk, ChunkMeta, ChunkSchema, PREFIX_LEN};
use common::recurrent::CellKind;
use common::shm::{
    reclaim_stale, unique_run_id, RingConfig, RingReader, RingWriter, WeightPublisher,
    WeightSubscriber, SEGMENT_PREFIX,
};
use serde::Serialize;

use super::{each_at_least_one, summarize};

/// The grid and the measurement settings (the `recur-bench transport` flags).
#[derive(Clone, Debug, clap::Args)]
pub struct TransportBench {
    /// Nominal encoded chunk sizes (bytes; K/M/G suffixes).
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "64K,256K,1M,4M,8M")]
    pub chunk_sizes: Vec<usize>,
    /// Numbers of producer processes (one ring each).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub producers: Vec<usize>,
    /// Timed windows per bandwidth row (the median is reported), after one warm-up window.
    #[arg(long, default_value_t = 5)]
    pub iters: usize,
    /// Bytes received per timed window (at least 8 chunks per producer).
    #[arg(long, value_parser = parse_size, default_value = "256M")]
    pub window_bytes: usize,
    /// Bytes of slots per ring (slots = ring bytes / chunk size, clamped to 2..=64).
    #[arg(long, value_parser = parse_size, default_value = "4M")]
    pub ring_bytes: usize,
    /// Weight blob sizes for the latency rows.
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "1M,16M")]
    pub weight_sizes: Vec<usize>,
    /// Timed weight updates per size.
    #[arg(long, default_value_t = 200)]
    pub weight_samples: usize,
    /// A short run: 1M chunks, 1 producer, 3 windows of 64M; 1M weights, 50 samples.
    #[arg(long)]
    pub quick: bool,
    /// Skip the loopback-TCP rows (the remote-actor path, measured after each shared-memory
    /// row: `tcp_bandwidth`, `tcp_weights`).
    #[arg(long)]
    pub no_tcp: bool,
}

/// A bandwidth result line.
#[derive(Clone, Debug, Serialize)]
pub struct BandwidthRow {
    pub bench: &'static str,
    pub kind: &'static str,
    pub chunk_bytes: usize,
    pub producers: usize,
    pub gb_per_s: f64,
    pub memcpy_gb_per_s: f64,
    pub ratio: f64,
    pub chunks: usize,
    pub median_ms: f64,
    pub encoded_bytes: usize,
    pub slots: usize,
    pub iters: usize,
}

/// A weight-latency result line.
#[derive(Clone, Debug, Serialize)]
pub struct WeightsRow {
    pub bench: &'static str,
    pub kind: &'static str,
    pub weight_bytes: usize,
    pub median_us: f64,
    pub p90_us: f64,
    pub max_us: f64,
    pub samples: usize,
}

/// How long a row may take before the benchmark gives up (a stuck producer).
const ROW_DEADLINE: Duration = Duration::from_secs(120);
/// How long a producer waits on a full ring before giving up.
const PUSH_TIMEOUT: Duration = Duration::from_secs(60);
const WEIGHT_WARMUP: usize = 5;

impl TransportBench {
    /// Checks the flags (an error names the flag), then applies `--quick`.
    pub fn checked(self) -> anyhow::Result<Self> {
        each_at_least_one("--producers", "count", &self.producers)?;
        if !self.quick {
            return Ok(self);
        }
        Ok(TransportBench {
            chunk_sizes: vec![1 << 20],
            producers: vec![1],
            iters: 3,
            window_bytes: 64 << 20,
            weight_sizes: vec![1 << 20],
            weight_samples: 50,
            ..self
        })
    }

    /// Runs the bandwidth rows, then the weight rows, writing each as soon as it is measured.
    pub fn run(&self, out: &mut impl Write) -> anyhow::Result<()> {
        for name in reclaim_stale() {
            eprintln!("recur-bench: removed stale shared-memory segment {name}");
        }
        ensure!(
            self.iters >= 1,
            "--iters must be at least 1, got {}",
            self.iters
        );
        for &chunk_bytes in &self.chunk_sizes {
            for &producers in &self.producers {
                let row = self.bandwidth(chunk_bytes, producers)?;
                writeln!(out, "{}", serde_json::to_string(&row)?)?;
                out.flush()?;
                if !self.no_tcp {
                    let tcp = super::tcp::tcp_bandwidth(&row, row.chunks, self.iters)?;
                    writeln!(out, "{}", serde_json::to_string(&tcp)?)?;
                    out.flush()?;
                }
            }
        }
        for &bytes in &self.weight_sizes {
            let row = weight_latency(bytes, self.weight_samples)?;
            writeln!(out, "{}", serde_json::to_string(&row)?)?;
            out.flush()?;
            if !self.no_tcp {
                let tcp = super::tcp::tcp_weight_latency(bytes, self.weight_samples)?;
                writeln!(out, "{}", serde_json::to_string(&tcp)?)?;
                out.flush()?;
            }
        }
        Ok(())
    }

    fn bandwidth(&self, chunk_bytes: usize, producers: usize) -> anyhow::Result<BandwidthRow> {
        ensure!(
            producers >= 1,
            "--producers: every count must be at least 1"
        );
        let encoded = bench_chunk(chunk_bytes)?;
        let len = encoded.len();
        let per_producer = (self.window_bytes / len / producers).max(8);
        let window = per_producer * producers;
        let windows = self.iters + 1;
        let slots = (self.ring_bytes / len).clamp(2, 64);
        let run_id = unique_run_id();
        let mut rings = (0..producers)
            .map(|k| {
                let name = format!("{SEGMENT_PREFIX}bench-{run_id}-ring-{k}");
                RingReader::create(
                    &name,
                    RingConfig {
                        slots,
                        slot_bytes: len,
                    },
                )
                .with_context(|| format!("creating ring {name}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        // memcpy reference: half of its rounds before the transfer, half after, so that both
        // see the same machine (a shared host's speed drifts).
        let mut memcpy = memcpy_times(&encoded, window, self.iters.div_ceil(2));
        let exe = std::env::current_exe().context("locating recur-bench to spawn producers")?;
        let mut children = Producers(Vec::new());
        for ring in &rings {
            let child = Command::new(&exe)
                .arg("transport-producer")
                .args(["--ring", ring.name()])
                .args(["--chunk-bytes", &chunk_bytes.to_string()])
                .args(["--count", &(per_producer * windows).to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .with_context(|| format!("spawning {} transport-producer", exe.display()))?;
            children.0.push(child);
        }

        // Receive everything; note the time at each window boundary.
        let total = window * windows;
        let mut buf = Vec::with_capacity(len);
        let mut received = 0usize;
        let mut boundaries = Vec::with_capacity(windows + 1);
        let start = Instant::now();
        let mut idle_since: Option<Instant> = None;
        while received < total {
            let mut got = false;
            for ring in rings.iter_mut() {
                while let Some(n) = ring.try_recv(&mut buf).map_err(|e| anyhow::anyhow!(e))? {
                    debug_assert_eq!(n, len);
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
            if got {
                idle_since = None;
                continue;
            }
            let idle = *idle_since.get_or_insert_with(Instant::now);
            if idle.elapsed() > Duration::from_millis(50) {
                children.check()?;
                ensure!(
                    start.elapsed() < ROW_DEADLINE,
                    "transport bench: only {received} of {total} chunks arrived within \
                     {ROW_DEADLINE:?}"
                );
            }
            std::thread::yield_now();
        }
        children.wait()?;
        for ring in &rings {
            ensure!(
                ring.stats().corrupted == 0,
                "ring {}: corrupt chunks",
                ring.name()
            );
        }
        drop(rings);
        // Window 0 (from the first chunk) is the warm-up.
        let times: Vec<Duration> = boundaries.windows(2).skip(1).map(|w| w[1] - w[0]).collect();
        let (median_ms, _, _) = summarize(&times);
        memcpy.extend(memcpy_times(&encoded, window, self.iters.div_ceil(2)));
        let (memcpy_ms, _, _) = summarize(&memcpy);
        let bytes = (window * len) as f64;
        let gb_per_s = bytes / (median_ms / 1e3) / 1e9;
        let memcpy_gb_per_s = bytes / (memcpy_ms / 1e3) / 1e9;
        Ok(BandwidthRow {
            bench: "transport",
            kind: "bandwidth",
            chunk_bytes,
            producers,
            gb_per_s,
            memcpy_gb_per_s,
            ratio: gb_per_s / memcpy_gb_per_s,
            chunks: window,
            median_ms,
            encoded_bytes: len,
            slots,
            iters: self.iters,
        })
    }
}

/// Producer processes, killed if the benchmark stops early.
struct Producers(Vec<Child>);

impl Producers {
    /// Fails if a producer has exited unsuccessfully.
    fn check(&mut self) -> anyhow::Result<()> {
        for child in &mut self.0 {
            if let Some(status) = child.try_wait()? {
                ensure!(
                    status.success(),
                    "transport-producer (pid {}) failed: {status}",
                    child.id()
                );
            }
        }
        Ok(())
    }

    fn wait(&mut self) -> anyhow::Result<()> {
        for mut child in self.0.drain(..) {
            let status = child.wait()?;
            ensure!(status.success(), "transport-producer failed: {status}");
        }
        Ok(())
    }
}

impl Drop for Producers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `rounds` timings (after one warm-up) of copying `src` into another buffer `count` times.
fn memcpy_times(src: &[u8], count: usize, rounds: usize) -> Vec<Duration> {
    let mut dst = vec![0u8; src.len()];
    (0..=rounds)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..count {
                dst.copy_from_slice(std::hint::black_box(src));
                std::hint::black_box(&mut dst);
            }
            start.elapsed()
        })
        .skip(1)
        .collect()
}

/// The schema of the benchmark's chunks: GRU, discrete actions, 16 envs, about 1 KiB per
/// frame, `chunk_bytes / 1024` frames.
pub fn bench_schema(chunk_bytes: usize) -> anyhow::Result<ChunkSchema> {
    ensure!(
        chunk_bytes >= 16 << 10,
        "--chunk-sizes: {chunk_bytes} bytes is too small (at least 16K)"
    );
    let obs_dim = 4;
    // Bytes per frame of a GRU/discrete chunk: 8 * obs_dim (observation, next observation)
    // + 32 (action, log-prob, value, is_init, reward, 3 flags, traj id) + 4 * hidden.
    let fixed = 8 * obs_dim + 32;
    Ok(ChunkSchema {
        envs: 16,
        steps: (chunk_bytes / 1024 / 16).max(1),
        obs_dim,
        action: ActionKind::Discrete,
        cell: CellKind::Gru,
        num_layers: 1,
        hidden_size: (1024 - fixed - 4) / 4,
    })
}

/// One encoded chunk of about `chunk_bytes` (valid checksum), with non-trivial values.
pub fn bench_chunk(chunk_bytes: usize) -> anyhow::Result<Vec<u8>> {
    let schema = bench_schema(chunk_bytes)?;
    let meta = ChunkMeta {
        actor_id: 0,
        incarnation: 0,
        seq: 0,
        policy_version: 1,
        schema_hash: 0,
        envs: 0,
        steps: 0,
        payload_len: 0,
        payload_crc32: 0,
    };
    let mut chunk = Chunk::zeros(&schema, meta);
    for (i, x) in chunk.observation.iter_mut().enumerate() {
        *x = (i % 97) as f32 * 0.25;
    }
    for (i, x) in chunk.rs_h.iter_mut().enumerate() {
        *x = ((i % 13) as f32 - 6.0) / 7.0;
    }
    for (i, x) in chunk.next_reward.iter_mut().enumerate() {
        *x = (i % 5) as f32;
    }
    Ok(chunk.encode(&schema)?)
}

/// Offset of `seq` in an encoded chunk: after the prefix, `actor_id` and `incarnation` (u32
/// each) of the fixed-width little-endian header.
const SEQ_OFFSET: usize = PREFIX_LEN + 8;

/// Sets the sequence number of an encoded chunk in place (the checksum covers the payload
/// only, so the chunk stays valid).
pub(super) fn set_seq(encoded: &mut [u8], seq: u64) {
    encoded[SEQ_OFFSET..SEQ_OFFSET + 8].copy_from_slice(&seq.to_le_bytes());
}

/// The `transport-producer` side: pushes `count` chunks of about `chunk_bytes` (sequence
/// numbers 0..count) into ring `ring`, waiting while it is full.
pub fn run_producer(ring: &str, chunk_bytes: usize, count: u64) -> anyhow::Result<()> {
    let mut encoded = bench_chunk(chunk_bytes)?;
    set_seq(&mut encoded, 7);
    let (meta, _) = Chunk::peek_meta(&encoded)?;
    ensure!(
        meta.seq == 7,
        "internal: the header layout moved (seq offset)"
    );
    let mut writer = RingWriter::open(ring)?;
    for seq in 0..count {
        set_seq(&mut encoded, seq);
        writer
            .push(&encoded, PUSH_TIMEOUT, &mut || true)
            .with_context(|| format!("pushing chunk {seq} into {ring}"))?;
    }
    Ok(())
}

/// Publish -> visible latency of `bytes`-sized weight blobs.
fn weight_latency(bytes: usize, samples: usize) -> anyhow::Result<WeightsRow> {
    ensure!(bytes >= 8, "--weight-sizes: at least 8 bytes, got {bytes}");
    ensure!(samples >= 1, "--weight-samples must be at least 1");
    let name = format!("{SEGMENT_PREFIX}bench-{}-weights", unique_run_id());
    let mut publisher = WeightPublisher::create(&name, bytes)?;
    let mut blob: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
    let total = samples + WEIGHT_WARMUP;
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // The subscriber: its own mapping, polling as an actor would between chunks (but
    // continuously, so the latency is the mechanism's, not the poll interval's).
    let subscriber = {
        let (acked, stop, name) = (acked.clone(), stop.clone(), name.clone());
        std::thread::spawn(move || -> anyhow::Result<Vec<(u64, Instant)>> {
            let mut sub = WeightSubscriber::open(&name)?;
            let mut out = Vec::with_capacity(bytes);
            let mut seen = Vec::with_capacity(total);
            let mut have = 0;
            while !stop.load(Ordering::Relaxed) {
                if sub.latest_version() <= have {
                    std::hint::spin_loop();
                    continue;
                }
                if let Some(v) = sub.fetch_newer(have, &mut out)? {
                    let at = Instant::now();
                    ensure!(
                        out.len() == bytes && out[..8] == v.to_le_bytes(),
                        "weights version {v}: wrong content"
                    );
                    seen.push((v, at));
                    have = v;
                    acked.store(v, Ordering::Release);
                }
            }
            Ok(seen)
        })
    };
    let mut started = Vec::with_capacity(total);
    let mut result = Ok(());
    for v in 1..=total as u64 {
        blob[..8].copy_from_slice(&v.to_le_bytes());
        let t0 = Instant::now();
        publisher.publish(v, &blob)?;
        started.push(t0);
        while acked.load(Ordering::Acquire) < v {
            if t0.elapsed() > Duration::from_secs(10) || subscriber.is_finished() {
                result = Err(anyhow::anyhow!(
                    "weights version {v} never reached the subscriber"
                ));
                break;
            }
            std::thread::yield_now();
        }
        if result.is_err() {
            break;
        }
        // Let the subscriber go back to polling, as between real updates.
        std::thread::sleep(Duration::from_micros(200));
    }
    stop.store(true, Ordering::Relaxed);
    let seen = match subscriber.join() {
        Ok(seen) => seen?,
        Err(_) => bail!("the weights subscriber thread panicked"),
    };
    result?;
    let mut latencies: Vec<Duration> = seen
        .iter()
        .filter(|(v, _)| *v as usize > WEIGHT_WARMUP)
        .map(|&(v, at)| at - started[v as usize - 1])
        .collect();
    ensure!(!latencies.is_empty(), "no weight update was observed");
    latencies.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let (median_ms, _, max_ms) = summarize(&latencies);
    let p90 = latencies[((latencies.len() * 9).div_ceil(10)).saturating_sub(1)];
    Ok(WeightsRow {
        bench: "transport",
        kind: "weights",
        weight_bytes: bytes,
        median_us: median_ms * 1e3,
        p90_us: us(p90),
        max_us: max_ms * 1e3,
        samples: latencies.len(),
    })
}

/// Parses a byte size: digits with an optional binary suffix, `K`/`KiB`, `M`/`MiB`,
/// `G`/`GiB` (e.g. `64K`, `1M`, `1048576`).
pub fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let n: usize = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size (e.g. 65536, 64K, 1M)"))?;
    let unit = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => {
            return Err(format!(
                "{text:?}: unknown size suffix {suffix:?} (K, M or G)"
            ))
        }
    };
    n.checked_mul(unit)
        .ok_or_else(|| format!("{text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert!(parse_size("1X")
            .unwrap_err()
            .contains("unknown size suffix"));
        assert!(parse_size("M").is_err());
    }

    #[test]
    fn bench_chunks_are_close_to_the_nominal_size_and_valid() {
        for size in [64 << 10, 1 << 20] {
            let mut encoded = bench_chunk(size).unwrap();
            assert!(
                encoded.len() <= size && encoded.len() * 100 >= size * 99,
                "{size}: {}",
                encoded.len()
            );
            set_seq(&mut encoded, 12345);
            let meta = Chunk::verify_checksum(&encoded).unwrap();
            assert_eq!(meta.seq, 12345);
        }
    }
}

//! `recur-bench transport`: the shared-memory transport's bandwidth (producer processes pushing
//! encoded chunks through their rings, this process receiving and verifying them) against a
//! plain memcpy measured in the same run, and the latency of a weight update (publish start ->
//! a subscriber holds the full copy); after each, unless `--no-tcp`, the loopback-TCP rows of
//! [`super::tcp`]. The rows, their fields and the options are documented in docs/recur-bench.md.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use common::chunk::Chunk;
use common::shm::{
    reclaim_stale, unique_run_id, RingConfig, RingReader, RingWriter, WeightPublisher,
    WeightSubscriber, SEGMENT_PREFIX,
};

use super::chunks::{bench_chunk, set_seq};
use super::latency::{Subscriber, WeightsRow};
use super::tcp::{tcp_bandwidth, tcp_weight_latency};
use super::{
    at_least_one, each_at_least_one, emit, summarize, BandwidthRow, Producers, ROW_DEADLINE,
};

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
    /// row: `tcp_bandwidth`, `tls_bandwidth`, `tcp_weights`, `tls_weights`).
    #[arg(long)]
    pub no_tcp: bool,
}

/// How long a producer waits on a full ring before giving up.
const PUSH_TIMEOUT: Duration = Duration::from_secs(60);

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
        at_least_one("--iters", self.iters)?;
        for &chunk_bytes in &self.chunk_sizes {
            for &producers in &self.producers {
                let row = self.bandwidth(chunk_bytes, producers)?;
                emit(out, &row)?;
                if !self.no_tcp {
                    let tcp = tcp_bandwidth(&row, self.iters, None)?;
                    emit(out, &tcp)?;
                    let tls = tcp_bandwidth(&row, self.iters, Some(&tcp))?;
                    emit(out, &tls)?;
                }
            }
        }
        for &bytes in &self.weight_sizes {
            let row = weight_latency(bytes, self.weight_samples)?;
            emit(out, &row)?;
            if !self.no_tcp {
                for tls in [false, true] {
                    let row = tcp_weight_latency(bytes, self.weight_samples, tls)?;
                    emit(out, &row)?;
                }
            }
        }
        Ok(())
    }

    fn bandwidth(&self, chunk_bytes: usize, producers: usize) -> anyhow::Result<BandwidthRow> {
        let encoded = bench_chunk(chunk_bytes)?;
        let len = encoded.len();
        let per_producer = (self.window_bytes / len / producers).max(8);
        let window = per_producer * producers;
        let windows = self.iters + 1;
        let slots = (self.ring_bytes / len).clamp(2, 64);
        let config = RingConfig {
            slots,
            slot_bytes: len,
        };
        let run_id = unique_run_id();
        let mut rings = (0..producers)
            .map(|k| {
                let name = format!("{SEGMENT_PREFIX}bench-{run_id}-ring-{k}");
                RingReader::create(&name, config).with_context(|| format!("creating ring {name}"))
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
    // The subscriber: its own mapping, polling as an actor would between chunks (but
    // continuously, so the latency is the mechanism's, not the poll interval's).
    let subscriber = Subscriber::spawn(samples, "subscriber", move |seen| {
        let mut sub = WeightSubscriber::open(&name)?;
        let mut out = Vec::with_capacity(bytes);
        let mut have = 0;
        while seen.running() {
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
                seen.saw(v, at);
                have = v;
            }
        }
        Ok(())
    });
    subscriber.measure("weights", bytes, |v, blob| Ok(publisher.publish(v, blob)?))
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
}

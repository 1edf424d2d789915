//! The weight-latency loop of `recur-bench transport`, shared by its shared-memory row
//! (`weights`: a subscriber's own mapping of the weight segment) and its loopback-TCP row
//! (`tcp_weights`: a remote actor's connection): publish version `v`, wait until the subscriber
//! thread holds all of it, let it go back to waiting, publish `v + 1`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use serde::Serialize;

use super::summarize;

/// A weight-latency result line: publish start -> the subscriber holds the whole blob.
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

/// Updates published before the timed ones (not reported).
const WARMUP: usize = 5;

/// How long one version may take to arrive before the row fails.
const ARRIVAL_TIMEOUT: Duration = Duration::from_secs(10);

/// The subscriber thread's side: whether to go on, and the versions it has seen.
pub struct Seen {
    acked: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    seen: Vec<(u64, Instant)>,
}

impl Seen {
    /// Whether the measurement still runs (poll again).
    pub fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }

    /// Version `v` arrived whole at `at`.
    pub fn saw(&mut self, v: u64, at: Instant) {
        self.seen.push((v, at));
        self.acked.store(v, Ordering::Release);
    }
}

/// A subscriber thread (the `who` of error messages) that reports each version it receives.
pub struct Subscriber {
    who: &'static str,
    samples: usize,
    acked: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<anyhow::Result<Vec<(u64, Instant)>>>,
}

impl Subscriber {
    /// Starts `body` on its own thread; it polls while [`Seen::running`] and calls
    /// [`Seen::saw`] for each version it holds.
    pub fn spawn(
        samples: usize,
        who: &'static str,
        body: impl FnOnce(&mut Seen) -> anyhow::Result<()> + Send + 'static,
    ) -> Self {
        let acked = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut seen = Seen {
            acked: acked.clone(),
            stop: stop.clone(),
            seen: Vec::with_capacity(samples + WARMUP),
        };
        let thread = std::thread::spawn(move || {
            body(&mut seen)?;
            Ok(seen.seen)
        });
        Subscriber {
            who,
            samples,
            acked,
            stop,
            thread,
        }
    }

    /// Publishes versions `1..=samples + WARMUP` of a `bytes`-sized blob (the version in its
    /// first 8 bytes) through `publish(v, blob)`, each once the previous one arrived, and
    /// reports the latencies of all but the warm-up as row `kind`.
    pub fn measure(
        self,
        kind: &'static str,
        bytes: usize,
        mut publish: impl FnMut(u64, &[u8]) -> anyhow::Result<()>,
    ) -> anyhow::Result<WeightsRow> {
        let total = self.samples + WARMUP;
        let mut blob: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
        let mut started = Vec::with_capacity(total);
        let mut publish_all = || {
            for v in 1..=total as u64 {
                blob[..8].copy_from_slice(&v.to_le_bytes());
                let t0 = Instant::now();
                publish(v, &blob)?;
                started.push(t0);
                while self.acked.load(Ordering::Acquire) < v {
                    ensure!(
                        t0.elapsed() <= ARRIVAL_TIMEOUT && !self.thread.is_finished(),
                        "weights version {v} never reached the {}",
                        self.who
                    );
                    std::thread::yield_now();
                }
                // Let the subscriber go back to waiting, as between real updates.
                std::thread::sleep(Duration::from_micros(200));
            }
            Ok(())
        };
        let result = publish_all();
        self.stop.store(true, Ordering::Relaxed);
        let seen = match self.thread.join() {
            Ok(seen) => seen?,
            Err(_) => bail!("the weights {} thread panicked", self.who),
        };
        result?;
        let mut latencies: Vec<Duration> = seen
            .iter()
            .filter(|(v, _)| *v as usize > WARMUP)
            .map(|&(v, at)| at - started[v as usize - 1])
            .collect();
        ensure!(!latencies.is_empty(), "no weight update was observed");
        latencies.sort();
        let (median_ms, _, max_ms) = summarize(&latencies);
        let p90 = latencies[((latencies.len() * 9).div_ceil(10)).saturating_sub(1)];
        Ok(WeightsRow {
            bench: "transport",
            kind,
            weight_bytes: bytes,
            median_us: median_ms * 1e3,
            p90_us: p90.as_secs_f64() * 1e6,
            max_us: max_ms * 1e3,
            samples: latencies.len(),
        })
    }
}

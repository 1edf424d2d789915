//! Benchmarks behind `recur-bench`. Each prints one JSON object per line (a contract: field
//! names stay stable), so results can be compared across runs and against peers.
//!
//! One module per subcommand: [`rnn`] (recurrent-mode throughput per backend), [`encoder`]
//! (the convolutional encoder beside torch's CPU convolution), [`actor`] (one
//! actor's env-steps/s), [`learner`] (learner-only training on replayed data, with the
//! `learner` library's algorithms), [`train`] (whole `recur-learner train` runs, end to end),
//! [`ranks`] (learner ranks under `mpirun`: replay throughput and the gradient all-reduce's
//! time) and [`transport`] (ring bandwidth from producer processes and weight latency), with
//! [`tcp`] (its loopback-TCP rows) and [`latency`] (the weight-latency loop both use) beside
//! it. The options and the rows' fields are documented in docs/recur-bench.md.

#![forbid(unsafe_code)]

pub mod actor;
mod chunks;
pub mod encoder;
pub mod latency;
pub mod learner;
pub mod ranks;
pub mod rnn;
pub mod tcp;
pub mod train;
pub mod transport;

use std::io::Write;
use std::time::Duration;

use serde::Serialize;

/// How long a transport row may take before the benchmark gives up (a stuck producer).
const ROW_DEADLINE: Duration = Duration::from_secs(120);

/// Writes `row` as one JSON line and flushes it: each row is out as soon as it is measured.
fn emit(out: &mut impl Write, row: &impl Serialize) -> anyhow::Result<()> {
    writeln!(out, "{}", serde_json::to_string(row)?)?;
    Ok(out.flush()?)
}

/// A shared-memory bandwidth line of `recur-bench transport` (the [`tcp`] rows' baseline).
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

/// Producer processes, killed if the benchmark stops early.
struct Producers(Vec<std::process::Child>);

impl Producers {
    /// Fails if a producer has exited unsuccessfully.
    fn check(&mut self) -> anyhow::Result<()> {
        for child in &mut self.0 {
            if let Some(status) = child.try_wait()? {
                anyhow::ensure!(
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
            anyhow::ensure!(status.success(), "transport-producer failed: {status}");
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

/// Median, minimum and maximum of `samples` in milliseconds.
pub fn summarize(samples: &[Duration]) -> (f64, f64, f64) {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    let n = ms.len();
    // Odd n: the middle sample twice, halved (exact).
    let median = (ms[(n - 1) / 2] + ms[n / 2]) / 2.0;
    (median, ms[0], ms[n - 1])
}

/// Caps the CPU threads of burn's CPU backend (rayon and matrixmultiply read these once, at
/// first use): call before any tensor work.
pub fn set_threads(threads: usize) {
    std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
    std::env::set_var("MATMUL_NUM_THREADS", threads.to_string());
}

fn at_least_one(flag: &str, value: usize) -> anyhow::Result<()> {
    anyhow::ensure!(value >= 1, "{flag} must be at least 1, got {value}");
    Ok(())
}

fn each_at_least_one(flag: &str, what: &str, values: &[usize]) -> anyhow::Result<()> {
    anyhow::ensure!(
        values.iter().all(|&v| v >= 1),
        "{flag}: every {what} must be at least 1, got {values:?}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let d = |ms: u64| Duration::from_millis(ms);
        assert_eq!(summarize(&[d(5), d(1), d(3)]), (3.0, 1.0, 5.0));
        assert_eq!(summarize(&[d(4), d(1), d(2), d(10)]), (3.0, 1.0, 10.0));
    }
}

//! Where the learner's time goes: wall time per phase of the training loop and of an update,
//! summed on the thread that runs them and reported in `summary.json` (`profile`, seconds).
//! Timing a phase costs two clock reads.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

thread_local! {
    static PHASES: RefCell<BTreeMap<&'static str, (Duration, u64)>> = const { RefCell::new(BTreeMap::new()) };
}

/// Runs `f`, adding its wall time to `phase` (phases may nest: an outer phase includes the
/// inner ones' time).
pub fn time<R>(phase: &'static str, f: impl FnOnce() -> R) -> R {
    let _phase = Phase::start(phase);
    f()
}

/// The seconds per phase so far on this thread.
pub fn snapshot() -> BTreeMap<String, f64> {
    per_phase(|(d, _)| d.as_secs_f64())
}

/// The calls per phase so far on this thread.
pub fn calls() -> BTreeMap<String, u64> {
    per_phase(|&(_, n)| n)
}

fn per_phase<T>(f: impl Fn(&(Duration, u64)) -> T) -> BTreeMap<String, T> {
    PHASES.with(|p| {
        let phases = p.borrow();
        phases.iter().map(|(k, v)| (k.to_string(), f(v))).collect()
    })
}

/// Times the scope it lives in as `phase` (until dropped).
pub struct Phase {
    name: &'static str,
    t0: Instant,
}

impl Phase {
    pub fn start(name: &'static str) -> Self {
        Phase {
            name,
            t0: Instant::now(),
        }
    }
}

impl Drop for Phase {
    /// Adds the elapsed time to the phase (one more call of it).
    fn drop(&mut self) {
        PHASES.with(|p| {
            let mut p = p.borrow_mut();
            let e = p.entry(self.name).or_default();
            e.0 += self.t0.elapsed();
            e.1 += 1;
        });
    }
}

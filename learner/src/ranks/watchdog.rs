//! The backstop behind [`super::arrival`]: a bound on how long a rank stays inside a collective
//! once every rank has reached it. A rank lost on the way to a collective is named by the
//! arrival wait; one lost *inside* it (killed, hung or cut off mid-transfer) would still leave
//! the others blocked in MPI forever. While a collective runs, [`waiting`]'s guard holds its
//! start; a thread of its own checks it four times a second and ends the process once the wait
//! passes the timeout (`RECUR_RANK_TIMEOUT_S`, default [`DEFAULT_TIMEOUT_S`]), with an error that
//! says what it waited in and that the last checkpoint stays valid. The launcher (`mpirun`,
//! `srun --kill-on-bad-exit`) then ends the rest.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Rank;

/// Seconds a rank waits for the others to reach a collective, and then inside it, before it
/// gives the group up.
pub const DEFAULT_TIMEOUT_S: u64 = 60;

/// Milliseconds since [`START`] at which the running collective began, 0 when none runs.
static SINCE_MS: AtomicU64 = AtomicU64::new(0);
static WHAT: Mutex<&'static str> = Mutex::new("");
static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn now_ms() -> u64 {
    START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// The timeout `RECUR_RANK_TIMEOUT_S` asks for; a value that is not a positive number of
/// seconds is an error naming it.
pub fn timeout_from_env() -> anyhow::Result<Duration> {
    match std::env::var("RECUR_RANK_TIMEOUT_S") {
        Err(_) => Ok(Duration::from_secs(DEFAULT_TIMEOUT_S)),
        Ok(v) => v
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| {
                anyhow::anyhow!("RECUR_RANK_TIMEOUT_S={v:?}: expected a positive number of seconds")
            }),
    }
}

/// Starts the thread that watches this rank's collectives.
pub fn start(rank: Rank, timeout: Duration) {
    now_ms();
    std::thread::Builder::new()
        .name("rank-watchdog".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(250));
            let since = SINCE_MS.load(Ordering::Acquire);
            if since == 0 || now_ms().saturating_sub(since) < timeout.as_millis() as u64 {
                continue;
            }
            let what = *WHAT.lock().unwrap_or_else(|e| e.into_inner());
            let msg = format!(
                "{rank}: waited {:.0} s in {what} after every rank had reached it: a rank was \
                 lost inside it (killed, hung or cut off); giving the group up \
                 (RECUR_RANK_TIMEOUT_S). The last checkpoint in rank 0's run directory stays \
                 valid: --resume continues the run",
                timeout.as_secs_f64()
            );
            tracing::error!("{msg}");
            eprintln!("Error: {msg}");
            std::process::exit(1);
        })
        .expect("the watchdog thread starts");
}

/// Marks a collective as running until the guard drops.
pub fn waiting(what: &'static str) -> impl Drop {
    *WHAT.lock().unwrap_or_else(|e| e.into_inner()) = what;
    SINCE_MS.store(now_ms(), Ordering::Release);
    Done
}

struct Done;

impl Drop for Done {
    fn drop(&mut self) {
        SINCE_MS.store(0, Ordering::Release);
    }
}

//! The backstop behind [`super::arrival`]: a bound on how long a rank stays inside a collective
//! once every rank has reached it. A rank lost on the way to a collective is named by the
//! arrival wait; one lost *inside* it (killed, hung or cut off mid-transfer) would still leave
//! the others blocked in MPI forever. While a collective runs, [`waiting`]'s guard holds its
//! start; a thread of its own checks it four times a second and ends the process, with an
//! error naming the lost rank where it can and saying that the last checkpoint stays valid,
//! once a rank on this machine is gone (after half a second inside), or once the wait passes
//! the timeout (`RECUR_RANK_TIMEOUT_S`, default [`DEFAULT_TIMEOUT_S`]: then a rank on this
//! machine that is stopped is named; one on another machine cannot be, as MPI does not say who
//! it waits for). The process exits at once, as a killed learner does: its actors notice and
//! exit, its segments are reclaimed by the next run. The launcher (`mpirun`, `srun
//! --kill-on-bad-exit`) then ends the rest.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::arrival::{names, Peer};
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

/// How long a collective must have run before the watchdog judges a gone rank lost inside it
/// (a rank that left the last collective of a run a moment before this one did is not).
const GONE_AFTER: Duration = Duration::from_millis(500);

/// Starts the thread that watches this rank's collectives. `peers`: every rank's process, by
/// rank; those on this machine that are gone or stopped are named.
pub fn start(rank: Rank, timeout: Duration, peers: Vec<Peer>) {
    now_ms();
    std::thread::Builder::new()
        .name("rank-watchdog".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(250));
            let since = SINCE_MS.load(Ordering::Acquire);
            if since == 0 {
                continue;
            }
            let waited = Duration::from_millis(now_ms().saturating_sub(since));
            let me = peers[rank.rank];
            let others = || (0..rank.size).filter(move |&r| r != rank.rank);
            let gone: Vec<usize> = others().filter(|&r| peers[r].gone_from(&me)).collect();
            if waited < timeout && (gone.is_empty() || waited < GONE_AFTER) {
                continue;
            }
            let stopped: Vec<usize> = others().filter(|&r| peers[r].stopped_from(&me)).collect();
            let pids = |ranks: &[usize]| {
                let pids: Vec<String> = ranks.iter().map(|&r| peers[r].pid.to_string()).collect();
                pids.join(", ")
            };
            let who = if !gone.is_empty() {
                format!(
                    "lost {} (its process is gone: pid {})",
                    names(&gone),
                    pids(&gone)
                )
            } else if !stopped.is_empty() {
                format!(
                    "lost {} (its process is stopped: pid {})",
                    names(&stopped),
                    pids(&stopped)
                )
            } else {
                "lost a rank (none on this machine is gone or stopped; MPI does not say which \
                 one elsewhere: killed, hung or cut off)"
                    .to_string()
            };
            let what = *WHAT.lock().unwrap_or_else(|e| e.into_inner());
            let msg = format!(
                "{rank}: {who} inside {what}, after every rank had reached it (waited {:.1} s); \
                 giving the group up (RECUR_RANK_TIMEOUT_S). The last checkpoint in rank 0's \
                 run directory stays valid: --resume continues the run",
                waited.as_secs_f64()
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

//! How the gymnasium bridge starts its Python workers: [`GymnasiumOptions`] and the defaults of
//! the `RECUR_PYTHON` / `RECUR_GYM_*` settings it reads.

use std::time::Duration;

/// The interpreter when `RECUR_PYTHON` is unset.
pub const DEFAULT_PYTHON: &str = "python3";

/// How long the actor polls the pipe for a worker's answer without sleeping (yielding the CPU
/// between polls) before it blocks, when `RECUR_GYM_SPIN_US` is unset: 0, block at once. An
/// actor asleep until the worker's answer byte wakes it makes that write a wake-up, which on
/// a busy machine can hand the worker's CPU to the actor; polling avoids the wake-up but burns
/// CPU, and on the loaded 2-core machine of benchmarks/history/ it did not pay (same medians
/// within the noise), so it is opt-in.
pub const DEFAULT_SPIN_US: u64 = 0;

/// How long a worker polls for the actor's next command before it blocks, when
/// `RECUR_GYM_WORKER_SPIN_US` is unset. It yields the CPU between polls, so another runnable
/// process (the actor, the other worker) is not kept waiting. With two workers the actor runs
/// the policy on one worker's envs while the other steps, so each worker waits about one
/// policy step per vector step: a wake-up there cost more than the step of 8 CartPole envs on
/// the 2-core VM (benchmarks/history/).
pub const DEFAULT_WORKER_SPIN_US: u64 = 300;

/// Python worker processes per actor when `RECUR_GYM_WORKERS` is unset: two where the machine
/// has two cores or more (each steps half the envs, in parallel, while the actor runs the
/// policy on the other half: what lets the bridge outrun a one-process `SyncVectorEnv`), else
/// one.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(2))
}

/// The least time a worker is given to start, in seconds (`RECUR_GYM_START_TIMEOUT_S`).
pub const DEFAULT_START_TIMEOUT_S: f64 = 120.0;

/// Microseconds from the environment variable `name`, else `default`.
fn micros_var(name: &str, default: u64) -> Duration {
    Duration::from_micros(
        std::env::var(name)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(default),
    )
}

/// A positive, finite number of seconds from the environment variable `name`.
fn seconds_var(name: &str) -> Option<f64> {
    std::env::var(name)
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
}

/// How the bridge starts its Python workers.
#[derive(Clone, Debug, PartialEq)]
pub struct GymnasiumOptions {
    /// The interpreter (`RECUR_PYTHON`, default `python3`).
    pub python: String,
    /// Modules imported before `gymnasium.make` (how POPGym and rl_zoo3 register their ids).
    pub imports: Vec<String>,
    /// Keyword arguments of `gymnasium.make` (a JSON object).
    pub kwargs: Option<serde_json::Value>,
    /// The keys of a `Dict` observation to keep (`run.env_keys`, `recur-actor --env-keys`);
    /// `None` keeps them all.
    pub keys: Option<Vec<String>>,
    /// How long a worker may take to answer one command, `RECUR_GYM_TIMEOUT_S` seconds, default
    /// 60.
    pub timeout: Duration,
    /// How long a worker may take to start (import, `gymnasium.make`, the spaces),
    /// `RECUR_GYM_START_TIMEOUT_S` seconds, default the larger of `timeout` and
    /// [`DEFAULT_START_TIMEOUT_S`]: a short step timeout must not fail a start that a loaded
    /// machine makes slow.
    pub start_timeout: Duration,
    /// Python worker processes per actor (`RECUR_GYM_WORKERS`, default [`default_workers`];
    /// at most `E`).
    pub workers: usize,
    /// Step the environments in two groups, so that the actor's policy runs on one while the
    /// other steps (`RECUR_GYM_PIPELINE`, default on; `0` turns it off).
    pub pipeline: bool,
    /// How long the actor polls for a worker's answer without sleeping before it blocks
    /// (`RECUR_GYM_SPIN_US` microseconds, default 0: block at once).
    pub spin: Duration,
    /// How long a worker polls for the actor's next command without sleeping before it blocks
    /// (`RECUR_GYM_WORKER_SPIN_US` microseconds, default [`DEFAULT_WORKER_SPIN_US`]).
    pub worker_spin: Duration,
}

impl Default for GymnasiumOptions {
    /// The interpreter from `RECUR_PYTHON` and the timeouts from `RECUR_GYM_TIMEOUT_S` and
    /// `RECUR_GYM_START_TIMEOUT_S`; no imports, no kwargs.
    fn default() -> Self {
        let timeout = seconds_var("RECUR_GYM_TIMEOUT_S").unwrap_or(60.0);
        GymnasiumOptions {
            python: std::env::var("RECUR_PYTHON").unwrap_or_else(|_| DEFAULT_PYTHON.into()),
            imports: Vec::new(),
            kwargs: None,
            keys: None,
            timeout: Duration::from_secs_f64(timeout),
            start_timeout: Duration::from_secs_f64(
                seconds_var("RECUR_GYM_START_TIMEOUT_S")
                    .unwrap_or(timeout.max(DEFAULT_START_TIMEOUT_S)),
            ),
            workers: std::env::var("RECUR_GYM_WORKERS")
                .ok()
                .and_then(|s| s.parse::<usize>().ok())
                .filter(|&w| w >= 1)
                .unwrap_or_else(default_workers),
            pipeline: std::env::var("RECUR_GYM_PIPELINE").map_or(true, |v| v.trim() != "0"),
            spin: micros_var("RECUR_GYM_SPIN_US", DEFAULT_SPIN_US),
            worker_spin: micros_var("RECUR_GYM_WORKER_SPIN_US", DEFAULT_WORKER_SPIN_US),
        }
    }
}

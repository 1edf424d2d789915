//! The gymnasium bridge: `gymnasium:<id>` environments stepped by Python worker processes
//! (`gym_worker.py`, shipped inside this crate, needs only gymnasium and numpy) that the actor
//! owns: two by default on a machine with two cores or more ([`default_workers`]), or
//! `RECUR_GYM_WORKERS` of them, each stepping a contiguous share of the `E` environments in
//! parallel. Actions, observations, rewards and flags cross once per
//! vector step through one shared-memory segment per worker ([`crate::shm::bridge`]); a
//! command on each worker's stdin and an answer byte on its stdout hand the turn back and
//! forth.
//!
//! **Pipelining** ([`VectorEnv::step_groups`]): the environments form two groups (the halves
//! of one worker's, or one worker's each), stepped with [`VectorEnv::begin_step`] /
//! [`VectorEnv::end_step`], so the actor runs the policy on one group while Python steps the
//! other. A worker handles its commands in order; each group's rows of the shared arrays
//! belong to one side at a time. `RECUR_GYM_PIPELINE=0` makes one group of all environments.
//!
//! Semantics match [`VecEnv`](super::VecEnv): `terminated` and `truncated` apart (gymnasium's
//! `TimeLimit` gives `truncated`), `next_obs` is the true final observation at a done and `obs`
//! the reset one, `is_init` true exactly there.
//!
//! **Seed contract**: environment `i` of a [`GymVecEnv`] started with `seed` is first reset
//! with `seed + i` (the actor passes `seed = s + a * envs_per_actor` for run seed `s` and
//! actor `a`); later resets pass no seed, as gymnasium's vector envs do. A dataset recorded
//! through the bridge therefore replays exactly in gymnasium.
//!
//! Failures are [`EnvError`]s naming the env id: Python or gymnasium missing (what to
//! install), an import or `gymnasium.make` that raises (the Python traceback), an unsupported
//! space, a worker that dies or does not answer within [`GymnasiumOptions::timeout`].

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::ops::Range;
use std::os::fd::AsFd;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use serde::Deserialize;

use super::registry::{EnvSpec, VectorEnv, GYMNASIUM_PREFIX};
use super::{EnvError, Space, VecActions, VecStep};
use crate::shm::bridge::{BridgeArrays, BridgeLayout};
use crate::shm::unique_run_id;

/// The worker's source, run with `python -c`.
const WORKER_SOURCE: &str = include_str!("gym_worker.py");

/// The interpreter when `RECUR_PYTHON` is unset.
pub const DEFAULT_PYTHON: &str = "python3";

/// How long the actor polls the pipe for a worker's answer without sleeping (yielding the CPU
/// between polls) before it blocks, when `RECUR_GYM_SPIN_US` is unset: 0, block at once. An
/// actor asleep until the worker's answer byte wakes it makes that write a wake-up, which on
/// a busy machine can hand the worker's CPU to the actor; polling avoids the wake-up but burns
/// CPU, and on the loaded 2-core machine of docs/BENCHMARKS.md it did not pay (same medians
/// within the noise), so it is opt-in.
pub const DEFAULT_SPIN_US: u64 = 0;

/// How long a worker polls for the actor's next command before it blocks, when
/// `RECUR_GYM_WORKER_SPIN_US` is unset. It yields the CPU between polls, so another runnable
/// process (the actor, the other worker) is not kept waiting. With two workers the actor runs
/// the policy on one worker's envs while the other steps, so each worker waits about one
/// policy step per vector step: a wake-up there cost more than the step of 8 CartPole envs on
/// the 2-core VM (docs/BENCHMARKS.md).
pub const DEFAULT_WORKER_SPIN_US: u64 = 300;

/// Python worker processes per actor when `RECUR_GYM_WORKERS` is unset: two where the machine
/// has two cores or more (each steps half the envs, in parallel, while the actor runs the
/// policy on the other half: what lets the bridge outrun a one-process `SyncVectorEnv`), else
/// one.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(2))
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
    /// How long a worker may take to answer one command (and to start), `RECUR_GYM_TIMEOUT_S`
    /// seconds, default 60.
    pub timeout: Duration,
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
    /// The interpreter from `RECUR_PYTHON` and the timeout from `RECUR_GYM_TIMEOUT_S`; no
    /// imports, no kwargs.
    fn default() -> Self {
        GymnasiumOptions {
            python: std::env::var("RECUR_PYTHON").unwrap_or_else(|_| DEFAULT_PYTHON.into()),
            imports: Vec::new(),
            kwargs: None,
            timeout: Duration::from_secs_f64(
                std::env::var("RECUR_GYM_TIMEOUT_S")
                    .ok()
                    .and_then(|s| s.parse::<f64>().ok())
                    .filter(|s| s.is_finite() && *s > 0.0)
                    .unwrap_or(60.0),
            ),
            workers: std::env::var("RECUR_GYM_WORKERS")
                .ok()
                .and_then(|s| s.parse::<usize>().ok())
                .filter(|&w| w >= 1)
                .unwrap_or_else(default_workers),
            pipeline: std::env::var("RECUR_GYM_PIPELINE").map_or(true, |v| v.trim() != "0"),
            spin: Duration::from_micros(
                std::env::var("RECUR_GYM_SPIN_US")
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .unwrap_or(DEFAULT_SPIN_US),
            ),
            worker_spin: Duration::from_micros(
                std::env::var("RECUR_GYM_WORKER_SPIN_US")
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .unwrap_or(DEFAULT_WORKER_SPIN_US),
            ),
        }
    }
}

/// The worker's first answer.
#[derive(Deserialize)]
struct Hello {
    ok: bool,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    error: String,
    observation_space: Option<BoxBounds>,
    action_space: Option<ActionDesc>,
    max_episode_steps: Option<u64>,
}

#[derive(Deserialize)]
struct BoxBounds {
    low: Vec<f32>,
    high: Vec<f32>,
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum ActionDesc {
    Discrete { n: usize },
    Box { low: Vec<f32>, high: Vec<f32> },
    Multidiscrete { nvec: Vec<usize> },
}

static SEGMENTS: AtomicU64 = AtomicU64::new(0);

/// One Python worker: its process, pipes, arrays and the environments it steps.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    arrays: Option<BridgeArrays>,
    /// The environments it steps (a contiguous range of the vector's).
    envs: Range<usize>,
    /// The (vector) ranges of the step commands sent and not yet answered, oldest first.
    outstanding: VecDeque<Range<usize>>,
}

impl Worker {
    /// Starts a worker for `num_envs` environments of `gym_id`.
    fn spawn(
        id: &str,
        gym_id: &str,
        options: &GymnasiumOptions,
        envs: Range<usize>,
    ) -> Result<Self, EnvError> {
        let config = serde_json::json!({
            "id": gym_id,
            "imports": options.imports,
            "kwargs": options.kwargs.clone().unwrap_or(serde_json::json!({})),
            "num_envs": envs.len(),
            "spin_us": options.worker_spin.as_micros() as u64,
        });
        let mut child = Command::new(&options.python)
            .arg("-c")
            .arg(WORKER_SOURCE)
            .arg(config.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| EnvError::PythonMissing {
                id: id.to_string(),
                python: options.python.clone(),
                error: e.to_string(),
            })?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        Ok(Worker {
            child,
            stdin,
            stdout,
            arrays: None,
            envs,
            outstanding: VecDeque::new(),
        })
    }

    fn arrays(&self) -> &BridgeArrays {
        self.arrays
            .as_ref()
            .expect("arrays exist after the handshake")
    }

    fn arrays_mut(&mut self) -> &mut BridgeArrays {
        self.arrays
            .as_mut()
            .expect("arrays exist after the handshake")
    }

    fn send(&mut self, id: &str, bytes: &[u8], what: What) -> Result<(), EnvError> {
        if self
            .stdin
            .write_all(bytes)
            .and_then(|_| self.stdin.flush())
            .is_err()
        {
            return Err(self.dead(id, what));
        }
        Ok(())
    }

    /// Waits for the answer to the command sent last.
    fn answer(
        &mut self,
        id: &str,
        what: What,
        timeout: Duration,
        spin: Duration,
    ) -> Result<(), EnvError> {
        let mut answer = [0u8; 1];
        read_exact_timeout(&mut self.stdout, &mut answer, timeout, spin)
            .map_err(|e| self.failure(id, e, what, timeout))?;
        match answer[0] {
            b'K' => Ok(()),
            b'E' => {
                let line = self.read_line(id, what, timeout)?;
                let text = serde_json::from_slice::<Hello>(&line)
                    .map(|h| h.error)
                    .unwrap_or_else(|_| String::from_utf8_lossy(&line).into_owned());
                Err(EnvError::Gymnasium {
                    id: id.to_string(),
                    message: format!("{what} raised in the worker:\n{}", text.trim_end()),
                })
            }
            other => Err(EnvError::Gymnasium {
                id: id.to_string(),
                message: format!("{what}: the worker answered {other:#x}, expected K or E"),
            }),
        }
    }

    fn read_line(&mut self, id: &str, what: What, timeout: Duration) -> Result<Vec<u8>, EnvError> {
        read_line(&mut self.stdout, timeout).map_err(|e| self.failure(id, e, what, timeout))
    }

    fn failure(&mut self, id: &str, e: ReadError, what: What, timeout: Duration) -> EnvError {
        match e {
            ReadError::Eof => self.dead(id, what),
            ReadError::Timeout => {
                self.kill();
                EnvError::WorkerFailed {
                    id: id.to_string(),
                    message: format!(
                        "the Python worker (pid {}) did not answer {what} within {:.1} s \
                         (RECUR_GYM_TIMEOUT_S); it was killed",
                        self.child.id(),
                        timeout.as_secs_f64()
                    ),
                }
            }
            ReadError::Io(e) => EnvError::WorkerFailed {
                id: id.to_string(),
                message: format!("reading the worker's answer to {what}: {e}"),
            },
        }
    }

    fn dead(&mut self, id: &str, what: What) -> EnvError {
        let status = wait_briefly(&mut self.child);
        EnvError::WorkerFailed {
            id: id.to_string(),
            message: format!(
                "the Python worker (pid {}) exited during {what} ({status}); its stderr is above",
                self.child.id()
            ),
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    /// Asks the worker to quit, then makes sure it is gone (no orphans).
    fn drop(&mut self) {
        let _ = self.stdin.write_all(b"Q");
        let _ = self.stdin.flush();
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(20));
            if !matches!(self.child.try_wait(), Ok(Some(_))) {
                self.kill();
            }
        }
    }
}

/// What a command was, for error messages (formatted only when one fails).
#[derive(Clone, Copy, Debug)]
enum What {
    Starting,
    Handshake,
    Reset,
    /// Vector step `n` (counting from 1).
    Step(u64),
}

impl std::fmt::Display for What {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            What::Starting => f.write_str("starting"),
            What::Handshake => f.write_str("handshake"),
            What::Reset => f.write_str("reset"),
            What::Step(n) => write!(f, "step {n}"),
        }
    }
}

/// `E` gymnasium environments in Python worker processes, as a [`VectorEnv`].
pub struct GymVecEnv {
    id: String,
    spec: EnvSpec,
    workers: Vec<Worker>,
    timeout: Duration,
    spin: Duration,
    action_dim: usize,
    discrete: bool,
    started: bool,
    /// The pipeline's groups ([`VectorEnv::step_groups`]).
    groups: Vec<Range<usize>>,
    /// Steps started per group (vector steps, for error messages).
    group_steps: Vec<u64>,
    last: VecStep,
    reward64: Vec<f64>,
    flags: (Vec<u8>, Vec<u8>),
    running_return: Vec<f64>,
    running_length: Vec<u64>,
}

impl GymVecEnv {
    /// Starts the workers for `id` (`gymnasium:<gymnasium id>`) with `num_envs` environments
    /// in all, env `i` first reset with `seed + i`.
    ///
    /// # Errors
    /// [`EnvError::PythonMissing`], [`EnvError::Gymnasium`] (import, make, unsupported space,
    /// worker failure), [`EnvError::NoEnvs`].
    pub fn start(
        id: &str,
        options: &GymnasiumOptions,
        num_envs: usize,
        seed: u64,
    ) -> Result<Self, EnvError> {
        if num_envs == 0 {
            return Err(EnvError::NoEnvs { num_envs });
        }
        let gym_id = id.strip_prefix(GYMNASIUM_PREFIX).unwrap_or(id);
        let err = |message: String| EnvError::Gymnasium {
            id: id.to_string(),
            message,
        };
        let w = options.workers.clamp(1, num_envs);
        let mut workers = (0..w)
            .map(|k| {
                Worker::spawn(
                    id,
                    gym_id,
                    options,
                    k * num_envs / w..(k + 1) * num_envs / w,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut hello = None;
        for worker in &mut workers {
            let line = worker.read_line(id, What::Starting, options.timeout)?;
            let h: Hello = serde_json::from_slice(&line).map_err(|e| {
                err(format!(
                    "the worker's first answer does not parse ({e}): {}",
                    String::from_utf8_lossy(&line)
                ))
            })?;
            if !h.ok {
                return Err(match h.kind.as_str() {
                    "missing" => EnvError::PythonMissing {
                        id: id.to_string(),
                        python: options.python.clone(),
                        error: h.error.trim().to_string(),
                    },
                    _ => err(h.error.trim_end().to_string()),
                });
            }
            hello.get_or_insert(h);
        }
        let hello = hello.expect("at least one worker");
        let (Some(obs), Some(action)) = (hello.observation_space, hello.action_space) else {
            return Err(err("the worker did not report its spaces".into()));
        };
        let (action_space, action_dim, discrete) = match action {
            ActionDesc::Discrete { n } => (Space::Discrete { n }, 1, true),
            ActionDesc::Box { low, high } => {
                let k = low.len();
                (Space::Box { low, high }, k, false)
            }
            ActionDesc::Multidiscrete { nvec } => {
                let k = nvec.len();
                (Space::MultiDiscrete { nvec }, k, true)
            }
        };
        let spec = EnvSpec {
            id: id.to_string(),
            observation_space: Space::Box {
                low: obs.low,
                high: obs.high,
            },
            action_space,
            max_episode_steps: hello.max_episode_steps,
        };
        let d = spec.observation_space.dim();
        for worker in &mut workers {
            let layout = BridgeLayout::new(worker.envs.len(), d, action_dim);
            let name = format!(
                "recur-{}-gym-{}",
                unique_run_id(),
                SEGMENTS.fetch_add(1, Ordering::Relaxed)
            );
            let arrays = BridgeArrays::create(&name, layout).map_err(|e| err(e.to_string()))?;
            let seeds: Vec<u64> = worker
                .envs
                .clone()
                .map(|i| seed.wrapping_add(i as u64))
                .collect();
            let mut handshake = serde_json::to_value(arrays.layout()).expect("layout serialises");
            handshake["path"] = serde_json::json!(arrays.path());
            handshake["seeds"] = serde_json::json!(seeds);
            worker.arrays = Some(arrays);
            let mut line = handshake.to_string().into_bytes();
            line.push(b'\n');
            worker.send(id, &line, What::Handshake)?;
        }
        let groups = if !options.pipeline || num_envs < 2 {
            std::iter::once(0..num_envs).collect()
        } else if workers.len() == 1 {
            vec![0..num_envs / 2, num_envs / 2..num_envs]
        } else {
            workers.iter().map(|w| w.envs.clone()).collect()
        };
        Ok(GymVecEnv {
            id: id.to_string(),
            spec,
            workers,
            timeout: options.timeout,
            spin: options.spin,
            action_dim,
            discrete,
            started: false,
            group_steps: vec![0; groups.len()],
            groups,
            last: VecStep::new(num_envs, d),
            reward64: vec![0.0; num_envs],
            flags: (vec![0; num_envs], vec![0; num_envs]),
            running_return: vec![0.0; num_envs],
            running_length: vec![0; num_envs],
        })
    }

    /// The spaces the workers reported (observation flattened to a Box).
    pub fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    /// The workers' process ids.
    pub fn worker_pids(&self) -> Vec<u32> {
        self.workers.iter().map(|w| w.child.id()).collect()
    }

    /// Reset: one command to every worker (they run in parallel), then every answer.
    fn reset_all(&mut self) -> Result<(), EnvError> {
        for worker in &mut self.workers {
            assert!(
                worker.outstanding.is_empty(),
                "GymVecEnv({}): reset while a step is outstanding",
                self.id
            );
            worker.send(&self.id, b"R", What::Reset)?;
        }
        for worker in &mut self.workers {
            worker.answer(&self.id, What::Reset, self.timeout, Duration::ZERO)?;
        }
        Ok(())
    }

    /// Writes the actions of envs `envs` (`actions` holds their rows only) and sends each
    /// worker holding some of them a step command for its share; returns at once.
    fn begin_range(
        &mut self,
        envs: Range<usize>,
        actions: VecActions<'_>,
        what: What,
    ) -> Result<(), EnvError> {
        assert!(self.started, "GymVecEnv({}): step before reset", self.id);
        let k = self.action_dim;
        assert_eq!(
            actions.len(),
            envs.len() * k,
            "GymVecEnv({}): {} action values for envs {envs:?} x {k}",
            self.id,
            actions.len()
        );
        for worker in &mut self.workers {
            let r = worker.envs.start.max(envs.start)..worker.envs.end.min(envs.end);
            if r.is_empty() {
                continue;
            }
            let (lo, hi) = (r.start - worker.envs.start, r.end - worker.envs.start);
            let rows = (r.start - envs.start) * k..(r.end - envs.start) * k;
            match (actions, self.discrete) {
                (VecActions::Discrete(a), true) => {
                    worker.arrays_mut().write_actions_i64(lo * k, &a[rows]);
                }
                (VecActions::Continuous(a), false) => {
                    worker.arrays_mut().write_actions_f32(lo * k, &a[rows]);
                }
                (a, _) => panic!(
                    "GymVecEnv({}): actions {a:?} do not match the action space {}",
                    self.id,
                    self.spec.action_space.describe()
                ),
            }
            let mut cmd = [0u8; 9];
            cmd[0] = b'S';
            cmd[1..5].copy_from_slice(&(lo as u32).to_le_bytes());
            cmd[5..9].copy_from_slice(&(hi as u32).to_le_bytes());
            worker.send(&self.id, &cmd, what)?;
            worker.outstanding.push_back(r);
        }
        Ok(())
    }

    /// Waits for the answers to [`GymVecEnv::begin_range`]`(envs)` and reads those rows into
    /// `self.last`. Ranges end in the order they began.
    fn end_range(&mut self, envs: Range<usize>, what: What) -> Result<(), EnvError> {
        let d = self.spec.observation_space.dim();
        let last = &mut self.last;
        let (term, trunc) = &mut self.flags;
        for worker in &mut self.workers {
            let r = worker.envs.start.max(envs.start)..worker.envs.end.min(envs.end);
            if r.is_empty() {
                continue;
            }
            assert_eq!(
                worker.outstanding.pop_front().as_ref(),
                Some(&r),
                "GymVecEnv({}): steps end in the order they began",
                self.id
            );
            worker.answer(&self.id, what, self.timeout, self.spin)?;
            let lo = r.start - worker.envs.start;
            worker.arrays().read_step(
                lo,
                &mut last.obs[r.start * d..r.end * d],
                &mut last.next_obs[r.start * d..r.end * d],
                &mut self.reward64[r.clone()],
                &mut term[r.clone()],
                &mut trunc[r],
            );
        }
        for j in envs {
            let (t, u) = (term[j] != 0, trunc[j] != 0);
            let done = t || u;
            last.reward[j] = self.reward64[j] as f32;
            last.terminated[j] = t;
            last.truncated[j] = u;
            last.done[j] = done;
            last.is_init[j] = done;
            self.running_return[j] += self.reward64[j];
            self.running_length[j] += 1;
            if done {
                last.episode_return[j] = Some(self.running_return[j]);
                last.episode_length[j] = Some(self.running_length[j]);
                self.running_return[j] = 0.0;
                self.running_length[j] = 0;
            } else {
                last.episode_return[j] = None;
                last.episode_length[j] = None;
            }
        }
        Ok(())
    }
}

impl VectorEnv for GymVecEnv {
    fn id(&self) -> &str {
        &self.id
    }

    fn num_envs(&self) -> usize {
        self.last.reward.len()
    }

    fn observation_space(&self) -> Space {
        self.spec.observation_space.clone()
    }

    fn action_space(&self) -> Space {
        self.spec.action_space.clone()
    }

    fn reset(&mut self) -> Result<&[f32], EnvError> {
        self.reset_all()?;
        let last = &mut self.last;
        let d = self.spec.observation_space.dim();
        for worker in &self.workers {
            let r = &worker.envs;
            worker
                .arrays()
                .read_obs(&mut last.obs[r.start * d..r.end * d]);
        }
        last.after_reset();
        self.running_return.fill(0.0);
        self.running_length.fill(0);
        self.started = true;
        Ok(&self.last.obs)
    }

    /// All environments at once (every worker in parallel), whatever the groups.
    fn step(&mut self, actions: VecActions<'_>) -> Result<&VecStep, EnvError> {
        let all = 0..self.num_envs();
        self.group_steps.iter_mut().for_each(|n| *n += 1);
        let what = What::Step(self.group_steps[0]);
        self.begin_range(all.clone(), actions, what)?;
        self.end_range(all, what)?;
        Ok(&self.last)
    }

    fn step_groups(&self) -> Vec<Range<usize>> {
        self.groups.clone()
    }

    fn begin_step(&mut self, group: usize, actions: VecActions<'_>) -> Result<(), EnvError> {
        self.group_steps[group] += 1;
        let what = What::Step(self.group_steps[group]);
        self.begin_range(self.groups[group].clone(), actions, what)
    }

    fn end_step(&mut self, group: usize) -> Result<&VecStep, EnvError> {
        let what = What::Step(self.group_steps[group]);
        self.end_range(self.groups[group].clone(), what)?;
        Ok(&self.last)
    }
}

#[derive(Debug)]
enum ReadError {
    Eof,
    Timeout,
    Io(std::io::Error),
}

/// Fills `buf` from `r`, waiting at most `timeout` in total, the first `spin` of it without
/// sleeping.
fn read_exact_timeout(
    r: &mut ChildStdout,
    buf: &mut [u8],
    timeout: Duration,
    spin: Duration,
) -> Result<(), ReadError> {
    let start = Instant::now();
    let deadline = start + timeout;
    let spin_until = start + spin.min(timeout);
    let mut filled = 0;
    while filled < buf.len() {
        while !readable_now(r)? && Instant::now() < spin_until {
            std::thread::yield_now();
        }
        wait_readable(r, deadline)?;
        match r.read(&mut buf[filled..]) {
            Ok(0) => return Err(ReadError::Eof),
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
    Ok(())
}

/// Reads one `\n`-terminated line (without it), byte by byte so nothing after it is consumed.
fn read_line(r: &mut ChildStdout, timeout: Duration) -> Result<Vec<u8>, ReadError> {
    let deadline = Instant::now() + timeout;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        wait_readable(r, deadline)?;
        match r.read(&mut byte) {
            Ok(0) => return Err(ReadError::Eof),
            Ok(_) if byte[0] == b'\n' => return Ok(line),
            Ok(_) => line.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
}

/// Whether `r` has bytes (or its writer is gone) now, without waiting.
fn readable_now(r: &ChildStdout) -> Result<bool, ReadError> {
    let mut fds = [PollFd::new(r.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(n) => Ok(n > 0),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(ReadError::Io(e.into())),
    }
}

/// Waits until `r` has bytes (or its writer is gone), at most until `deadline`.
fn wait_readable(r: &ChildStdout, deadline: Instant) -> Result<(), ReadError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        let mut fds = [PollFd::new(r.as_fd(), PollFlags::POLLIN)];
        match poll(
            &mut fds,
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(0) => return Err(ReadError::Timeout),
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(ReadError::Io(e.into())),
        }
    }
}

/// The worker's exit status, waiting up to a second for it.
fn wait_briefly(child: &mut Child) -> String {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.to_string(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => return "still running".into(),
            Err(e) => return format!("status unknown: {e}"),
        }
    }
}

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
//! **Seed contract**, the native [`VecEnv`](super::VecEnv)'s: environment `j`'s episode `n`
//! (counting every reset from 0, [`VectorEnv::reset`] and automatic ones alike) is reset with
//! `env.reset(seed=`[`episode_seed`](super::episode_seed)`(seed, j, n))`; the worker computes
//! the same function in Python. A native id and its bridged original (`popgym-X` and
//! `gymnasium:popgym-X`) therefore record the same episodes under one seed, and a dataset
//! recorded through the bridge replays exactly in gymnasium.
//!
//! Failures are [`EnvError`]s naming the env id: Python or gymnasium missing (what to
//! install), an import or `gymnasium.make` that raises (the Python traceback), an unsupported
//! space, a worker that dies or does not answer within [`GymnasiumOptions::timeout`].

mod options;
mod worker;

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use options::{
    default_workers, GymnasiumOptions, DEFAULT_PYTHON, DEFAULT_SPIN_US, DEFAULT_WORKER_SPIN_US,
};
use worker::{ActionDesc, Hello, What, Worker};

use super::{EnvError, EnvSpec, Space, VecActions, VecStep, VectorEnv};
use crate::shm::bridge::{BridgeArrays, BridgeLayout};
use crate::shm::unique_run_id;

/// Ids of the form `gymnasium:<gymnasium id>` run through the gymnasium bridge.
pub const GYMNASIUM_PREFIX: &str = "gymnasium:";

/// Whether `id` names a gymnasium environment (`gymnasium:<id>`).
pub fn is_gymnasium(id: &str) -> bool {
    id.starts_with(GYMNASIUM_PREFIX)
}

static SEGMENTS: AtomicU64 = AtomicU64::new(0);

/// `E` gymnasium environments in Python worker processes, as a [`VectorEnv`].
pub struct GymVecEnv {
    id: String,
    spec: EnvSpec,
    workers: Vec<Worker>,
    timeout: Duration,
    spin: Duration,
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
    /// in all, env `j`'s episode `n` reset with [`episode_seed`](super::episode_seed)`(seed, j,
    /// n)`.
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
            let line = worker.read_line(id, What::Starting, options.start_timeout)?;
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
                    // The exception (the traceback's last line) first, the frames below.
                    _ => err(match h.error.trim_end().rsplit_once('\n') {
                        Some((frames, last)) => format!("{}\n{frames}", last.trim()),
                        None => h.error.trim_end().to_string(),
                    }),
                });
            }
            hello.get_or_insert(h);
        }
        let hello = hello.expect("at least one worker");
        let (Some(obs), Some(action)) = (hello.observation_space, hello.action_space) else {
            return Err(err("the worker did not report its spaces".into()));
        };
        let action_space = match action {
            ActionDesc::Discrete { n } => Space::Discrete { n },
            ActionDesc::Box { low, high } => Space::Box { low, high },
            ActionDesc::Multidiscrete { nvec } => Space::MultiDiscrete { nvec },
        };
        let action_dim = action_space.dim();
        let observation_space = obs.space();
        observation_space
            .check_observation()
            .map_err(|e| err(format!("the worker reported an observation space that {e}")))?;
        let spec = EnvSpec {
            id: id.to_string(),
            observation_space,
            action_space,
            max_episode_steps: hello.max_episode_steps,
        };
        let (d, p) = (
            spec.observation_space.dim(),
            spec.observation_space.pixels(),
        );
        for worker in &mut workers {
            let layout = BridgeLayout::new(worker.envs.len(), d, p, action_dim);
            let name = format!(
                "recur-{}-gym-{}",
                unique_run_id(),
                SEGMENTS.fetch_add(1, Ordering::Relaxed)
            );
            let arrays = BridgeArrays::create(&name, layout).map_err(|e| err(e.to_string()))?;
            let mut handshake = serde_json::to_value(arrays.layout()).expect("layout serialises");
            handshake["path"] = serde_json::json!(arrays.path());
            // The worker seeds its env i's episodes as the vector's env first_env + i.
            handshake["seed"] = serde_json::json!(seed);
            handshake["first_env"] = serde_json::json!(worker.envs.start);
            worker.arrays = Some(arrays);
            worker.send(id, format!("{handshake}\n").as_bytes(), What::Handshake)?;
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
            started: false,
            group_steps: vec![0; groups.len()],
            groups,
            last: VecStep::new(num_envs, d, p),
            reward64: vec![0.0; num_envs],
            flags: (vec![0; num_envs], vec![0; num_envs]),
            running_return: vec![0.0; num_envs],
            running_length: vec![0; num_envs],
        })
    }

    /// The spaces the workers reported (the observation's values flattened, its images kept;
    /// see `gym_worker.py`).
    pub fn spec(&self) -> &EnvSpec {
        &self.spec
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
        let k = self.spec.action_space.dim();
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
            match (actions, &self.spec.action_space) {
                (VecActions::Discrete(a), Space::Discrete { .. } | Space::MultiDiscrete { .. }) => {
                    worker.arrays_mut().write_actions_i64(lo * k, &a[rows]);
                }
                (VecActions::Continuous(a), Space::Box { .. }) => {
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
        let (d, p) = (
            self.spec.observation_space.dim(),
            self.spec.observation_space.pixels(),
        );
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
                (
                    &mut last.obs[r.start * d..r.end * d],
                    &mut last.next_obs[r.start * d..r.end * d],
                ),
                (
                    &mut last.pixels[r.start * p..r.end * p],
                    &mut last.next_pixels[r.start * p..r.end * p],
                ),
                &mut self.reward64[r.clone()],
                &mut term[r.clone()],
                &mut trunc[r],
            );
        }
        for j in envs {
            let running = (&mut self.running_return[j], &mut self.running_length[j]);
            last.record(j, self.reward64[j], (term[j] != 0, trunc[j] != 0), running);
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

    fn reset(&mut self) -> Result<&VecStep, EnvError> {
        // One command to every worker (they run in parallel), then every answer.
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
        let last = &mut self.last;
        let (d, p) = (
            self.spec.observation_space.dim(),
            self.spec.observation_space.pixels(),
        );
        for worker in &self.workers {
            let r = &worker.envs;
            worker.arrays().read_obs(
                &mut last.obs[r.start * d..r.end * d],
                &mut last.pixels[r.start * p..r.end * p],
            );
        }
        last.after_reset();
        self.running_return.fill(0.0);
        self.running_length.fill(0);
        self.started = true;
        Ok(&self.last)
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

    fn pixels(&self) -> &[u8] {
        &self.last.pixels
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

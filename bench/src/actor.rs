//! `recur-bench actor`: env-steps/s of one actor on one thread, with an LSTM or GRU policy
//! (sequential mode, inference backend) or with no policy at all (`cell = "none"`: uniformly
//! random actions, the environments' own ceiling).
//!
//! Every row: `{"bench":"actor","env":..,"envs":..,"cell":"lstm"|"gru"|"none","hidden":..,
//! "steps_per_s":..,"us_per_step":..,"median_ms":..,"iters":..,"threads":..}` where
//! `us_per_step` is the time of one batched step of all `envs` environments (policy call,
//! sampling, env steps and chunk filling) and `steps_per_s` counts environment steps.
//!
//! A `gymnasium:<id>` env runs through the bridge, with rows of gymnasium's own vector envs and
//! the bridge's ratios to them beside it (`gymnasium_baselines`; docs/recur-bench.md).

use std::io::Write;
use std::time::{Duration, Instant};

use common::envs::{is_gymnasium, GymnasiumOptions, Space, VecActions, VectorEnv};
use common::policy::{init_policy, policy_config_for_spec};
use common::rollout::{Actor, ActorConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use recur_rnn::{CellKind, RecurrentError};
use serde::Serialize;

use super::{at_least_one, each_at_least_one, emit, summarize};

/// The grid and the measurement settings (the `recur-bench actor` flags).
#[derive(Clone, Debug, clap::Args)]
pub struct ActorBench {
    /// Environments.
    #[arg(
        long = "env",
        value_delimiter = ',',
        default_value = "CartPole-v1,MaskedCartPole-v1"
    )]
    pub envs: Vec<String>,
    /// Numbers of environments stepped together (E).
    #[arg(long, value_delimiter = ',', default_value = "1,16,64,256")]
    pub num_envs: Vec<usize>,
    /// Policy cells; "none" = random actions without a policy (the env-only ceiling).
    #[arg(long, value_delimiter = ',', value_parser = cell_or_none, default_value = "lstm,gru,none")]
    pub cells: Vec<Option<CellKind>>,
    /// Hidden size of the policy's recurrent core.
    #[arg(long, default_value_t = 64)]
    pub hidden: usize,
    /// Steps per chunk.
    #[arg(long, default_value_t = 32)]
    pub steps: usize,
    /// Timed iterations per row (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub iters: usize,
    /// Minimum seconds per timed iteration.
    #[arg(long, default_value_t = 0.5)]
    pub min_seconds: f64,
    /// CPU threads [default: 1, one actor thread].
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// A short run: E in {1, 256}, 2 iterations of at least 0.2 s.
    #[arg(long)]
    pub quick: bool,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Python modules imported before gymnasium.make (gymnasium:<id> envs; repeatable).
    #[arg(long = "env-import", value_name = "MODULE")]
    pub env_imports: Vec<String>,
    /// gymnasium's vector envs measured beside the bridge (gymnasium:<id> envs): sync, async.
    #[arg(long, value_delimiter = ',', value_parser = ["sync", "async"], default_value = "sync,async")]
    pub gym_baselines: Vec<String>,
}

/// A `--cells` value: a cell, or `none` for no policy.
fn cell_or_none(s: &str) -> Result<Option<CellKind>, RecurrentError> {
    match s {
        "none" => Ok(None),
        other => other.parse().map(Some),
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ActorRow {
    pub bench: &'static str,
    pub env: String,
    pub envs: usize,
    pub cell: &'static str,
    pub hidden: usize,
    pub steps_per_s: f64,
    pub us_per_step: f64,
    pub median_ms: f64,
    pub iters: usize,
    pub threads: usize,
}

impl ActorBench {
    /// Checks the flags (an error names the flag), then applies `--quick`.
    pub fn checked(self) -> anyhow::Result<Self> {
        at_least_one("--threads", self.threads)?;
        each_at_least_one("--num-envs", "E", &self.num_envs)?;
        if !self.quick {
            return Ok(self);
        }
        Ok(ActorBench {
            num_envs: vec![1, 256],
            iters: 2,
            min_seconds: 0.2,
            ..self
        })
    }

    pub fn run(&self, out: &mut impl Write) -> anyhow::Result<Vec<ActorRow>> {
        let min_time = Duration::from_secs_f64(self.min_seconds);
        let mut rows = Vec::new();
        for env in &self.envs {
            for &e in &self.num_envs {
                for &cell in &self.cells {
                    // Each iteration: whole batched steps until min_time has passed.
                    let mut rates = Vec::new();
                    let mut step_times = Vec::new();
                    let mut runner = Runner::new(env, e, cell, self)?;
                    runner.steps(self.steps)?; // warm-up
                    for _ in 0..self.iters.max(1) {
                        let start = Instant::now();
                        let mut batched = 0usize;
                        while start.elapsed() < min_time {
                            batched += runner.steps(self.steps)?;
                        }
                        let elapsed = start.elapsed();
                        rates.push(Duration::from_secs_f64(
                            elapsed.as_secs_f64() / (batched * e) as f64,
                        ));
                        step_times.push(elapsed / batched as u32);
                    }
                    // Median time per env step -> steps/s; median time per batched step.
                    let (per_env_step_ms, _, _) = summarize(&rates);
                    let (per_batch_ms, _, _) = summarize(&step_times);
                    let row = ActorRow {
                        bench: "actor",
                        env: env.clone(),
                        envs: e,
                        cell: cell.map_or("none", CellKind::name),
                        hidden: if cell.is_some() { self.hidden } else { 0 },
                        steps_per_s: 1e3 / per_env_step_ms,
                        us_per_step: per_batch_ms * 1e3,
                        median_ms: per_batch_ms * self.steps as f64,
                        iters: self.iters,
                        threads: self.threads,
                    };
                    emit(out, &row)?;
                    rows.push(row);
                }
                if is_gymnasium(env) {
                    self.gymnasium_baselines(env, e, &mut rows, out)?;
                }
            }
        }
        Ok(rows)
    }

    /// gymnasium's `SyncVectorEnv` and `AsyncVectorEnv` on `E` copies of `env`, random actions;
    /// rows for both and the bridge rows' ratios to them.
    fn gymnasium_baselines(
        &self,
        env: &str,
        e: usize,
        rows: &mut Vec<ActorRow>,
        out: &mut impl Write,
    ) -> anyhow::Result<()> {
        let config = serde_json::json!({
            "id": env.strip_prefix(common::envs::GYMNASIUM_PREFIX).unwrap_or(env),
            "imports": self.env_imports,
            "kwargs": {},
            "envs": e,
            "seed": self.seed,
            "iters": self.iters.max(1),
            "min_seconds": self.min_seconds,
            "baselines": self.gym_baselines,
        });
        let output = std::process::Command::new(GymnasiumOptions::default().python)
            .arg("-c")
            .arg(include_str!("gym_vector_bench.py"))
            .arg(config.to_string())
            .output()?;
        anyhow::ensure!(
            output.status.success(),
            "gymnasium baseline for {env} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let rates: serde_json::Value = serde_json::from_slice(
            output
                .stdout
                .split(|&b| b == b'\n')
                .rfind(|l| !l.is_empty())
                .unwrap_or_default(),
        )?;
        let mut baselines = Vec::new();
        for (key, cell) in [("sync", "gymnasium_sync"), ("async", "gymnasium_async")] {
            if !self.gym_baselines.iter().any(|b| b == key) {
                continue;
            }
            let steps_per_s = rates[key].as_f64().unwrap_or(f64::NAN);
            let row = ActorRow {
                bench: "actor",
                env: env.to_string(),
                envs: e,
                cell,
                hidden: 0,
                steps_per_s,
                us_per_step: 1e6 * e as f64 / steps_per_s,
                median_ms: 1e3 * e as f64 * self.steps as f64 / steps_per_s,
                iters: self.iters,
                threads: self.threads,
            };
            emit(out, &row)?;
            for b in rows.iter().filter(|r| r.env == env && r.envs == e) {
                let ratio = b.steps_per_s / steps_per_s;
                eprintln!(
                    "{env} E={e}: bridge ({}) {:.0} steps/s = {ratio:.2}x gymnasium {cell} {steps_per_s:.0}",
                    b.cell, b.steps_per_s
                );
                let line = serde_json::json!({
                    "bench": "actor_ratio", "env": env, "envs": e, "cell": b.cell,
                    "vs": cell, "ratio": ratio,
                });
                emit(out, &line)?;
            }
            baselines.push(row);
        }
        rows.extend(baselines);
        Ok(())
    }
}

/// What one row steps: a full actor, or the bare environments with random actions.
enum Runner {
    Actor(Box<Actor>),
    Envs(Box<RandomEnvs>),
}

/// Environments stepped with uniformly random actions.
struct RandomEnvs {
    env: Box<dyn VectorEnv>,
    space: Space,
    groups: Vec<std::ops::Range<usize>>,
    rng: StdRng,
    discrete: Vec<i64>,
    continuous: Vec<f32>,
}

impl Runner {
    fn new(
        env: &str,
        e: usize,
        cell: Option<CellKind>,
        bench: &ActorBench,
    ) -> anyhow::Result<Self> {
        let registry = learner::eval::env_registry(&bench.env_imports, None, None);
        let mut venv = registry.make_vec(env, e, bench.seed)?;
        Ok(match cell {
            Some(cell) => {
                let spec = common::envs::EnvSpec {
                    id: env.to_string(),
                    observation_space: venv.observation_space(),
                    action_space: venv.action_space(),
                    max_episode_steps: None,
                };
                let config = policy_config_for_spec(&spec)
                    .with_cell(cell)
                    .with_hidden_size(bench.hidden);
                let policy = init_policy(&config, bench.seed)?;
                let config = ActorConfig::new(env, e, bench.steps, bench.seed);
                Runner::Actor(Box::new(Actor::with_envs(config, policy, venv)?))
            }
            None => {
                venv.reset()?;
                let dim = venv.action_space().dim();
                Runner::Envs(Box::new(RandomEnvs {
                    space: venv.action_space(),
                    groups: venv.step_groups(),
                    env: venv,
                    rng: StdRng::seed_from_u64(bench.seed),
                    discrete: vec![0; e * dim],
                    continuous: vec![0.0; e * dim],
                }))
            }
        })
    }

    /// Runs `steps` batched steps; returns how many.
    fn steps(&mut self, steps: usize) -> anyhow::Result<usize> {
        match self {
            Runner::Actor(a) => {
                std::hint::black_box(a.collect()?);
            }
            Runner::Envs(r) => {
                // As the actor steps them: group by group, so that one group's actions are
                // drawn while the other groups step (the bridge's pipeline).
                let RandomEnvs {
                    env,
                    space,
                    groups,
                    rng,
                    discrete,
                    continuous,
                } = &mut **r;
                let k = space.dim();
                for t in 0..steps {
                    for (g, r) in groups.iter().enumerate() {
                        if t > 0 {
                            std::hint::black_box(env.end_step(g)?);
                        }
                        let discrete = &mut discrete[r.start * k..r.end * k];
                        let continuous = &mut continuous[r.start * k..r.end * k];
                        let actions = match &*space {
                            Space::Discrete { n } => {
                                discrete
                                    .iter_mut()
                                    .for_each(|a| *a = rng.random_range(0..*n as i64));
                                VecActions::Discrete(discrete)
                            }
                            Space::MultiDiscrete { nvec } => {
                                for (i, a) in discrete.iter_mut().enumerate() {
                                    *a = rng.random_range(0..nvec[i % nvec.len()] as i64);
                                }
                                VecActions::Discrete(discrete)
                            }
                            Space::Box { low, high } => {
                                for (i, a) in continuous.iter_mut().enumerate() {
                                    let j = i % low.len();
                                    *a = rng.random_range(low[j]..=high[j]);
                                }
                                VecActions::Continuous(continuous)
                            }
                            other => unreachable!("{} is not an action space", other.describe()),
                        };
                        env.begin_step(g, actions)?;
                    }
                }
                for g in 0..groups.len() {
                    std::hint::black_box(env.end_step(g)?);
                }
            }
        }
        Ok(steps)
    }
}

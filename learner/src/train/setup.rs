//! What a training run is built from its config before its loop starts: the plan (the actors'
//! environment, the policy fitted to it, the chunk schema, the pacing), the learner resumed from
//! its checkpoint, the dataset recording, the actors' transport config and the evaluation.

use std::time::Duration;

use anyhow::Context;
use burn::tensor::backend::AutodiffBackend;
use common::actor_args::ActorArgs;
use common::checkpoint::{load_checkpoint, ResumeState};
use common::chunk::ChunkSchema;
use common::envs::EnvSpec;
use common::policy::{chunk_schema, PolicyConfig};

use super::{TrainOptions, TrainState};
use crate::actors::args::{actor_args, describe_env};
use crate::actors::supervisor::default_actor_count;
use crate::actors::transport::TransportConfig;
use crate::algo::{self, Learner, LearnerSpec};
use crate::config::{fit_policy_spec, AlgoConfig, CollectorMode, TrainConfig};
use crate::eval::{EvalPlan, EvalWorker};
use crate::run::recording::Recording;
use crate::run::tensorboard::TensorBoard;

/// The shape of a training run, derived from its config and the actors' environment.
pub struct Plan {
    /// The environment as the actors see it (the policy is built for its spaces).
    pub spec: EnvSpec,
    pub policy: PolicyConfig,
    pub schema: ChunkSchema,
    pub actors: u32,
    /// Frames per chunk, and frames an update waits for.
    pub chunk_frames: u64,
    pub frames_per_update: usize,
}

impl Plan {
    /// Asks the actor program for the environment's spaces (a registering actor that reports
    /// others is refused) and fits the policy and the chunks to them.
    pub fn new(opts: &TrainOptions) -> anyhow::Result<Self> {
        let config = &opts.config;
        let c = &config.collector;
        let actors = config.run.actors.unwrap_or_else(default_actor_count);
        let chunk_frames = (c.envs_per_actor * c.steps) as u64;
        let frames_per_update = match (c.mode, &config.ppo) {
            (CollectorMode::Sync, _) => actors as usize * chunk_frames as usize,
            (CollectorMode::Async, Some(ppo)) => ppo.frames_per_update,
            (CollectorMode::Async, None) => chunk_frames as usize,
        };
        // Before the policy is fitted to the spaces, the actors' arguments hold the default's.
        let unfitted = actor_args(config, &ActorArgs::default().policy, config.run.seed);
        let spec = describe_env(&opts.actor_program, &unfitted)?;
        let policy = fit_policy_spec(&spec, &config.policy)?;
        let schema = chunk_schema(&policy, c.envs_per_actor, c.steps);
        Ok(Plan {
            spec,
            policy,
            schema,
            actors,
            chunk_frames,
            frames_per_update,
        })
    }

    /// The algorithm of `config` for this plan, on `device`.
    pub fn learner<B: AutodiffBackend>(
        &self,
        config: &TrainConfig,
        device: &B::Device,
    ) -> anyhow::Result<Learner<B>> {
        let mut algo = config.algorithm();
        if let AlgoConfig::Ppo(ppo) = &mut algo {
            ppo.frames_per_update = self.frames_per_update;
        }
        let spec = LearnerSpec {
            algo: &algo,
            policy: &self.policy,
            schema: &self.schema,
            capacity: config.dqn.as_ref().map_or(0, |d| d.buffer_size),
            seed: config.run.seed,
        };
        algo::build::<B>(&spec, device)
    }

    /// The actors: the collector section, the learner's policy architecture, the algorithm's
    /// exploration ([`crate::actors::args::actor_args`]); a resumed run (`state`) seeds them
    /// anew (their saved states are the intake's, given at registration).
    pub fn transport_config(&self, opts: &TrainOptions, state: &TrainState) -> TransportConfig {
        let config = &opts.config;
        let c = &config.collector;
        let seed = config.run.seed.wrapping_add(state.updates);
        TransportConfig {
            actor_args: actor_args(config, &self.policy, seed),
            actors: self.actors,
            first_actor: crate::ranks::world().rank as u32 * self.actors,
            run_dir: opts.run_dir.clone(),
            actor_program: opts.actor_program.clone(),
            slots: c.ring_slots,
            max_restarts: c.max_restarts,
            restart_window: Duration::from_secs_f64(c.restart_window_s),
            restart_backoff: Duration::from_secs_f64(c.restart_backoff_s),
            stall_timeout: (c.stall_timeout_s > 0.0)
                .then(|| Duration::from_secs_f64(c.stall_timeout_s)),
            spec: Some(self.spec.clone()),
            sync: c.mode == CollectorMode::Sync,
            listen: config.run.listen.clone(),
            tls: config.run.tls,
        }
    }
}

/// A resumed run's learner state from `run_dir/checkpoint` (checked before anything is
/// written): the counters and what `resume.bin` holds. A new run, or a run stopped before its
/// first checkpoint, starts from update 0.
pub fn resume<B: AutodiffBackend>(
    opts: &TrainOptions,
    learner: &mut Learner<B>,
    policy: &PolicyConfig,
) -> anyhow::Result<(TrainState, ResumeState)> {
    if !opts.resume {
        return Ok(Default::default());
    }
    let checkpoint = opts.run_dir.join("checkpoint");
    let algo_name = opts.config.run.algo.name();
    match load_checkpoint::<B, TrainState>(&checkpoint, &mut **learner, algo_name, policy)
        .with_context(|| format!("resuming {}", opts.run_dir.display()))?
    {
        Some(loaded) => {
            if let Some(why) = &loaded.fell_back {
                tracing::warn!(
                    "{why}: resuming from the previous checkpoint {}",
                    loaded.from.display()
                );
            }
            tracing::info!(
                "resumed at update {} ({} frames) from {}",
                loaded.state.updates,
                loaded.state.frames,
                loaded.from.display()
            );
            Ok((loaded.state, loaded.resume))
        }
        None => {
            tracing::warn!(
                "{} holds no checkpoint (the run was stopped before its first one): starting \
                 from update 0 with its config.toml",
                opts.run_dir.display()
            );
            Ok(Default::default())
        }
    }
}

/// `--save-replay`: every received chunk recorded into a new dataset (or nothing).
pub fn recording(
    opts: &TrainOptions,
    schema: &ChunkSchema,
    state: &TrainState,
) -> anyhow::Result<Recording> {
    let run = &opts.config.run;
    Recording::create(
        opts.save_replay.as_deref(),
        &run.env,
        schema,
        &common::dataset::EnvSource {
            imports: run.env_imports.clone(),
            kwargs: run.env_kwargs_json(),
            keys: run.env_keys.clone(),
            seed: Some(run.seed.wrapping_add(state.updates)),
        },
    )
}

/// `[eval]`: greedy evaluations beside training, on their own thread (or none).
pub fn eval_worker(
    opts: &TrainOptions,
    policy: &PolicyConfig,
    frames: u64,
    tensorboard: Option<TensorBoard>,
) -> anyhow::Result<Option<EvalWorker>> {
    let config = &opts.config;
    let Some(e) = &config.eval else {
        return Ok(None);
    };
    let plan = EvalPlan {
        env: config.run.env.clone(),
        registry: crate::eval::env_registry(
            &config.run.env_imports,
            config.run.env_kwargs_json(),
            config.run.env_keys.clone(),
        ),
        policy: policy.clone(),
        episodes: e.episodes,
        seed: e
            .seed
            .unwrap_or_else(|| config.run.seed.wrapping_add(1_000_000)),
        every_frames: e.every_frames,
        csv: opts.run_dir.join("eval.csv"),
        tensorboard,
        best: e.keep_best.then(|| opts.run_dir.join("best")),
        algo: config.run.algo.name(),
    };
    Ok(Some(EvalWorker::start(plan, frames)?))
}

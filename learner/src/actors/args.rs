//! What the run's actors run ([`actor_args`]: the run's environment, the collector's sizes,
//! the policy fitted to the environment, the seed and the exploration) and the spaces of the environment
//! they will run, asked of the actor binary ([`describe_env`]).

use std::path::Path;
use std::process::Command;

use anyhow::Context;
use common::actor_args::ActorArgs;
use common::envs::EnvSpec;
use common::policy::PolicyConfig;
use common::rollout::{EpsilonSchedule, Exploration};

use crate::config::{Algo, TrainConfig};

/// What the actors of a training run run: `run.env` with its gymnasium imports and kwargs,
/// the collector's sizes, `policy` (the `[policy]` section fitted to the environment,
/// [`fit_policy_spec`](crate::config::fit_policy_spec), whole), `seed`, and the algorithm's
/// exploration (PPO samples from its policy; DQN actors are epsilon-greedy with the schedule
/// counted in policy versions, one per update, one update per chunk).
pub fn actor_args(config: &TrainConfig, policy: &PolicyConfig, seed: u64) -> ActorArgs {
    let c = &config.collector;
    let chunk_frames = (c.envs_per_actor * c.steps) as u64;
    let exploration = match (config.run.algo, &config.dqn) {
        (Algo::Dqn, Some(d)) => Exploration::Greedy(EpsilonSchedule {
            start: d.epsilon_start,
            end: d.epsilon_end,
            decay_versions: d.epsilon_decay_frames / chunk_frames.max(1),
        }),
        _ => Exploration::default(),
    };
    ActorArgs {
        env: config.run.env.clone(),
        env_imports: config.run.env_imports.clone(),
        env_kwargs: config.run.env_kwargs_json().map(|kwargs| match kwargs {
            serde_json::Value::Object(map) => map,
            _ => unreachable!("a TOML table is a JSON object"),
        }),
        env_keys: config.run.env_keys.clone(),
        envs: c.envs_per_actor,
        steps: c.steps,
        policy: policy.clone(),
        seed,
        exploration,
    }
}

/// Asks the actor executable `program` for the spaces of the environment its actors will run
/// with `args` (`program --describe-env --actor-args JSON`, the one question the learner asks
/// the binary besides starting it; the actor reads the environment and its gymnasium imports
/// and kwargs): the run's policy is fitted to what the actors will run, user-registered and
/// gymnasium environments included.
pub fn describe_env(program: &Path, args: &ActorArgs) -> anyhow::Result<EnvSpec> {
    let output = Command::new(program)
        .arg("--describe-env")
        .arg("--actor-args")
        .arg(args.to_json())
        .output()
        .with_context(|| format!("starting {} --describe-env", program.display()))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(
        output.status.success(),
        "the actor {} cannot build environment {:?} ({}):\n{}",
        program.display(),
        args.env,
        output.status,
        stderr.trim_end()
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).with_context(|| {
        format!(
            "{} --describe-env {:?} printed {line:?}, expected the spaces as JSON",
            program.display(),
            args.env
        )
    })
}

//! From [`ActorArgs`] to an actor ready to collect: the environment registry with the gymnasium
//! bridge's options, the per-actor seeds, the environments, the policy, and the spec check that
//! runs before every start. The one path for every way an actor runs: standalone, attached to a
//! learner on this machine or elsewhere, and `--check-env` alone.

use std::path::Path;

use anyhow::{bail, Context};
use common::actor_args::ActorArgs;
use common::checkpoint::load_checkpoint_policy;
use common::envs::{EnvSpec, GymnasiumOptions, Registry, Space};
use common::policy::init_policy;
use common::rollout::{Actor, ActorConfig};

use crate::check::{check_env_specs, SpecReport};

/// Which actor of a run this process is: stamped into chunks and trajectory ids, and mixed
/// into the seeds (every actor and every restart explores differently).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub actor_id: u32,
    /// Restart count (set by the learner's supervisor, or the learner's welcome).
    pub incarnation: u32,
}

/// An actor built from its arguments, spec-checked.
pub struct Started {
    /// Collects with the policy of `version` (its weights are not stamped with it: an
    /// attached actor adopts the learner's before its first chunk).
    pub actor: Actor,
    /// The environment's spaces as `--describe-env` reports them (infinite bounds clamped),
    /// so that the learner compares like with like at registration.
    pub spec: EnvSpec,
    /// The policy's weight version: a checkpoint's, or 0 for the actor's own initialisation.
    pub version: u64,
    /// What the spec check found.
    pub report: SpecReport,
}

/// `registry` with the gymnasium bridge's imports and kwargs of `args`.
pub fn registry_for(args: &ActorArgs, registry: Registry) -> Registry {
    registry.with_gymnasium(GymnasiumOptions {
        imports: args.env_imports.clone(),
        kwargs: args.env_kwargs.clone().map(serde_json::Value::Object),
        keys: args.env_keys.clone(),
        ..GymnasiumOptions::default()
    })
}

/// Builds actor `id` from `args` with the environments of `registry` (and gymnasium ids) and
/// the policy of `args` on their spaces, or the policy of `checkpoint` if given (its
/// architecture replaces that of `args`), after the spec check of a short rollout.
pub fn start(
    args: &ActorArgs,
    id: Identity,
    registry: Registry,
    checkpoint: Option<&Path>,
) -> anyhow::Result<Started> {
    args.validate()?;
    // One actor is one thread: several actor processes share the machine, so the GEMM and
    // tensor thread pools stay at one thread unless the environment asks otherwise.
    for var in ["MATMUL_NUM_THREADS", "RAYON_NUM_THREADS"] {
        if std::env::var_os(var).is_none() {
            std::env::set_var(var, "1");
        }
    }
    let registry = registry_for(args, registry);
    let env = &args.env;
    if !registry.contains(env) {
        let hint = common::envs::did_you_mean(env, &registry.ids());
        bail!(
            "--env {env:?}: unknown environment{}; --list-envs lists the ones this actor knows \
             (and gymnasium:<id> runs any gymnasium id)",
            hint.map_or(String::new(), |h| format!("; {h}"))
        );
    }
    let (actor_bits, incarnation_bits) = (id.actor_id as u64, id.incarnation as u64);
    // Every actor and every restart explores differently. The seed contract, native and
    // bridged alike: env j's episode n is reset with episode_seed(seed, j, n).
    let seed = args.seed ^ (actor_bits << 32) ^ (incarnation_bits << 48);
    let envs = registry.make_vec(env, args.envs, seed)?;
    let spec = finite_bounds(EnvSpec {
        id: env.clone(),
        observation_space: envs.observation_space(),
        action_space: envs.action_space(),
        max_episode_steps: None,
    });
    let (policy, version) = match checkpoint {
        Some(dir) => load_checkpoint_policy(dir)?,
        None => {
            // The run's policy as the learner fitted it, on this environment's spaces: the
            // same ones, or the actor registers with its own and the learner refuses it.
            let config = args.policy.clone().fitted_to(&spec);
            (
                init_policy(&config, args.seed).context("building the policy")?,
                0,
            )
        }
    };
    let report = check_env_specs(
        &registry,
        env,
        policy.clone(),
        args.envs.min(8),
        args.steps.min(64),
        4,
        args.seed,
    )?;
    let config = ActorConfig {
        env: env.clone(),
        num_envs: args.envs,
        steps: args.steps,
        seed,
        actor_id: id.actor_id,
        incarnation: id.incarnation,
        exploration: args.exploration,
    };
    Ok(Started {
        actor: Actor::with_envs(config, policy, envs)?,
        spec,
        version,
        report,
    })
}

/// `spec` with infinite bounds replaced by the largest finite `f32` (JSON has no infinity).
pub fn finite_bounds(mut spec: EnvSpec) -> EnvSpec {
    for space in [&mut spec.observation_space, &mut spec.action_space] {
        if let Space::Box { low, high } = space {
            for x in low.iter_mut().chain(high.iter_mut()) {
                *x = x.clamp(f32::MIN, f32::MAX);
            }
        }
    }
    spec
}

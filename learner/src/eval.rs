//! In-process evaluation: a local actor runs the policy greedily (argmax of the head: the
//! Q-network's action, the policy's mode) for a number of episodes.

use burn::tensor::backend::Backend;
use common::backend::{cpu_device, Cpu};
use common::policy::Policy;
use common::rollout::{Actor, ActorConfig, EpsilonSchedule, Exploration};
use common::weights::{from_blob, to_blob};
use serde::Serialize;

/// Returns of one evaluation.
#[derive(Clone, Debug, Serialize)]
pub struct Evaluation {
    pub episodes: usize,
    pub mean_return: f64,
    pub min_return: f64,
    pub max_return: f64,
}

/// Steps per evaluation chunk, and the most chunks an evaluation may take.
const STEPS: usize = 64;
const MAX_CHUNKS: usize = 1000;

/// The policy on the CPU backend (actors and evaluation run there): a clone when it already is
/// a CPU policy, otherwise a CPU policy loaded with its weights (copied to the host).
pub fn host_policy<B: Backend>(policy: &Policy<B>) -> anyhow::Result<Policy<Cpu>> {
    if let Some(cpu) = (policy as &dyn std::any::Any).downcast_ref::<Policy<Cpu>>() {
        return Ok(cpu.clone());
    }
    let cpu = policy.config().init::<Cpu>(&cpu_device())?;
    Ok(from_blob(cpu, &to_blob(policy, 0))?.0)
}

/// Runs `episodes` greedy episodes of `env` (one per environment, all in parallel) and
/// averages their returns.
pub fn evaluate(
    policy: Policy<Cpu>,
    env: &str,
    episodes: usize,
    seed: u64,
) -> anyhow::Result<Evaluation> {
    let mut actor = Actor::new(
        ActorConfig {
            env: env.to_string(),
            num_envs: episodes,
            steps: STEPS,
            seed,
            actor_id: 0,
            incarnation: 0,
            exploration: Exploration::Greedy(EpsilonSchedule::constant(0.0)),
        },
        policy,
    )?;
    // The first episode of every environment: no bias towards short episodes.
    let mut first: Vec<Option<f64>> = vec![None; episodes];
    for _ in 0..MAX_CHUNKS {
        actor.collect()?;
        for ep in actor.take_finished() {
            first[ep.env].get_or_insert(ep.ret);
        }
        if first.iter().all(Option::is_some) {
            let returns: Vec<f64> = first.into_iter().flatten().collect();
            return Ok(Evaluation {
                episodes,
                mean_return: returns.iter().sum::<f64>() / episodes as f64,
                min_return: returns.iter().copied().fold(f64::INFINITY, f64::min),
                max_return: returns.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            });
        }
    }
    anyhow::bail!(
        "evaluation on {env}: {} of {episodes} episodes still running after {} steps",
        first.iter().filter(|r| r.is_none()).count(),
        MAX_CHUNKS * STEPS
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::module::AutodiffModule;
    use common::backend::CpuAutodiff;
    use common::policy::policy_config_for;

    #[test]
    fn host_policy_keeps_the_weights_on_both_paths() {
        let pc = policy_config_for("MaskedCartPole-v1").unwrap();
        let trained = pc.init_seeded::<CpuAutodiff>(3, &cpu_device()).unwrap();
        let blob = to_blob(&trained, 0);
        // Another backend goes through the host copy (a GPU model's path) ...
        assert_eq!(to_blob(&host_policy(&trained).unwrap(), 0), blob);
        // ... a CPU policy is cloned.
        assert_eq!(to_blob(&host_policy(&trained.valid()).unwrap(), 0), blob);
    }
}

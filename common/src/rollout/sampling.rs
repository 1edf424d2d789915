//! Action sampling: from the policy head of a group of environments to their actions and the
//! behaviour policy's log-probabilities, under the actor's [`Exploration`].
//!
//! [`Sampler`] owns the actor's random generator (saved with the actor's state) and the
//! per-environment actions and log-probabilities of the current step. Its draws are made in
//! environment order, one environment after another, so a group of environments draws exactly
//! what it would draw stepped with all the others. Each action space keeps its own sampler: the
//! discrete one is not the multi-discrete one with `nvec = [n]`, because it takes a sampled
//! action's log-probability from the sampling itself while the multi-discrete one recomputes
//! each component's, and the two can differ in the last bit.

use std::ops::Range;

use rand::Rng;
use rand_chacha::ChaCha12Rng;

use super::Exploration;
use crate::policy::dist::{
    argmax, sample_categorical, sample_squashed_gaussian, squashed_gaussian_log_prob,
    squashed_gaussian_mode,
};
use crate::policy::ActionSpec;

/// The actor's action sampler: its random generator and what it drew at the current step.
pub(super) struct Sampler {
    /// rand's `StdRng` generator, named so that its position can be saved.
    pub(super) rng: ChaCha12Rng,
    /// `[E, A]`: the sampled actions of a discrete or multi-discrete action space (indices).
    pub(super) discrete: Vec<i64>,
    /// `[E, A]`: the sampled actions of a box action space.
    pub(super) continuous: Vec<f32>,
    /// `[E]`: the log-probability of each environment's action under the behaviour policy.
    pub(super) log_prob: Vec<f32>,
    /// `[A]`: scratch for the standard normal draws of one box action.
    eps: Vec<f32>,
}

/// How a step's actions are chosen: the policy's mode (`greedy`) or a sample from it, and the
/// probability `epsilon` of a uniformly random action instead.
#[derive(Clone, Copy)]
struct Choice {
    greedy: bool,
    epsilon: f32,
}

impl Sampler {
    /// A sampler for `envs` environments with `action_dim` values per action, drawing from `rng`.
    pub(super) fn new(rng: ChaCha12Rng, envs: usize, action_dim: usize) -> Self {
        Sampler {
            rng,
            discrete: vec![0; envs * action_dim],
            continuous: vec![0.0; envs * action_dim],
            log_prob: vec![0.0; envs],
            eps: vec![0.0; action_dim],
        }
    }

    /// Draws the actions of environments `envs` from `head` (`[envs.len(), K]`, the policy
    /// head's outputs for them, in order) under `exploration` at policy version `version`, with
    /// their log-probabilities (random draws in environment order).
    pub(super) fn sample(
        &mut self,
        action: &ActionSpec,
        head: &[f32],
        envs: Range<usize>,
        exploration: Exploration,
        version: u64,
    ) {
        let choice = Choice {
            greedy: matches!(exploration, Exploration::Greedy(_)),
            epsilon: exploration.schedule().at(version),
        };
        match action {
            ActionSpec::Discrete { n } => self.discrete(*n, head, envs, choice),
            ActionSpec::MultiDiscrete { nvec } => self.multi_discrete(nvec, head, envs, choice),
            ActionSpec::Continuous { low, high } => self.continuous(low, high, head, envs, choice),
        }
    }

    /// One of `n` actions per environment.
    fn discrete(&mut self, n: usize, head: &[f32], envs: Range<usize>, choice: Choice) {
        let Choice { greedy, epsilon } = choice;
        let k = head.len() / envs.len();
        for (i, env) in envs.enumerate() {
            let logits = &head[i * k..(i + 1) * k];
            let random = epsilon > 0.0 && self.rng.random::<f32>() < epsilon;
            // The behaviour policy is a mixture: record the mixture's log-probability.
            let (a, policy_logp) = if greedy {
                let best = argmax(logits);
                let a = if random {
                    self.rng.random_range(0..n)
                } else {
                    best
                };
                (a, if a == best { 0.0 } else { f32::NEG_INFINITY })
            } else if random {
                let a = self.rng.random_range(0..n);
                (a, categorical_log_prob_host(logits, a))
            } else {
                sample_categorical(logits, self.rng.random::<f32>())
            };
            self.discrete[env] = a as i64;
            self.log_prob[env] = if epsilon > 0.0 {
                ((1.0 - epsilon) * policy_logp.exp() + epsilon / n as f32).ln()
            } else {
                policy_logp
            };
        }
    }

    /// One of `nvec[j]` choices per component `j`, per environment.
    fn multi_discrete(&mut self, nvec: &[usize], head: &[f32], envs: Range<usize>, choice: Choice) {
        let Choice { greedy, epsilon } = choice;
        let k = head.len() / envs.len();
        let dim = nvec.len();
        let choices: f32 = nvec.iter().map(|&n| n as f32).product();
        for (i, env) in envs.enumerate() {
            // `k` head outputs per environment: the sum of `nvec`.
            let head = &head[i * k..(i + 1) * k];
            let action = &mut self.discrete[env * dim..(env + 1) * dim];
            let random = epsilon > 0.0 && self.rng.random::<f32>() < epsilon;
            let mut policy_logp = 0.0f32;
            let mut greedy_match = true;
            let mut at = 0;
            for (j, &n) in nvec.iter().enumerate() {
                let logits = &head[at..at + n];
                at += n;
                let a = if random {
                    self.rng.random_range(0..n)
                } else if greedy {
                    argmax(logits)
                } else {
                    sample_categorical(logits, self.rng.random::<f32>()).0
                };
                greedy_match &= a == argmax(logits);
                policy_logp += categorical_log_prob_host(logits, a);
                action[j] = a as i64;
            }
            if greedy {
                policy_logp = if greedy_match { 0.0 } else { f32::NEG_INFINITY };
            }
            self.log_prob[env] = if epsilon > 0.0 {
                ((1.0 - epsilon) * policy_logp.exp() + epsilon / choices).ln()
            } else {
                policy_logp
            };
        }
    }

    /// A vector in the box `[low, high]` per environment.
    fn continuous(
        &mut self,
        low: &[f32],
        high: &[f32],
        head: &[f32],
        envs: Range<usize>,
        choice: Choice,
    ) {
        let Choice { greedy, epsilon } = choice;
        let k = head.len() / envs.len();
        let a = low.len();
        for (i, env) in envs.enumerate() {
            let head = &head[i * k..(i + 1) * k];
            let action = &mut self.continuous[env * a..(env + 1) * a];
            let random = epsilon > 0.0 && self.rng.random::<f32>() < epsilon;
            if random {
                for (j, x) in action.iter_mut().enumerate() {
                    *x = low[j] + (high[j] - low[j]) * self.rng.random::<f32>();
                }
                self.log_prob[env] = squashed_gaussian_log_prob(head, action, low, high);
            } else if greedy {
                squashed_gaussian_mode(head, low, high, action);
                self.log_prob[env] = squashed_gaussian_log_prob(head, action, low, high);
            } else {
                for x in self.eps.iter_mut() {
                    *x = standard_normal(&mut self.rng);
                }
                self.log_prob[env] = sample_squashed_gaussian(head, &self.eps, low, high, action);
            }
        }
    }
}

/// The log-probability of `a` under the categorical distribution with `logits`.
fn categorical_log_prob_host(logits: &[f32], a: usize) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = logits.iter().map(|&l| (l - max).exp()).sum();
    logits[a] - max - sum.ln()
}

/// A standard normal draw (Box-Muller).
fn standard_normal(rng: &mut ChaCha12Rng) -> f32 {
    let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]
    let u2: f64 = rng.random::<f64>();
    ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::rollout::EpsilonSchedule;

    /// Heads of 5 environments for each action space, varied per row.
    fn head(spec: &ActionSpec) -> Vec<f32> {
        let k = spec.head_size();
        (0..5 * k)
            .map(|i| ((i * 7919) % 13) as f32 * 0.3 - 1.7)
            .collect()
    }

    /// Environments sampled in groups draw exactly what they draw sampled all at once (the
    /// step groups' contract), for every action space and exploration.
    #[test]
    fn groups_draw_what_all_environments_draw_at_once() {
        let specs = [
            ActionSpec::Discrete { n: 3 },
            ActionSpec::MultiDiscrete { nvec: vec![2, 4] },
            ActionSpec::Continuous {
                low: vec![-2.0, 0.0],
                high: vec![2.0, 1.0],
            },
        ];
        let schedule = |eps| EpsilonSchedule::constant(eps);
        for spec in &specs {
            let head = head(spec);
            let k = spec.head_size();
            for exploration in [
                Exploration::Sample(schedule(0.0)),
                Exploration::Sample(schedule(0.4)),
                Exploration::Greedy(schedule(0.0)),
                Exploration::Greedy(schedule(0.4)),
            ] {
                let new = || Sampler::new(ChaCha12Rng::seed_from_u64(9), 5, spec.action_dim());
                let (mut all, mut grouped) = (new(), new());
                for _ in 0..3 {
                    all.sample(spec, &head, 0..5, exploration, 0);
                    grouped.sample(spec, &head[..2 * k], 0..2, exploration, 0);
                    grouped.sample(spec, &head[2 * k..], 2..5, exploration, 0);
                    let what = format!("{spec:?} {exploration:?}");
                    assert_eq!(all.discrete, grouped.discrete, "{what}");
                    assert_eq!(all.continuous, grouped.continuous, "{what}");
                    let bits = |s: &Sampler| s.log_prob.iter().map(|x| x.to_bits()).collect();
                    let bits: [Vec<u32>; 2] = [bits(&all), bits(&grouped)];
                    assert_eq!(bits[0], bits[1], "{what}");
                    assert!(all.log_prob.iter().all(|lp| !lp.is_nan()), "{what}");
                }
            }
        }
    }
}

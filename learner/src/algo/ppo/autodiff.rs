//! PPO's update on burn's autodiff (`ppo.update = "burn"`, and `"auto"` where the flat update
//! cannot run the policy): the critic's pass on an inference copy of the model, a minibatch's
//! loss built from burn ops, and its step through [`Trainee::step`]. The reference the flat
//! update ([`super::flat`]) is held to.

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;
use common::backend::to_vec as host;
use common::chunk::{Chunk, ChunkSchema};
use common::policy::dist::{categorical_entropy, gaussian_entropy, multi_categorical_entropy};
use common::policy::{ActionSpec, Policy};

use super::flat::net::LOG_RATIO_LIMIT;
use super::update::{Minibatch, Update};
use crate::algo::optim::Trainee;
use crate::algo::slices::{gather, step_at_cut, tensor3};
use crate::run::metrics::UpdateStats;
use crate::run::profile;

/// burn's path: what it keeps beside the model of record is the critic's copy.
pub struct AutodiffUpdate<B: AutodiffBackend> {
    /// The inference copy of the model (same device), refreshed after each update.
    critic: Policy<B::InnerBackend>,
}

impl<B: AutodiffBackend> AutodiffUpdate<B> {
    pub fn new(trainee: &Trainee<B>) -> Self {
        AutodiffUpdate {
            critic: trainee.inference(),
        }
    }
}

impl<B: AutodiffBackend> Update<B> for AutodiffUpdate<B> {
    fn name(&self) -> &'static str {
        "burn"
    }

    fn critic(
        &self,
        chunk: &Chunk,
        s: &ChunkSchema,
        rows: &[usize],
    ) -> (Vec<f32>, Option<Vec<f32>>) {
        let (d, lh) = (s.obs_dim, s.num_layers * s.hidden_size);
        let out = (self.critic.forward_chunk(chunk, s)).expect("chunks match the policy");
        let boot = (!rows.is_empty()).then(|| {
            let obs = gather(&chunk.next_observation, rows, d);
            let px = gather(&chunk.next_pixels, rows, s.pixels());
            let h = gather(&host(out.next.rs_h), rows, lh);
            let c = out.next.rs_c.map(|c| gather(&host(c), rows, lh));
            let boot = step_at_cut(&self.critic, obs, &px, h, c).expect("chunks match the policy");
            host(boot.value)
        });
        (host(out.value), boot)
    }

    fn step(
        &mut self,
        trainee: &mut Trainee<B>,
        mb: &Minibatch<'_>,
    ) -> anyhow::Result<UpdateStats> {
        let (loss, mut stats) = profile::time("burn.loss", || loss(trainee, mb));
        // Several learner ranks: `Trainee::step` sums the gradients over the group (each rank's
        // loss is its part of the group's mean, `mb.group`); the statistics are parts too.
        let grad_norm = profile::time("burn.backward_step", || {
            trainee.step(loss, mb.lr, mb.max_grad_norm)
        })?;
        if crate::ranks::world().size > 1 {
            let mut parts = stats.ppo_parts();
            crate::ranks::all_reduce_sum(&mut parts)?;
            stats.set_ppo_parts(parts);
        }
        Ok(UpdateStats { grad_norm, ..stats })
    }

    fn finish(&mut self, trainee: &mut Trainee<B>) {
        self.critic = trainee.inference();
    }

    fn save(&self, trainee: &Trainee<B>) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
        trainee.save_state(None)
    }
}

/// The minibatch's loss through burn's autodiff, and its statistics (no gradient norm).
pub(crate) fn loss<B: AutodiffBackend>(
    trainee: &Trainee<B>,
    mb: &Minibatch<'_>,
) -> (Tensor<B, 1>, UpdateStats) {
    let s = mb.slices();
    let (sb, count) = (&s.sb, s.count);
    let device = trainee.device();
    let t3 = |v: Vec<f32>| tensor3(v, sb.rows, sb.len, 1, &device);
    let old_logp = t3(s.old_logp);
    let target = t3(s.target);
    let adv_t = t3(s.adv);
    let mask_t = t3(s.mask);

    let out = s.inputs.forward(&trainee.model, 0..s.inputs.len, None);
    let action = trainee.model.action();
    let logp = sb.log_prob(action, out.head.clone(), 0, &device);
    let entropy = match action {
        ActionSpec::Discrete { .. } => categorical_entropy(out.head),
        ActionSpec::MultiDiscrete { nvec } => multi_categorical_entropy(out.head, nvec),
        ActionSpec::Continuous { .. } => {
            gaussian_entropy(out.head, sb.storage.schema().action_dim())
        }
    };
    let masked_mean = |x: Tensor<B, 3>| (x * mask_t.clone()).sum() / count;
    let log_ratio = (logp - old_logp).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT);
    let ratio = log_ratio.clone().exp();
    let (eps, entropy_coef) = (mb.loss.clip_eps, mb.loss.entropy_coef);
    let surrogate =
        (ratio.clone() * adv_t.clone()).min_pair(ratio.clone().clamp(1.0 - eps, 1.0 + eps) * adv_t);
    let policy_loss = masked_mean(surrogate).neg();
    let value_loss = masked_mean((out.value - target).powi_scalar(2)) * 0.5;
    let entropy_mean = masked_mean(entropy);
    let loss = policy_loss.clone() + value_loss.clone() * mb.loss.value_coef
        - entropy_mean.clone() * entropy_coef;

    // Diagnostics, without autodiff.
    let lr_host = host(log_ratio.inner());
    let mask_host = sb.mask();
    let (mut kl, mut clipped) = (0.0f32, 0.0f32);
    for (x, &m) in lr_host.iter().zip(mask_host) {
        if m {
            kl += x.exp() - 1.0 - x;
            clipped += ((x.exp() - 1.0).abs() > eps) as u8 as f32;
        }
    }
    let scalar = |t: Tensor<B, 1>| host(t.inner())[0];
    let stats = UpdateStats {
        loss: scalar(loss.clone()),
        policy_loss: scalar(policy_loss),
        value_loss: scalar(value_loss),
        entropy: scalar(entropy_mean),
        approx_kl: kl / count,
        clip_frac: clipped / count,
        ..UpdateStats::default()
    };
    (loss, stats)
}

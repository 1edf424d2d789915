//! Recurrent DQN, R2D2-style: the policy network's head is the Q-function (`n` actions -> `n`
//! Q-values). One gradient step:
//! 1. the SliceSampler draws `num_slices` slices of `slice_len` steps (with replacement, padded,
//!    `is_init` at every slice start);
//! 2. the target network (and, for double Q, the online network without autodiff) runs recurrent
//!    mode over the whole slices from the slice-start state (stored, or zeros); one sequential
//!    step on `("next", observation)` of each slice's last step from its post-step state values
//!    the cut where the slice ends without terminating (truncation or slice end);
//! 3. n-step targets on the host: rewards summed until `terminated` (no bootstrap), the slice's
//!    last step (bootstrap from the cut) or `n` steps (bootstrap from the slice);
//! 4. the online network runs with autodiff over the slices after the first `burn_in` steps,
//!    whose only role is to produce the start state (computed without autodiff): the Huber loss
//!    of `Q(s_t, a_t) - target_t` is averaged over the real (unpadded) steps after the burn-in;
//! 5. Adam step with global-norm clipping; the target network follows by periodic copies or
//!    Polyak averaging.

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;
use common::backend::{to_vec as host, CpuAutodiff};
use common::checkpoint::Checkpointed;
use common::chunk::{Chunk, ChunkSchema};
use common::policy::{ActionSpec, Policy, PolicyConfig};

use crate::algo::optim::{polyak, Model};
use crate::algo::slice_sampler::SampledBatch;
use crate::algo::slices::{
    columns, gather, step_at_cut, tensor3, SliceBatch, SliceInputs, SliceTrainer,
};
use crate::algo::Algorithm;
use crate::config::DqnSection;
use crate::ranks::RankLost;
use crate::run::metrics::UpdateStats;

/// One slice's inputs to [`nstep_targets`].
#[derive(Clone, Copy, Debug)]
pub struct NStepInput<'a> {
    /// `r_{t+1}` of every real step of the slice (already scaled).
    pub reward: &'a [f32],
    /// `("next", "terminated")` of every real step.
    pub terminated: &'a [bool],
    /// `V(s_t)` at every real step (the bootstrap value when a return stops at `t`).
    pub value: &'a [f32],
    /// `V` of `("next", observation)` of the last step: the bootstrap where the slice ends
    /// without terminating (a truncation, or a trajectory that goes on after the slice).
    pub cut_value: f32,
    pub gamma: f32,
    pub n: usize,
}

/// n-step TD targets of every step of one slice (which never crosses a trajectory end):
/// `G_t = sum_{k<m} gamma^k r_{t+k+1} + gamma^m V(s_{t+m})`, `m <= n`, stopping early and
/// without bootstrap at `terminated`, and bootstrapping from `cut_value` at the slice's last
/// step (truncated, or cut by the slice length).
pub fn nstep_targets(input: &NStepInput) -> Vec<f32> {
    let len = input.reward.len();
    assert_eq!(input.terminated.len(), len, "terminated per step");
    assert_eq!(input.value.len(), len, "value per step");
    (0..len)
        .map(|t| {
            let (mut g, mut discount) = (0.0f32, 1.0f32);
            for k in 0..input.n {
                let j = t + k;
                g += discount * input.reward[j];
                discount *= input.gamma;
                if input.terminated[j] {
                    return g;
                }
                if j + 1 == len {
                    return g + discount * input.cut_value;
                }
                if k + 1 == input.n {
                    return g + discount * input.value[j + 1];
                }
            }
            unreachable!("n >= 1 returns inside the loop")
        })
        .collect()
}

/// The learner's Q-network, its target network and the replay storage. An update is
/// `updates_per_chunk` gradient steps; its statistics (means over them): the loss, the TD loss
/// as `value_loss`, the CQL gap as `policy_loss`, `q_mean` and the gradient norm.
pub struct Dqn<B: AutodiffBackend = CpuAutodiff> {
    /// The online network (`trainer.inference`, without autodiff) and the replay storage.
    trainer: SliceTrainer<B>,
    target: Policy<B::InnerBackend>,
    config: DqnSection,
    steps: u64,
}

impl<B: AutodiffBackend> Dqn<B> {
    /// `capacity`: replay frames (online: `dqn.buffer_size`; learner-only: the dataset).
    pub fn new(
        policy: &PolicyConfig,
        dqn: &DqnSection,
        schema: &ChunkSchema,
        capacity: usize,
        seed: u64,
        device: &B::Device,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(
            matches!(policy.action, ActionSpec::Discrete { .. }),
            "dqn needs a discrete action space; this one is {:?} (use ppo or bc)",
            policy.action
        );
        let sampler_seed = seed ^ 0xd9_5a1ce;
        let trainer = SliceTrainer::new(
            policy,
            dqn.slices(),
            schema,
            capacity,
            seed,
            sampler_seed,
            device,
        )?;
        Ok(Dqn {
            target: trainer.inference.clone(),
            trainer,
            config: dqn.clone(),
            steps: 0,
        })
    }

    /// One gradient step on a freshly sampled batch; the target network follows.
    fn train_step(&mut self) -> anyhow::Result<UpdateStats> {
        let batch = self.trainer.sample()?;
        let (loss, stats) = self.loss(&batch)?;
        let grad_norm = self.trainer.step(loss)?;
        self.steps += 1;
        let online = &self.trainer.inference;
        match self.config.tau {
            Some(tau) => {
                let target = std::mem::replace(&mut self.target, online.clone());
                self.target = polyak(target, online, tau);
            }
            None if self.steps.is_multiple_of(self.config.target_update_every) => {
                self.target = online.clone();
            }
            None => {}
        }
        Ok(UpdateStats { grad_norm, ..stats })
    }

    /// The TD loss of `batch` (slices of `slice_len`, padded) with the current networks.
    pub fn loss(&self, batch: &SampledBatch) -> Result<(Tensor<B, 1>, UpdateStats), RankLost> {
        let (c, t) = (&self.config, &self.trainer);
        let (len, burn) = (c.slice_len, c.burn_in);
        let (sb, inputs) = t.inputs(batch);
        let rows = sb.rows;

        // Bootstrap values, without autodiff: V(s) = Q_target(s, argmax_a Q_online(s, a)).
        let (tgt_q, tgt_cut) = self.values_and_cut(&self.target, &sb, &inputs);
        let (on_q, on_cut) = if c.double_q {
            self.values_and_cut(&t.inference, &sb, &inputs)
        } else {
            (tgt_q.clone(), tgt_cut.clone())
        };
        let a = tgt_q.len() / (rows * len);
        let value = |q: &[f32], pick: &[f32]| -> f32 { q[common::policy::dist::argmax(pick)] };
        let reward: Vec<f32> = sb
            .gather(&t.storage.next_reward, 1)
            .into_iter()
            .map(|r| r * c.reward_scale)
            .collect();
        let terminated = sb.gather(&t.storage.next_terminated, 1);
        let mut targets = vec![0.0f32; rows * len];
        for r in 0..rows {
            let n = sb.valid[r];
            let at = |p: usize| p * a..(p + 1) * a;
            let v: Vec<f32> = (r * len..r * len + n)
                .map(|p| value(&tgt_q[at(p)], &on_q[at(p)]))
                .collect();
            let cut = value(&tgt_cut[r * a..(r + 1) * a], &on_cut[r * a..(r + 1) * a]);
            let g = nstep_targets(&NStepInput {
                reward: &reward[r * len..r * len + n],
                terminated: &terminated[r * len..r * len + n],
                value: &v,
                cut_value: cut,
                gamma: c.gamma,
                n: c.n_step,
            });
            targets[r * len..r * len + n].copy_from_slice(&g);
        }

        // The online network with autodiff after the burn-in.
        let device = t.trainee.device();
        let out = inputs.forward_learn(&t.trainee.model, &t.inference, burn);
        let actions = sb.action_indices(burn, 1, &device);
        let q_taken = out.head.clone().gather(2, actions);
        let (mask, count) = t.learn_mask(&sb)?;
        let target = columns(&targets, rows, len, 1, burn, len);
        let target = tensor3(target, rows, len - burn, 1, &device);
        let err = q_taken.clone() - target;
        let per_step = if c.huber_delta > 0.0 {
            let abs = err.abs();
            let quad = abs.clone().clamp_max(c.huber_delta);
            let lin = abs - quad.clone();
            quad.powi_scalar(2) * 0.5 + lin * c.huber_delta
        } else {
            err.powi_scalar(2) * 0.5
        };
        let td_loss = (per_step * mask.clone()).sum() / count;
        let q_mean = host((q_taken.clone() * mask.clone()).sum().inner())[0] / count;
        let td_value = host(td_loss.clone().inner())[0];
        let mut loss = td_loss;
        let mut cql_value = 0.0;
        if c.cql_alpha > 0.0 {
            // CQL(H): logsumexp over actions minus the data action's value.
            let max = out.head.clone().detach().max_dim(2);
            let lse = (out.head - max.clone()).exp().sum_dim(2).log() + max;
            let gap = ((lse - q_taken) * mask).sum() / count;
            cql_value = host(gap.clone().inner())[0];
            loss = loss + gap * c.cql_alpha;
        }
        let stats = UpdateStats {
            loss: host(loss.clone().inner())[0],
            value_loss: td_value,
            policy_loss: cql_value,
            q_mean,
            ..UpdateStats::default()
        };
        Ok((loss, stats))
    }

    /// `net`'s Q-values over the whole slices (`[rows * len * A]`) and at each slice's cut
    /// (`[rows * A]`: `("next", observation)` of the last real step, from its post-step state).
    fn values_and_cut(
        &self,
        net: &Policy<B::InnerBackend>,
        sb: &SliceBatch,
        inputs: &SliceInputs,
    ) -> (Vec<f32>, Vec<f32>) {
        let out = inputs.forward(net, 0..inputs.len, None);
        let q = host(out.head);
        let (rows, len) = (sb.rows, sb.len);
        let pc = net.config();
        let (d, lh) = (pc.obs_dim, pc.state_layers() * pc.hidden_size);
        let last: Vec<usize> = (0..rows).map(|r| r * len + sb.valid[r] - 1).collect();
        let stored: Vec<usize> = last.iter().map(|&p| sb.batch.positions[p]).collect();
        let next_obs = gather(&self.trainer.storage.next_observation, &stored, d);
        let storage = &self.trainer.storage;
        let next_px = gather(&storage.next_pixels, &stored, storage.schema().pixels());
        let h = gather(&host(out.next.rs_h), &last, lh);
        let c = out.next.rs_c.map(|c| gather(&host(c), &last, lh));
        let cut =
            step_at_cut(net, next_obs, &next_px, h, c).expect("the batch matches the network");
        (q, host(cut.head))
    }
}

impl<B: AutodiffBackend> Algorithm<B> for Dqn<B> {
    fn add_chunk(&mut self, chunk: &Chunk) {
        self.trainer.storage.extend(chunk);
    }

    /// Enough frames for gradient steps (`learning_starts`, and at least one slice).
    fn ready(&self) -> bool {
        self.trainer.storage.len() >= self.config.learning_starts.max(self.config.slice_len)
    }

    fn update(&mut self) -> anyhow::Result<UpdateStats> {
        let steps = (0..self.config.updates_per_chunk)
            .map(|_| self.train_step())
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(UpdateStats::mean(&steps))
    }

    fn off_policy(&self) -> bool {
        true
    }
}

impl<B: AutodiffBackend> Checkpointed<B> for Dqn<B> {
    fn model(&self) -> &Model<B> {
        &self.trainer.trainee.model
    }

    fn save_state(&self) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
        self.trainer.trainee.save_state(None)
    }

    /// Restores the online network and optimizer; the target network restarts as a copy.
    fn load_state(&mut self, model: Vec<u8>, optim: Vec<u8>) -> anyhow::Result<()> {
        self.trainer.load_state(model, optim)?;
        self.target = self.trainer.inference.clone();
        Ok(())
    }

    /// The sampler's position (the replay buffer itself is not saved).
    fn host_state(&self) -> Vec<u8> {
        self.trainer.host_state()
    }

    fn load_host_state(&mut self, state: &[u8]) -> anyhow::Result<()> {
        self.trainer.load_host_state(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::backend::{cpu_device, Cpu};
    use common::policy::init_policy;
    use common::policy::{chunk_schema, policy_config_for};
    use common::rollout::{Actor, ActorConfig};
    use recur_rnn::CellKind;

    use crate::config::InitialState;

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() < 1e-5, "[{i}]: {x} vs {y} ({a:?} vs {b:?})");
        }
    }

    /// [`nstep_targets`] with `gamma` = 0.5.
    fn targets(reward: &[f32], terminated: &[bool], value: &[f32], cut: f32, n: usize) -> Vec<f32> {
        nstep_targets(&NStepInput {
            reward,
            terminated,
            value,
            cut_value: cut,
            gamma: 0.5,
            n,
        })
    }

    #[test]
    fn one_step_targets_bootstrap_from_the_next_value_and_the_cut() {
        let g = targets(&[1.0, 2.0, 3.0], &[false; 3], &[10.0, 20.0, 30.0], 40.0, 1);
        close(&g, &[1.0 + 0.5 * 20.0, 2.0 + 0.5 * 30.0, 3.0 + 0.5 * 40.0]);
    }

    #[test]
    fn n_step_targets_stop_at_terminated_without_bootstrap() {
        let g = targets(
            &[1.0, 2.0, 3.0],
            &[false, false, true],
            &[10.0, 20.0, 30.0],
            1000.0,
            3,
        );
        close(&g, &[1.0 + 0.5 * 2.0 + 0.25 * 3.0, 2.0 + 0.5 * 3.0, 3.0]);
    }

    #[test]
    fn n_step_targets_bootstrap_at_truncation_and_slice_ends_from_the_cut() {
        // The last step is truncated (or the slice ends): its next observation's value.
        let g = targets(
            &[1.0, 2.0, 3.0, 4.0],
            &[false; 4],
            &[10.0, 20.0, 30.0, 40.0],
            50.0,
            2,
        );
        close(
            &g,
            &[
                1.0 + 0.5 * 2.0 + 0.25 * 30.0,
                2.0 + 0.5 * 3.0 + 0.25 * 40.0,
                3.0 + 0.5 * 4.0 + 0.25 * 50.0,
                4.0 + 0.5 * 50.0,
            ],
        );
        // n longer than the slice: every return runs to the cut.
        let g = targets(&[1.0, 2.0], &[false; 2], &[10.0, 20.0], 8.0, 5);
        close(&g, &[1.0 + 0.5 * 2.0 + 0.25 * 8.0, 2.0 + 0.5 * 8.0]);
    }

    fn section(burn_in: usize) -> DqnSection {
        DqnSection {
            slice_len: 8,
            burn_in,
            num_slices: 4,
            lr: 3e-3,
            gamma: 0.9,
            n_step: 1,
            double_q: true,
            target_update_every: 1_000_000,
            tau: None,
            buffer_size: 4096,
            learning_starts: 0,
            updates_per_chunk: 1,
            max_grad_norm: 10.0,
            reward_scale: 10.0,
            huber_delta: 1.0,
            initial_state: InitialState::Stored,
            cql_alpha: 0.0,
            epsilon_start: 1.0,
            epsilon_end: 0.05,
            epsilon_decay_frames: 0,
        }
    }

    /// A DQN on RepeatPrevious with two chunks of 4 envs x 16 steps from a random policy.
    fn dqn(burn_in: usize) -> Dqn {
        let pc = policy_config_for("RepeatPrevious-v0")
            .unwrap()
            .with_cell(CellKind::Lstm)
            .with_hidden_size(8)
            .with_encoder(vec![8]);
        let schema = chunk_schema(&pc, 4, 16);
        let mut actor = Actor::new(
            ActorConfig::new("RepeatPrevious-v0", 4, 16, 3),
            init_policy(&pc, 3).unwrap(),
        )
        .unwrap();
        let mut dqn =
            Dqn::<CpuAutodiff>::new(&pc, &section(burn_in), &schema, 4096, 7, &cpu_device())
                .unwrap();
        for _ in 0..2 {
            dqn.add_chunk(&actor.collect().unwrap());
        }
        dqn
    }

    /// Slices `[0, 8)` and `[16, 24)` (env 0 and env 1 of the first chunk, mid-trajectory
    /// for env 0 at no reset: the stored state starts them).
    fn batch() -> SampledBatch {
        let positions: Vec<usize> = (0..8).chain(16..24).collect();
        let mut is_init = vec![false; 16];
        is_init[0] = true;
        is_init[8] = true;
        SampledBatch {
            positions,
            is_init,
            slices: vec![(0, 8), (8, 8)],
            mask: Some(vec![true; 16]),
        }
    }

    fn loss_of(dqn: &Dqn) -> f32 {
        host(dqn.loss(&batch()).unwrap().0.inner())[0]
    }

    #[test]
    fn burn_in_steps_carry_no_loss() {
        let mut dqn = dqn(4);
        let before = loss_of(&dqn);
        // Actions and rewards of the burn-in steps change nothing...
        for p in (0..4).chain(16..20) {
            dqn.trainer.storage.action[p] = (dqn.trainer.storage.action[p] + 1.0) % 4.0;
            dqn.trainer.storage.next_reward[p] += 5.0;
        }
        assert_eq!(
            loss_of(&dqn),
            before,
            "burn-in steps must not enter the loss"
        );
        // ... their observations do (they build the state) ...
        let saved = dqn.trainer.storage.observation.clone();
        for x in &mut dqn.trainer.storage.observation[0..4 * 4] {
            *x = 1.0 - *x;
        }
        assert_ne!(
            loss_of(&dqn),
            before,
            "burn-in observations build the state"
        );
        dqn.trainer.storage.observation = saved;
        // ... and the first step after the burn-in is in the loss.
        dqn.trainer.storage.next_reward[4] += 5.0;
        assert_ne!(loss_of(&dqn), before, "step burn_in is learned on");
    }

    #[test]
    fn without_burn_in_every_step_is_in_the_loss() {
        let mut dqn = dqn(0);
        let before = loss_of(&dqn);
        dqn.trainer.storage.next_reward[0] += 5.0;
        assert_ne!(loss_of(&dqn), before);
    }

    #[test]
    fn the_burn_in_state_continues_the_sequence_exactly() {
        let dqn = dqn(4);
        let b = batch();
        let sb = SliceBatch::new(&dqn.trainer.storage, &b, 8);
        let inputs = sb.inputs(InitialState::Stored, 1, 8, true);
        let full = host(
            inputs
                .forward(&dqn.trainer.inference, 0..inputs.len, None)
                .head,
        );
        let learn = host(
            inputs
                .forward_learn(dqn.model(), &dqn.trainer.inference, 4)
                .head
                .inner(),
        );
        let a = 4;
        for r in 0..2 {
            close(
                &learn[(r * 4) * a..(r * 4 + 4) * a],
                &full[(r * 8 + 4) * a..(r * 8 + 8) * a],
            );
        }
    }

    #[test]
    fn gradient_steps_on_fixed_targets_lower_the_td_loss() {
        let mut dqn = dqn(2);
        let before = loss_of(&dqn);
        for _ in 0..40 {
            let b = batch();
            let (loss, _) = dqn.loss(&b).unwrap();
            dqn.trainer.trainee.step(loss, 3e-3, 10.0).unwrap();
            dqn.trainer.inference = dqn.trainer.trainee.inference();
        }
        let after = loss_of(&dqn);
        assert!(after < 0.8 * before, "TD loss {before} -> {after}");
    }

    #[test]
    fn the_cql_term_adds_the_logsumexp_gap_of_the_data_actions() {
        let mut d = dqn(2);
        let plain = loss_of(&d);
        d.config.cql_alpha = 0.5;
        let b = batch();
        let (loss, stats) = d.loss(&b).unwrap();
        let with = host(loss.inner())[0];
        assert_eq!(stats.value_loss, plain);
        // The gap is positive (logsumexp exceeds every single value) and weighted by alpha.
        assert!(stats.policy_loss > 0.0, "{stats:?}");
        assert!((with - (plain + 0.5 * stats.policy_loss)).abs() < 1e-6);
        // By hand on the learned steps: logsumexp of the Q-values minus the taken one.
        let sb = SliceBatch::new(&d.trainer.storage, &b, 8);
        let inputs = sb.inputs(InitialState::Stored, 1, 8, true);
        let q = host(
            inputs
                .forward(&d.trainer.inference, 0..inputs.len, None)
                .head,
        );
        let actions = sb.gather(&d.trainer.storage.action, 1);
        let mut gap = 0.0f32;
        for r in 0..2 {
            for t in 2..8 {
                let p = r * 8 + t;
                let row = &q[p * 4..(p + 1) * 4];
                let lse = row.iter().map(|x| x.exp()).sum::<f32>().ln();
                gap += lse - row[actions[p] as usize];
            }
        }
        assert!(
            (stats.policy_loss - gap / 12.0).abs() < 1e-5,
            "{} vs {}",
            stats.policy_loss,
            gap / 12.0
        );
    }

    #[test]
    fn polyak_moves_the_target_by_tau() {
        let mut d = dqn(0);
        d.config.tau = Some(0.25);
        let w = |p: &Policy<Cpu>| host(p.policy_head.weight.val());
        let target0 = w(&d.target);
        d.train_step().unwrap();
        let (online, target) = (w(&d.trainer.inference), w(&d.target));
        let expected: Vec<f32> = online
            .iter()
            .zip(&target0)
            .map(|(o, t)| 0.25 * o + 0.75 * t)
            .collect();
        close(&target, &expected);
    }

    #[test]
    fn a_continuous_action_space_is_refused_naming_it() {
        let pc = policy_config_for("Pendulum-v1").unwrap();
        let schema = chunk_schema(&pc, 2, 4);
        let err = Dqn::<CpuAutodiff>::new(&pc, &section(0), &schema, 64, 0, &cpu_device())
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("discrete") && err.contains("Continuous"),
            "{err}"
        );
    }
}

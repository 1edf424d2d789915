//! Recurrent PPO: advantages from the recurrent critic over whole chunks, then several epochs of
//! minibatches made of sequence slices that start from the stored recurrent state (`is_init` at
//! every slice start), clipped surrogate + value loss + entropy bonus, Adam, global gradient-norm
//! clipping.
//!
//! The data path of one update, top to bottom:
//! 1. [`Ppo::add_chunk`]: recurrent mode over the chunk `[E, T]` from its stored states gives
//!    `V_t` and the post-step state at every segment end; a sequential step on
//!    `next.observation` from that state gives the bootstrap value where a trajectory is cut
//!    (truncation, chunk end); GAE; the chunk and its advantages go to storage.
//! 2. [`Ppo::update`]: for each epoch, the SliceSampler tiles the stored trajectories into
//!    slices (no replacement, padded to `slice_len` with a mask); each minibatch runs in
//!    recurrent mode and takes one optimizer step (`lr`, `clip_eps`, `entropy_coef` at the
//!    run's progress on their schedules).
//! 3. With `policy.obs_norm`, the observations just trained on are folded into the model's
//!    normalizer *after* the epochs, so the epochs see the statistics the actors used and the
//!    next weights carry the new ones. With `ppo.reward_norm`, rewards are divided by the
//!    running std of the discounted return (per trajectory, updated chunk by chunk).

pub mod flat;
pub mod gae;

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;
use common::backend::{to_vec as host, CpuAutodiff};
use common::checkpoint::Checkpointed;
use common::chunk::{Chunk, ChunkSchema};
use common::policy::dist::{categorical_entropy, gaussian_entropy, multi_categorical_entropy};
use common::policy::{ActionSpec, Policy, PolicyConfig};
use std::collections::HashMap;

use crate::algo::optim::{decode, encode};
use crate::algo::optim::{Model, Trainee};
use crate::algo::ppo::flat::net::{Batch, LossConfig, Outcome};
use crate::algo::ppo::flat::{unsupported, FlatUpdate};
use crate::algo::ppo::gae::{gae, needs_bootstrap, GaeInput};
use crate::algo::replay_buffer::ReplayStorage;
use crate::algo::slice_sampler::{SampledBatch, SliceSampler, SliceSamplerConfig};
use crate::algo::slices::{gather, step_at_cut, tensor3, SliceBatch};
use crate::algo::Algorithm;
use crate::config::{InitialState, PpoSection, UpdatePath};
use crate::run::metrics::UpdateStats;
use crate::run::profile::{self, Phase};

/// The learner's model, optimizer and on-policy storage, training on backend `B`. An update's
/// statistics are means over its minibatches (every [`UpdateStats`] field but `q_mean`).
pub struct Ppo<B: AutodiffBackend = CpuAutodiff> {
    trainee: Trainee<B>,
    config: PpoSection,
    schema: ChunkSchema,
    storage: ReplayStorage,
    advantage: Vec<f32>,
    value_target: Vec<f32>,
    sampler: SliceSampler,
    /// The inference copy of the model (same device), refreshed after each update.
    critic: Policy<B::InnerBackend>,
    /// Keep the model's observation normalizer up to date, clipping at this bound.
    obs_norm: Option<f32>,
    /// Running discounted returns and their variance (`ppo.reward_norm`).
    returns: ReturnNorm,
    /// The run's progress in `[0, 1]` (schedules).
    progress: f64,
    /// The fused update (`ppo.update`), when it runs this policy.
    flat: Option<FlatUpdate>,
}

/// Reward normalization by the running standard deviation of the discounted return
/// (SB3's VecNormalize `norm_reward`): one running return per trajectory, reset at `done`.
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct ReturnNorm {
    open: HashMap<i64, f64>,
    mean: f64,
    var: f64,
    count: f64,
}

impl ReturnNorm {
    /// Folds a chunk's rewards (`[E, T]`, row-major) into the running returns' statistics and
    /// returns the factor that divides rewards (`1 / sqrt(var + 1e-8)`).
    fn update(&mut self, chunk: &Chunk, gamma: f64) -> f32 {
        let mut batch = Vec::with_capacity(chunk.next_reward.len());
        for p in 0..chunk.next_reward.len() {
            let ret = self.open.entry(chunk.traj_ids[p]).or_insert(0.0);
            *ret = *ret * gamma + chunk.next_reward[p] as f64;
            batch.push(*ret);
            if chunk.next_done[p] == 1 {
                self.open.remove(&chunk.traj_ids[p]);
            }
        }
        let n = batch.len() as f64;
        let mean_b = batch.iter().sum::<f64>() / n;
        let var_b = batch.iter().map(|x| (x - mean_b).powi(2)).sum::<f64>() / n;
        let total = self.count + n;
        let delta = mean_b - self.mean;
        self.mean += delta * n / total;
        self.var =
            (self.var * self.count + var_b * n + delta * delta * self.count * n / total) / total;
        self.count = total;
        (1.0 / (self.var + 1e-8).sqrt()) as f32
    }
}

impl<B: AutodiffBackend> Ppo<B> {
    pub fn new(
        policy: &PolicyConfig,
        ppo: &PpoSection,
        schema: &ChunkSchema,
        seed: u64,
        device: &B::Device,
    ) -> anyhow::Result<Self> {
        let trainee = Trainee::new(policy, seed, device)?;
        let flat = flat_update(&trainee.model, ppo.update)?;
        tracing::info!(
            "PPO minibatches run on the {} update (ppo.update = \"{}\")",
            if flat.is_some() { "fused" } else { "burn" },
            ppo.update.name()
        );
        if ppo.pack_slices && !schema.steps.is_multiple_of(ppo.slice_len) {
            tracing::warn!(
                "ppo.pack_slices: slice_len = {} does not divide the chunks' {} steps, so each \
                 env row ends in a slice of {} steps padded to {}",
                ppo.slice_len,
                schema.steps,
                schema.steps % ppo.slice_len,
                ppo.slice_len
            );
        }
        let sampler = SliceSampler::new(SliceSamplerConfig {
            pack: ppo.pack_slices,
            ..SliceSamplerConfig::padded(ppo.slice_len, ppo.num_slices, false, seed ^ 0x5a1ce)
        })?;
        Ok(Ppo {
            obs_norm: policy.obs_norm.then_some(policy.obs_clip),
            returns: ReturnNorm::default(),
            progress: 0.0,
            critic: trainee.inference(),
            storage: ReplayStorage::new(schema, ppo.frames_per_update),
            advantage: Vec::new(),
            value_target: Vec::new(),
            config: ppo.clone(),
            schema: schema.clone(),
            sampler,
            trainee,
            flat,
        })
    }

    /// Whether minibatches run on the fused path.
    pub fn fused(&self) -> bool {
        self.flat.is_some()
    }

    /// The critic's value of every position of `chunk` (recurrent mode over `[E, T]` from its
    /// stored states) and, where a trajectory is cut but did not terminate, the value of the
    /// next observation (one sequential step from the post-step state; 0 elsewhere).
    pub(crate) fn critic_pass(&self, chunk: &Chunk) -> (Vec<f32>, Vec<f32>) {
        let s = &self.schema;
        let (t, d, lh) = (s.steps, s.obs_dim, s.num_layers * s.hidden_size);
        let rows: Vec<usize> = (0..s.envs * t)
            .filter(|&p| {
                let tt = p % t;
                let same_next = tt + 1 < t && chunk.traj_ids[p + 1] == chunk.traj_ids[p];
                needs_bootstrap(tt, t, chunk.next_done[p] == 1, same_next)
                    && chunk.next_terminated[p] == 0
            })
            .collect();
        // The bootstrap values at `rows` (none to compute without rows).
        let (value, boot) = if let Some(flat) = &self.flat {
            // Every row starts from its stored state (recurrent mode's segment starts).
            let start: Vec<bool> = (chunk.is_init.iter().enumerate())
                .map(|(p, &x)| x == 1 || p % t == 0)
                .collect();
            let (value, next_h, next_c) = flat.values(
                t,
                &chunk.observation,
                &start,
                &chunk.rs_h,
                chunk.rs_c.as_deref(),
                None,
            );
            let boot = (!rows.is_empty()).then(|| {
                flat.values(
                    1,
                    &gather(&chunk.next_observation, &rows, d),
                    &vec![true; rows.len()],
                    &gather(&next_h, &rows, lh),
                    next_c.map(|c| gather(&c, &rows, lh)).as_deref(),
                    None,
                )
                .0
            });
            (value, boot)
        } else {
            let out = (self.critic.forward_chunk(chunk, s)).expect("chunks match the policy");
            let boot = (!rows.is_empty()).then(|| {
                let boot = step_at_cut(
                    &self.critic,
                    gather(&chunk.next_observation, &rows, d),
                    gather(&host(out.next.rs_h), &rows, lh),
                    out.next.rs_c.map(|c| gather(&host(c), &rows, lh)),
                );
                host(boot.expect("chunks match the policy").value)
            });
            (host(out.value), boot)
        };
        let mut next_value = vec![0.0f32; s.envs * t];
        for (&p, v) in rows.iter().zip(boot.unwrap_or_default()) {
            next_value[p] = v;
        }
        (value, next_value)
    }

    /// The minibatch's slices, mask, real-step count and advantages normalised over its real
    /// steps (both update paths start here).
    fn prepare<'a>(&'a self, b: &'a SampledBatch) -> (SliceBatch<'a>, Vec<f32>, f32, Vec<f32>) {
        let sb = SliceBatch::new(&self.storage, b, self.config.slice_len);
        let mask: Vec<f32> = sb.mask().iter().map(|&m| m as u8 as f32).collect();
        let count: f32 = mask.iter().sum();
        let adv_raw = sb.gather(&self.advantage, 1);
        let mean = adv_raw.iter().zip(&mask).map(|(x, m)| x * m).sum::<f32>() / count;
        let var = adv_raw
            .iter()
            .zip(&mask)
            .map(|(x, m)| (x - mean).powi(2) * m)
            .sum::<f32>()
            / count;
        let adv: Vec<f32> = adv_raw
            .iter()
            .map(|x| (x - mean) / (var.sqrt() + 1e-8))
            .collect();
        (sb, mask, count, adv)
    }

    /// The loss coefficients and learning rate at the run's progress.
    fn schedules(&self) -> (LossConfig, f64) {
        let c = &self.config;
        let cfg = LossConfig {
            clip_eps: c.clip_schedule.at(c.clip_eps as f64, self.progress) as f32,
            value_coef: c.value_coef,
            entropy_coef: c.entropy_schedule.at(c.entropy_coef as f64, self.progress) as f32,
        };
        (cfg, c.lr_schedule.at(c.lr, self.progress))
    }

    /// One minibatch on the fused path (see [`crate::algo::ppo::flat`]).
    fn flat_minibatch_step(&mut self, b: &SampledBatch) -> UpdateStats {
        let (mut outcome, lr) = self.flat_loss(b);
        let max_norm = self.config.max_grad_norm;
        let flat = self.flat.as_mut().expect("the fused path is on");
        let grad_norm = profile::time("fused.optimizer", || {
            flat.apply(&mut outcome.grads, lr, max_norm)
        });
        UpdateStats {
            grad_norm,
            ..outcome.stats
        }
    }

    /// The minibatch's loss and gradients on the fused path, and the learning rate of its
    /// step.
    pub(crate) fn flat_loss(&self, b: &SampledBatch) -> (Outcome, f64) {
        let (sb, _, _, adv) = self.prepare(b);
        let s = &self.schema;
        let inputs = sb.inputs(
            InitialState::Stored,
            s.num_layers,
            s.hidden_size,
            s.cell.has_cell_state(),
        );
        let batch = Batch {
            rows: sb.rows,
            len: sb.len,
            obs: &inputs.obs,
            start: &inputs.is_init,
            rs_h: &inputs.rs_h,
            rs_c: inputs.rs_c.as_deref(),
            action: &sb.gather(&self.storage.action, s.action_dim()),
            old_logp: &sb.gather(&self.storage.sample_log_prob, 1),
            target: &sb.gather(&self.value_target, 1),
            adv: &adv,
            mask: sb.mask(),
        };
        let (cfg, lr) = self.schedules();
        let flat = self.flat.as_ref().expect("the fused path is on");
        (flat.loss(&batch, cfg), lr)
    }

    /// One minibatch on burn's path.
    fn minibatch_step(&mut self, b: &SampledBatch) -> anyhow::Result<UpdateStats> {
        let (loss, stats) = profile::time("burn.loss", || self.burn_loss(b));
        let lr = self.schedules().1;
        let max_norm = self.config.max_grad_norm;
        let grad_norm = profile::time("burn.backward_step", || {
            self.trainee.step(loss, lr, max_norm)
        });
        Ok(UpdateStats { grad_norm, ..stats })
    }

    /// The minibatch's loss through burn's autodiff, and its statistics (no gradient norm).
    pub(crate) fn burn_loss(&self, b: &SampledBatch) -> (Tensor<B, 1>, UpdateStats) {
        let s = &self.schema;
        let (sb, mask, count, adv) = self.prepare(b);
        let device = self.trainee.device();
        let t3 = |v: Vec<f32>| tensor3(v, sb.rows, sb.len, 1, &device);
        let old_logp = t3(sb.gather(&self.storage.sample_log_prob, 1));
        let target = t3(sb.gather(&self.value_target, 1));
        let adv_t = t3(adv);
        let mask_t = t3(mask);

        let has_cell = s.cell.has_cell_state();
        let inputs = sb.inputs(InitialState::Stored, s.num_layers, s.hidden_size, has_cell);
        let out = inputs.forward(&self.trainee.model, 0, None);
        let action = self.trainee.model.action();
        let logp = sb.log_prob(action, out.head.clone(), 0, &device);
        let entropy = match action {
            ActionSpec::Discrete { .. } => categorical_entropy(out.head),
            ActionSpec::MultiDiscrete { nvec } => multi_categorical_entropy(out.head, nvec),
            ActionSpec::Continuous { .. } => gaussian_entropy(out.head, s.action_dim()),
        };
        let masked_mean = |x: Tensor<B, 3>| (x * mask_t.clone()).sum() / count;
        let log_ratio = logp - old_logp;
        let ratio = log_ratio.clone().exp();
        let cfg = self.schedules().0;
        let (eps, entropy_coef) = (cfg.clip_eps, cfg.entropy_coef);
        let surrogate = (ratio.clone() * adv_t.clone())
            .min_pair(ratio.clone().clamp(1.0 - eps, 1.0 + eps) * adv_t);
        let policy_loss = masked_mean(surrogate).neg();
        let value_loss = masked_mean((out.value - target).powi_scalar(2)) * 0.5;
        let entropy_mean = masked_mean(entropy);
        let loss = policy_loss.clone() + value_loss.clone() * self.config.value_coef
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
}

/// The fused update of `model` where `path` and the model allow it; an error names the
/// setting that keeps `path = "fused"` from running.
fn flat_update<B: AutodiffBackend>(
    model: &Policy<B>,
    path: UpdatePath,
) -> anyhow::Result<Option<FlatUpdate>> {
    if path == UpdatePath::Burn {
        return Ok(None);
    }
    match (unsupported(model), path) {
        (None, _) => Ok(Some(FlatUpdate::new(model))),
        (Some(why), UpdatePath::Fused) => {
            anyhow::bail!("ppo.update = \"fused\" cannot run this policy: {why}")
        }
        (Some(_), _) => Ok(None),
    }
}

impl<B: AutodiffBackend> Algorithm<B> for Ppo<B> {
    /// Computes the chunk's advantages with the current critic and stores both.
    fn add_chunk(&mut self, chunk: &Chunk) {
        let t = self.schema.steps;
        let (value, next_value) = profile::time("critic", || self.critic_pass(chunk));
        let _gae = Phase::start("gae");
        let terminated: Vec<bool> = chunk.next_terminated.iter().map(|&x| x == 1).collect();
        let done: Vec<bool> = chunk.next_done.iter().map(|&x| x == 1).collect();
        let c = &self.config;
        let scale = c
            .reward_norm
            .then(|| self.returns.update(chunk, c.gamma as f64));
        let reward: Vec<f32> = (chunk.next_reward.iter())
            .map(|&r| scale.map_or(r, |s| (r * s).clamp(-10.0, 10.0)) * c.reward_scale)
            .collect();
        let adv = gae(&GaeInput {
            steps: t,
            reward: &reward,
            value: &value,
            next_value: &next_value,
            terminated: &terminated,
            done: &done,
            traj_ids: &chunk.traj_ids,
            gamma: self.config.gamma,
            lambda: self.config.gae_lambda,
        });
        // Storage positions follow insertion order (the storage is emptied after each update).
        debug_assert_eq!(self.storage.len(), self.advantage.len());
        self.storage.extend(chunk);
        self.advantage.extend(adv.advantage);
        self.value_target.extend(adv.value_target);
    }

    /// Once `frames_per_update` frames are stored.
    fn ready(&self) -> bool {
        self.storage.len() >= self.config.frames_per_update
    }

    /// Trains on everything stored, then empties the storage.
    fn update(&mut self) -> anyhow::Result<UpdateStats> {
        let mut minibatches = Vec::new();
        for _ in 0..self.config.epochs {
            for batch in self.sampler.epoch(&self.storage)? {
                let _minibatch = Phase::start("minibatch");
                minibatches.push(match self.flat {
                    Some(_) => self.flat_minibatch_step(&batch),
                    None => self.minibatch_step(&batch)?,
                });
            }
        }
        if let Some(flat) = &self.flat {
            let _sync = Phase::start("sync");
            self.trainee.model = flat.finish(self.trainee.model.clone());
        }
        let stats = UpdateStats::mean(&minibatches);
        if let Some(clip) = self.obs_norm {
            let mut obs = self.trainee.model.obs_stats();
            obs.merge(&self.storage.observation[..self.storage.len() * self.schema.obs_dim]);
            self.trainee.model = self.trainee.model.clone().with_obs_stats(&obs, clip);
            if let Some(flat) = &mut self.flat {
                flat.set_obs_norm(&self.trainee.model);
            }
        }
        self.storage.clear();
        self.advantage.clear();
        self.value_target.clear();
        self.critic = self.trainee.inference();
        Ok(stats)
    }

    fn off_policy(&self) -> bool {
        false
    }

    fn set_progress(&mut self, progress: f64) {
        self.progress = progress;
    }
}

impl<B: AutodiffBackend> Checkpointed<B> for Ppo<B> {
    fn model(&self) -> &Model<B> {
        &self.trainee.model
    }

    fn save_state(&self) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
        let flat = self.flat.as_ref().map(|f| (f.layout(), &f.adam));
        self.trainee.save_state(flat)
    }

    fn load_state(&mut self, model: Vec<u8>, optim: Vec<u8>) -> anyhow::Result<()> {
        self.trainee.load_state(model, optim)?;
        if self.flat.is_some() {
            // The loaded record brings its own parameter ids: lay the parameters out anew.
            let mut flat = FlatUpdate::new(&self.trainee.model);
            flat.adam = self.trainee.flat_adam(flat.layout());
            self.flat = Some(flat);
        }
        self.critic = self.trainee.inference();
        Ok(())
    }

    /// The sampler's position and the reward normalizer's statistics.
    fn host_state(&self) -> Vec<u8> {
        encode(&(self.sampler.state(), &self.returns))
    }

    fn load_host_state(&mut self, state: &[u8]) -> anyhow::Result<()> {
        if !state.is_empty() {
            let (sampler, returns) = decode(state)?;
            self.sampler.set_state(sampler);
            self.returns = returns;
        }
        Ok(())
    }
}

#[cfg(test)]
impl Ppo<CpuAutodiff> {
    /// The first minibatch of a new epoch over the stored frames.
    pub(crate) fn next_batch(&mut self) -> SampledBatch {
        self.sampler.epoch(&self.storage).unwrap().remove(0)
    }
}

#[cfg(test)]
mod tests {
    use common::backend::cpu_device;
    use common::envs::{ActionRef, Env, Registry, Space, StepResult};
    use common::policy::init_policy;
    use common::policy::{chunk_schema, policy_config_for_spec};
    use common::recurrent::CellKind;
    use common::rollout::{Actor, ActorConfig};
    use common::weights::{from_blob, to_blob};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    /// A fully observed task with a two-component action: match the cue `(c0, c1)`, shown as
    /// one-hots `[2 + 3]`, with action `(a0 in 0..2, a1 in 0..3)`; reward 0.5 per matching
    /// component, 8 steps per episode (random: 3.33, perfect: 8).
    struct MatchTwo {
        rng: StdRng,
        cue: (usize, usize),
        t: u32,
    }

    impl MatchTwo {
        fn show(&mut self, obs: &mut [f32]) {
            self.cue = (self.rng.random_range(0..2), self.rng.random_range(0..3));
            obs.fill(0.0);
            obs[self.cue.0] = 1.0;
            obs[2 + self.cue.1] = 1.0;
        }
    }

    impl Env for MatchTwo {
        fn id(&self) -> &str {
            "MatchTwo-v0"
        }
        fn observation_space(&self) -> Space {
            Space::Box {
                low: vec![0.0; 5],
                high: vec![1.0; 5],
            }
        }
        fn action_space(&self) -> Space {
            Space::MultiDiscrete { nvec: vec![2, 3] }
        }
        fn reset(&mut self, seed: u64, obs: &mut [f32]) {
            self.rng = StdRng::seed_from_u64(seed);
            self.t = 0;
            self.show(obs);
        }
        fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
            let ActionRef::MultiDiscrete(&[a0, a1]) = action else {
                panic!("MatchTwo-v0: two indices expected, got {action:?}");
            };
            let reward = 0.5 * f64::from(a0 as usize == self.cue.0)
                + 0.5 * f64::from(a1 as usize == self.cue.1);
            self.t += 1;
            self.show(obs);
            StepResult {
                reward,
                terminated: self.t == 8,
                truncated: false,
            }
        }
    }

    #[test]
    fn the_factorized_multi_discrete_head_learns_on_burns_path() {
        multi_discrete_learns(UpdatePath::Burn);
    }

    #[test]
    fn the_factorized_multi_discrete_head_learns_on_the_fused_path() {
        multi_discrete_learns(UpdatePath::Fused);
    }

    fn multi_discrete_learns(update: UpdatePath) {
        let mut registry = Registry::empty();
        registry
            .register("MatchTwo-v0", None, || MatchTwo {
                rng: StdRng::seed_from_u64(0),
                cue: (0, 0),
                t: 0,
            })
            .unwrap();
        let spec = registry.spec("MatchTwo-v0").unwrap();
        let pc = policy_config_for_spec(&spec)
            .with_cell(CellKind::Gru)
            .with_hidden_size(16)
            .with_encoder(vec![16]);
        assert_eq!(pc.action.head_size(), 5);
        let (envs, steps) = (16, 16);
        let schema = chunk_schema(&pc, envs, steps);
        let config = PpoSection {
            frames_per_update: envs * steps,
            epochs: 4,
            slice_len: 8,
            num_slices: 16,
            lr: 3e-3,
            gamma: 0.9,
            gae_lambda: 0.95,
            clip_eps: 0.2,
            value_coef: 0.5,
            entropy_coef: 0.0,
            max_grad_norm: 0.5,
            clip_value: false,
            reward_scale: 1.0,
            reward_norm: false,
            lr_schedule: Default::default(),
            clip_schedule: Default::default(),
            entropy_schedule: Default::default(),
            update,
            // Each path learns on its own slicing: the fused one on packed rows.
            pack_slices: update == UpdatePath::Fused,
        };
        let mut ppo = Ppo::<CpuAutodiff>::new(&pc, &config, &schema, 1, &cpu_device()).unwrap();
        assert_eq!(ppo.fused(), update == UpdatePath::Fused);
        let actor_config = ActorConfig::new("MatchTwo-v0", envs, steps, 5);
        let venv = registry.make_vec("MatchTwo-v0", envs, 5).unwrap();
        let mut actor = Actor::with_envs(actor_config, init_policy(&pc, 1).unwrap(), venv).unwrap();
        let mut returns = Vec::new();
        for version in 1..=60u64 {
            let chunk = actor.collect().unwrap();
            ppo.add_chunk(&chunk);
            assert!(ppo.ready());
            let stats = ppo.update().unwrap();
            assert!(stats.loss.is_finite(), "{stats:?}");
            let (policy, _) =
                from_blob(actor.policy().clone(), &to_blob(ppo.model(), version)).unwrap();
            actor.set_policy(policy, version);
            returns.extend(actor.take_finished().into_iter().map(|e| e.ret));
        }
        let first: f64 = returns[..32].iter().sum::<f64>() / 32.0;
        let last: f64 = returns[returns.len() - 32..].iter().sum::<f64>() / 32.0;
        assert!(first < 4.5, "random start should score ~3.3, got {first}");
        assert!(last > 6.5, "no learning: {first} -> {last}");
    }
}

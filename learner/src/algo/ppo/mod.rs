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
//!
//! The critic's pass and the minibatch steps run on one of two update paths behind
//! [`update::Update`], chosen once when PPO is built from `ppo.update`: burn's autodiff
//! ([`autodiff`]) or the flat update ([`flat`]: one flat parameter, gradient and Adam buffer
//! with a hand-written backward).

pub mod autodiff;
pub mod flat;
pub mod gae;
mod novelty;
pub mod update;

use burn::tensor::backend::AutodiffBackend;
use common::backend::CpuAutodiff;
use common::checkpoint::Checkpointed;
use common::chunk::{Chunk, ChunkSchema};
use common::policy::PolicyConfig;
use std::collections::HashMap;

use crate::algo::optim::{decode, encode, Model, Trainee};
use crate::algo::ppo::autodiff::AutodiffUpdate;
use crate::algo::ppo::flat::{unsupported, FlatUpdate};
use crate::algo::ppo::gae::{gae, needs_bootstrap, GaeInput};
use crate::algo::ppo::novelty::Novelty;
use crate::algo::ppo::update::{Minibatch, Rollout, Update};
use crate::algo::replay_buffer::ReplayStorage;
use crate::algo::slice_sampler::{ShardSamplers, SliceSampler, SliceSamplerConfig};
use crate::algo::Algorithm;
use crate::config::{PpoSection, UpdatePath};
use crate::run::metrics::UpdateStats;
use crate::run::profile::{self, Phase};

/// The learner's model, optimizer and on-policy storage, training on backend `B`. An update's
/// statistics are means over its minibatches (every [`UpdateStats`] field but `q_mean`).
pub struct Ppo<B: AutodiffBackend = CpuAutodiff> {
    trainee: Trainee<B>,
    /// The update path (`ppo.update`).
    path: Box<dyn Update<B>>,
    config: PpoSection,
    schema: ChunkSchema,
    rollout: Rollout,
    sampler: SliceSampler,
    /// Keep the model's observation normalizer up to date, clipping at this bound.
    obs_norm: Option<f32>,
    /// Running discounted returns and their variance (`ppo.reward_norm`).
    returns: ReturnNorm,
    /// The view counts of `ppo.novelty_bonus` (per open episode, or run-wide).
    novelty: Novelty,
    /// The run's progress in `[0, 1]` (schedules).
    progress: f64,
    /// The seed it was built with (its sampler's; `--as-ranks` derives the shards' from it).
    seed: u64,
    /// `--as-ranks N`: the rollout as N ranks' shards, each sampled as its rank would.
    shards: Option<ShardSamplers>,
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
        let path = update_path(&trainee, ppo.update)?;
        tracing::info!(
            "PPO minibatches run on the {} update (ppo.update = \"{}\")",
            path.name(),
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
        let ranks = crate::ranks::world().size;
        if ranks > 1 {
            check_group(ppo, ranks)?;
        }
        let sampler = SliceSampler::new(sampler_config(ppo, ppo.num_slices, seed))?;
        Ok(Ppo {
            seed,
            shards: None,
            obs_norm: policy.obs_norm.then_some(policy.obs_clip),
            returns: ReturnNorm::default(),
            novelty: Novelty::default(),
            progress: 0.0,
            rollout: Rollout {
                frames: ReplayStorage::new(schema, ppo.frames_per_update),
                advantage: Vec::new(),
                value_target: Vec::new(),
            },
            config: ppo.clone(),
            schema: schema.clone(),
            sampler,
            trainee,
            path,
        })
    }

    /// The critic's value of every position of `chunk` (recurrent mode over `[E, T]` from its
    /// stored states) and, where a trajectory is cut but did not terminate, the value of the
    /// next observation (one sequential step from the post-step state; 0 elsewhere).
    pub(crate) fn critic_pass(&self, chunk: &Chunk) -> (Vec<f32>, Vec<f32>) {
        let s = &self.schema;
        let t = s.steps;
        let rows: Vec<usize> = (0..s.envs * t)
            .filter(|&p| {
                let tt = p % t;
                let same_next = tt + 1 < t && chunk.traj_ids[p + 1] == chunk.traj_ids[p];
                needs_bootstrap(tt, t, chunk.next_done[p] == 1, same_next)
                    && chunk.next_terminated[p] == 0
            })
            .collect();
        // The values, and the bootstrap values at `rows` (none to compute without rows).
        let (value, boot) = self.path.critic(chunk, s, &rows);
        let mut next_value = vec![0.0f32; s.envs * t];
        for (&p, v) in rows.iter().zip(boot.unwrap_or_default()) {
            next_value[p] = v;
        }
        (value, next_value)
    }
}

/// The sampler of one rank (or one process) taking `num_slices` slices per minibatch.
fn sampler_config(ppo: &PpoSection, num_slices: usize, seed: u64) -> SliceSamplerConfig {
    SliceSamplerConfig {
        pack: ppo.pack_slices,
        ..SliceSamplerConfig::padded(ppo.slice_len, num_slices, false, seed ^ 0x5a1ce)
    }
}

/// Why `ppo` (a rank's share, or `--as-ranks`' whole) cannot train as a group of `ranks`:
/// every rank must take as many minibatches per epoch, one all-reduce each, which packed
/// slices guarantee (each rank's rollout tiles into the same number of slices).
fn check_group(ppo: &PpoSection, ranks: usize) -> anyhow::Result<()> {
    anyhow::ensure!(
        ppo.pack_slices,
        "ppo.pack_slices = false on {ranks} learner ranks: every rank must take as many \
         minibatches per epoch (one all-reduce each), which only packed slices guarantee; set \
         ppo.pack_slices = true"
    );
    Ok(())
}

/// The count, per-feature mean and variance of every learner rank's observations `x`
/// (`[N, dim]` here), which every rank folds into its normalizer alike.
fn group_moments(
    x: &[f32],
    dim: usize,
) -> Result<(f64, Vec<f64>, Vec<f64>), crate::ranks::RankLost> {
    let mut sums = vec![0.0f64; 1 + 2 * dim];
    sums[0] = (x.len() / dim) as f64;
    for row in x.chunks_exact(dim) {
        for (j, &v) in row.iter().enumerate() {
            sums[1 + j] += v as f64;
            sums[1 + dim + j] += (v as f64).powi(2);
        }
    }
    crate::ranks::all_reduce_sum(&mut sums)?;
    let n = sums[0].max(1.0);
    let mean: Vec<f64> = sums[1..=dim].iter().map(|s| s / n).collect();
    let var = (mean.iter().zip(&sums[1 + dim..]))
        .map(|(m, s2)| (s2 / n - m * m).max(0.0))
        .collect();
    Ok((sums[0], mean, var))
}

/// The update path `path` selects for `trainee`'s model, built from the model and its optimizer
/// (when PPO is built, and anew after a checkpoint load); an error names the setting that keeps
/// `path = "fused"` from running.
fn update_path<B: AutodiffBackend>(
    trainee: &Trainee<B>,
    path: UpdatePath,
) -> anyhow::Result<Box<dyn Update<B>>> {
    let why = unsupported(&trainee.model);
    let flat = match (path, why) {
        (UpdatePath::Burn, _) => false,
        (UpdatePath::Auto, Some(why)) => {
            tracing::info!("ppo.update = \"auto\": burn's autodiff update, because of {why}");
            false
        }
        (UpdatePath::Fused, Some(why)) => {
            anyhow::bail!("ppo.update = \"fused\" cannot run this policy: {why}")
        }
        (_, None) => true,
    };
    Ok(if flat {
        Box::new(FlatUpdate::of(trainee))
    } else {
        Box::new(AutodiffUpdate::new(trainee))
    })
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
        let mut reward: Vec<f32> = (chunk.next_reward.iter())
            .map(|&r| scale.map_or(r, |s| (r * s).clamp(-10.0, 10.0)) * c.reward_scale)
            .collect();
        if c.novelty_bonus > 0.0 {
            let beta = c.novelty_schedule.at(c.novelty_bonus as f64, self.progress) as f32;
            let visits = self.novelty.visit(chunk, &self.schema, c.novelty_counts);
            reward
                .iter_mut()
                .zip(visits)
                .for_each(|(r, v)| *r += beta * v);
        }
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
        self.rollout.push(chunk, adv.advantage, adv.value_target);
    }

    /// Once `frames_per_update` frames are stored.
    fn ready(&self) -> bool {
        self.rollout.frames.len() >= self.config.frames_per_update
    }

    /// Trains on everything stored, then empties the storage.
    fn update(&mut self) -> anyhow::Result<UpdateStats> {
        let mut minibatches = Vec::new();
        for _ in 0..self.config.epochs {
            let batches = match self.shards.as_mut() {
                Some(shards) => shards.epoch(&self.rollout.frames)?,
                None => self.sampler.epoch(&self.rollout.frames)?,
            };
            // A group's minibatches (several ranks, --as-ranks): the whole epoch's advantage
            // statistics first, in one all-reduce.
            let group = self.shards.is_some() || crate::ranks::world().size > 1;
            let moments = group
                .then(|| update::group_moments(&self.rollout, &batches, self.config.slice_len))
                .transpose()?;
            for (i, batch) in batches.iter().enumerate() {
                let _minibatch = Phase::start("minibatch");
                let mut mb = Minibatch::new(&self.rollout, batch, &self.config, self.progress);
                mb.group = moments.as_ref().map(|m| m[i]);
                minibatches.push(self.path.step(&mut self.trainee, &mb)?);
            }
        }
        let stats = UpdateStats::mean(&minibatches);
        if let Some(clip) = self.obs_norm {
            let mut obs = self.trainee.model.obs_stats();
            let frames = &self.rollout.frames;
            let x = &frames.observation[..frames.len() * self.schema.obs_dim];
            match (crate::ranks::world().size, &self.shards) {
                (1, None) => obs.merge(x),
                _ => {
                    let (n, mean, var) = group_moments(x, self.schema.obs_dim)?;
                    obs.merge_moments(n, &mean, &var);
                }
            }
            self.trainee.model = self.trainee.model.clone().with_obs_stats(&obs, clip);
        }
        self.path.finish(&mut self.trainee);
        self.rollout.clear();
        Ok(stats)
    }

    fn off_policy(&self) -> bool {
        false
    }

    fn set_progress(&mut self, progress: f64) {
        self.progress = progress;
    }

    /// Each update's rollout as `ranks` equal shards (`frames_per_update / ranks` frames each,
    /// stored shard after shard), shard `k` sampled with rank `k`'s seed and its share of
    /// `num_slices`. Refused with `ppo.reward_norm` (ranks keep one return normalizer each).
    fn as_ranks(&mut self, ranks: usize, _shard_frames: &[usize]) -> anyhow::Result<()> {
        let c = &self.config;
        check_group(c, ranks)?;
        anyhow::ensure!(
            !c.reward_norm,
            "ppo.reward_norm = true with --as-ranks {ranks}: each rank keeps its own return \
             normalizer and one process one; set ppo.reward_norm = false"
        );
        let f = c.frames_per_update / ranks;
        let shards = (0..ranks).map(|k| k * f..(k + 1) * f).collect();
        let seed = self.seed;
        self.shards = Some(ShardSamplers::new(shards, |k| {
            sampler_config(c, c.num_slices / ranks, crate::ranks::rank_seed(seed, k))
        })?);
        Ok(())
    }
}

impl<B: AutodiffBackend> Checkpointed<B> for Ppo<B> {
    fn model(&self) -> &Model<B> {
        &self.trainee.model
    }

    fn save_state(&self) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
        self.path.save(&self.trainee)
    }

    fn load_state(&mut self, model: Vec<u8>, optim: Vec<u8>) -> anyhow::Result<()> {
        self.trainee.load_state(model, optim)?;
        // The loaded record brings its own parameter ids: the path is built anew from it.
        self.path = update_path(&self.trainee, self.config.update)?;
        Ok(())
    }

    /// The sampler's position, the reward normalizer's statistics and the view counts of
    /// `ppo.novelty_bonus`.
    fn host_state(&self) -> Vec<u8> {
        encode(&(self.sampler.state(), &self.returns, &self.novelty))
    }

    /// Checkpoints from before the view counts hold the first two parts only; a state that
    /// is neither reports the current layout's error.
    fn load_host_state(&mut self, state: &[u8]) -> anyhow::Result<()> {
        if !state.is_empty() {
            let (sampler, returns, novelty) = decode(state).or_else(|e| {
                decode(state)
                    .map(|(s, r)| (s, r, Novelty::default()))
                    .map_err(|_| e)
            })?;
            self.sampler.set_state(sampler);
            self.returns = returns;
            self.novelty = novelty;
        }
        Ok(())
    }
}

#[cfg(test)]
use crate::algo::slice_sampler::SampledBatch;

#[cfg(test)]
impl Ppo<CpuAutodiff> {
    /// The first minibatch of a new epoch over the stored frames.
    pub(crate) fn next_batch(&mut self) -> SampledBatch {
        self.sampler.epoch(&self.rollout.frames).unwrap().remove(0)
    }

    /// `batch` as the update steps on it now.
    pub(crate) fn minibatch<'a>(&'a self, batch: &'a SampledBatch) -> Minibatch<'a> {
        Minibatch::new(&self.rollout, batch, &self.config, self.progress)
    }
}

#[cfg(test)]
mod tests {
    use common::backend::cpu_device;
    use common::envs::{ActionRef, Env, Registry, Space, StepResult};
    use common::policy::init_policy;
    use common::policy::{chunk_schema, policy_config_for_spec};
    use common::rollout::{Actor, ActorConfig};
    use common::weights::{from_blob, to_blob};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use recur_rnn::CellKind;

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

    /// A novelty bonus reaches the value targets, and its open episodes' counts cross a
    /// checkpoint's host state (an old state without them loads too).
    #[test]
    fn the_novelty_bonus_shapes_value_targets_and_its_counts_resume() {
        let (registry, pc) = match_two();
        // 12-step chunks of 8-step episodes: every chunk ends inside an open episode.
        let (envs, steps) = (4, 12);
        let schema = chunk_schema(&pc, envs, steps);
        let config = |bonus: f32| PpoSection {
            novelty_bonus: bonus,
            ..match_two_ppo(envs * steps, UpdatePath::Burn)
        };
        let new = |bonus| Ppo::<CpuAutodiff>::new(&pc, &config(bonus), &schema, 1, &cpu_device());
        let (mut plain, mut shaped, mut resumed) =
            (new(0.0).unwrap(), new(0.5).unwrap(), new(0.5).unwrap());
        let actor_config = ActorConfig::new("MatchTwo-v0", envs, steps, 5);
        let venv = registry.make_vec("MatchTwo-v0", envs, 5).unwrap();
        let mut actor = Actor::with_envs(actor_config, init_policy(&pc, 1).unwrap(), venv).unwrap();
        let first = actor.collect().unwrap();
        plain.add_chunk(&first);
        shaped.add_chunk(&first);
        // Same critic, same chunk: the bonus (at least 0.5 / sqrt(8) a step) raises every
        // value target.
        let (p, s) = (&plain.rollout.value_target, &shaped.rollout.value_target);
        assert!(p.iter().zip(s).all(|(p, s)| s - p > 0.1), "{p:?}\n{s:?}");
        // The second chunk's open episodes go on counting from the first's.
        resumed.load_host_state(&shaped.host_state()).unwrap();
        assert_eq!(resumed.novelty, shaped.novelty);
        assert!(resumed.novelty.open() > 0);
        let second = actor.collect().unwrap();
        shaped.add_chunk(&second);
        resumed.add_chunk(&second);
        assert_eq!(
            resumed.rollout.value_target,
            shaped.rollout.value_target[envs * steps..]
        );
        assert_eq!(resumed.novelty, shaped.novelty);
        // A host state written before the counts existed: the sampler and normalizer alone.
        let old = encode(&(plain.sampler.state(), &plain.returns));
        let mut from_old = new(0.5).unwrap();
        from_old.load_host_state(&old).unwrap();
        assert_eq!(from_old.novelty.open(), 0);
    }

    fn match_two() -> (Registry, PolicyConfig) {
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
        (registry, pc)
    }

    fn match_two_ppo(frames_per_update: usize, update: UpdatePath) -> PpoSection {
        PpoSection {
            frames_per_update,
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
            novelty_bonus: 0.0,
            novelty_schedule: Default::default(),
            novelty_counts: Default::default(),
        }
    }

    fn multi_discrete_learns(update: UpdatePath) {
        let (registry, pc) = match_two();
        assert_eq!(pc.action.head_size(), 5);
        let (envs, steps) = (16, 16);
        let schema = chunk_schema(&pc, envs, steps);
        let config = match_two_ppo(envs * steps, update);
        let mut ppo = Ppo::<CpuAutodiff>::new(&pc, &config, &schema, 1, &cpu_device()).unwrap();
        assert_eq!(ppo.path.name(), update.name());
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

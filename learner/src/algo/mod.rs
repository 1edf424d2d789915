//! The algorithms: the [`Algorithm`] interface the run loops drive, and the learner a config
//! builds behind it ([`build`]), so that the training loop (online, with actors) and the
//! learner-only replay loop feed chunks and ask for updates without knowing which runs.
//!
//! - [`ppo`]: PPO with its advantages ([`ppo::gae`]) and its two update paths behind
//!   [`ppo::update::Update`] (burn's autodiff, [`ppo::autodiff`], and [`ppo::flat`]: one flat
//!   parameter, gradient and Adam buffer with a hand-written backward);
//! - [`dqn`]: recurrent DQN (R2D2-style burn-in) on stored sequences; [`bc`]: behaviour cloning;
//! - [`replay_buffer`]: the storage of received steps, which PPO, DQN and BC sample from;
//!   [`slice_sampler`]: the slices of it a batch takes; [`slices`]: what the algorithms share
//!   over sampled slices (a batch as tensors, the recurrent-mode forward with burn-in, the step
//!   at a trajectory's cut, and the model DQN and BC train, [`slices::SliceTrainer`]);
//! - [`optim`]: the trained model with its Adam optimizer ([`optim::Trainee`]), Polyak
//!   averaging, and the bytes of an algorithm's host state.

pub mod bc;
pub mod dqn;
pub mod optim;
pub mod ppo;
pub mod replay_buffer;
pub mod slice_sampler;
pub mod slices;

use burn::tensor::backend::AutodiffBackend;
use common::backend::CpuAutodiff;
use common::checkpoint::Checkpointed;
use common::chunk::{Chunk, ChunkSchema};
use common::policy::PolicyConfig;

use crate::config::AlgoConfig;
use crate::run::metrics::UpdateStats;
use bc::Bc;
use dqn::Dqn;
use ppo::Ppo;

/// A learner training on backend `B` (the CPU unless a `cuda` build picked CUDA).
pub type Learner<B = CpuAutodiff> = Box<dyn Algorithm<B>>;

/// What a learner is built from.
pub struct LearnerSpec<'a> {
    pub algo: &'a AlgoConfig,
    pub policy: &'a PolicyConfig,
    pub schema: &'a ChunkSchema,
    /// Replay capacity in frames (DQN, BC).
    pub capacity: usize,
    pub seed: u64,
}

/// The learner `spec` selects, its model on `device`.
pub fn build<B: AutodiffBackend>(
    spec: &LearnerSpec,
    device: &B::Device,
) -> anyhow::Result<Learner<B>> {
    let (policy, schema, capacity, seed) = (spec.policy, spec.schema, spec.capacity, spec.seed);
    Ok(match spec.algo {
        AlgoConfig::Ppo(ppo) => Box::new(Ppo::new(policy, ppo, schema, seed, device)?),
        AlgoConfig::Dqn(dqn) => Box::new(Dqn::new(policy, dqn, schema, capacity, seed, device)?),
        AlgoConfig::Bc(bc) => Box::new(Bc::new(policy, bc, schema, capacity, seed, device)?),
    })
}

/// A learning algorithm as the training loop (online, with actors) and the learner-only replay
/// loop drive it: chunks in, updates out, without knowing which algorithm runs.
pub trait Algorithm<B: AutodiffBackend>: Checkpointed<B> {
    /// Stores a chunk (PPO also computes its advantages).
    fn add_chunk(&mut self, chunk: &Chunk);

    /// Whether an update can run now.
    fn ready(&self) -> bool;

    /// One update, and the statistics the algorithm reports for it.
    fn update(&mut self) -> anyhow::Result<UpdateStats>;

    /// Whether chunks of any policy version are kept (on-policy learners drop stale ones).
    fn off_policy(&self) -> bool;

    /// The run's progress in `[0, 1]` (frames or updates done over the total), which
    /// hyperparameter schedules follow; called before each update. Ignored by default.
    fn set_progress(&mut self, _progress: f64) {}

    /// Trains in one process on the minibatches `ranks` learner ranks would take together
    /// (`recur-learner replay --as-ranks N`, the reference the rank tests hold a group to):
    /// the chunks come shard after shard (`shard_frames[k]` frames of rank `k`'s shard; PPO:
    /// each update's rollout, `frames_per_update / ranks` each), shard `k` is sampled with
    /// rank `k`'s seed and its share of the slices, and each minibatch is the shards' slices
    /// concatenated. Called before any chunk is added; refused by default, naming the algorithm.
    fn as_ranks(&mut self, ranks: usize, _shard_frames: &[usize]) -> anyhow::Result<()> {
        anyhow::bail!("this algorithm does not train as {ranks} learner ranks (only PPO and BC do)")
    }
}

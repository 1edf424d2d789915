//! The learner: the algorithm a config selects, built behind the [`Algorithm`] interface, so
//! that the training loop (online, with actors) and the learner-only replay loop feed chunks
//! and ask for updates without knowing which runs.

use burn::tensor::backend::AutodiffBackend;
use common::backend::CpuAutodiff;
use common::chunk::ChunkSchema;
use common::policy::PolicyConfig;

use crate::bc::Bc;
use crate::config::AlgoConfig;
use crate::dqn::Dqn;
use crate::optim::Algorithm;
use crate::ppo::Ppo;

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

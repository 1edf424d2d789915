//! The learner: the algorithm a config selects, built behind the [`Algorithm`] interface, so
//! that the training loop (online, with actors) and the learner-only replay loop feed chunks
//! and ask for updates without knowing which runs.

use std::ops::{Deref, DerefMut};

use burn::tensor::backend::AutodiffBackend;
use common::backend::{cpu_device, CpuAutodiff};
use common::chunk::ChunkSchema;
use common::policy::PolicyConfig;

use crate::bc::Bc;
use crate::config::AlgoConfig;
use crate::dqn::Dqn;
use crate::optim::Algorithm;
use crate::ppo::Ppo;

/// A learner training on backend `B` (the CPU unless a `cuda` build picked CUDA): the
/// [`Algorithm`] methods through it.
pub struct Learner<B: AutodiffBackend = CpuAutodiff>(Box<dyn Algorithm<B>>);

/// What a learner is built from.
pub struct LearnerSpec<'a> {
    pub algo: &'a AlgoConfig,
    pub policy: &'a PolicyConfig,
    pub schema: &'a ChunkSchema,
    /// Replay capacity in frames (DQN, BC).
    pub capacity: usize,
    pub seed: u64,
}

impl Learner {
    /// A learner on the CPU.
    pub fn new(spec: &LearnerSpec) -> anyhow::Result<Self> {
        Self::on_device(spec, &cpu_device())
    }
}

impl<B: AutodiffBackend> Learner<B> {
    /// A learner whose model lives on `device`.
    pub fn on_device(spec: &LearnerSpec, device: &B::Device) -> anyhow::Result<Self> {
        let (policy, schema, capacity, seed) = (spec.policy, spec.schema, spec.capacity, spec.seed);
        Ok(Learner(match spec.algo {
            AlgoConfig::Ppo(ppo) => Box::new(Ppo::new(policy, ppo, schema, seed, device)?),
            AlgoConfig::Dqn(dqn) => {
                Box::new(Dqn::new(policy, dqn, schema, capacity, seed, device)?)
            }
            AlgoConfig::Bc(bc) => Box::new(Bc::new(policy, bc, schema, capacity, seed, device)?),
        }))
    }
}

impl<B: AutodiffBackend> Deref for Learner<B> {
    type Target = dyn Algorithm<B>;

    fn deref(&self) -> &Self::Target {
        self.0.as_ref()
    }
}

impl<B: AutodiffBackend> DerefMut for Learner<B> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.0.as_mut()
    }
}

/// What the checkpoint saves of a learner ([`common::checkpoint`]).
impl<B: AutodiffBackend> common::checkpoint::Checkpointed<B> for Learner<B> {
    fn model(&self) -> &common::policy::Policy<B> {
        self.0.model()
    }

    fn save_state(&self) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
        self.0.save_state()
    }

    fn load_state(&mut self, model: Vec<u8>, optim: Vec<u8>) -> anyhow::Result<()> {
        self.0.load_state(model, optim)
    }
}

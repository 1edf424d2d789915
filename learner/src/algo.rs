//! The learning algorithms behind one interface: the training loop (online, with actors) and
//! the learner-only replay loop feed chunks and ask for updates without knowing which runs.

use burn::tensor::backend::AutodiffBackend;
use common::backend::{cpu_device, CpuAutodiff};
use common::chunk::{Chunk, ChunkSchema};
use common::policy::PolicyConfig;

use crate::bc::Bc;
use crate::config::Algo;
use crate::dqn::Dqn;
use crate::optim::Model;
use crate::ppo::{Ppo, UpdateStats};

/// A learner training on backend `B` (the CPU unless a `cuda` build picked CUDA).
pub enum Learner<B: AutodiffBackend = CpuAutodiff> {
    Ppo(Box<Ppo<B>>),
    Dqn(Box<Dqn<B>>),
    Bc(Box<Bc<B>>),
}

/// What a learner is built from.
pub struct LearnerSpec<'a> {
    pub algo: Algo,
    pub policy: &'a PolicyConfig,
    pub schema: &'a ChunkSchema,
    pub ppo: Option<&'a crate::config::PpoSection>,
    pub dqn: Option<&'a crate::config::DqnSection>,
    pub bc: Option<&'a crate::config::BcSection>,
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
        let missing = |s: &str| anyhow::anyhow!("algo {} needs a [{s}] section", spec.algo.name());
        Ok(match spec.algo {
            Algo::Ppo => Learner::Ppo(Box::new(Ppo::new(
                spec.policy,
                spec.ppo.ok_or_else(|| missing("ppo"))?,
                spec.schema,
                spec.seed,
                device,
            )?)),
            Algo::Dqn => Learner::Dqn(Box::new(Dqn::new(
                spec.policy,
                spec.dqn.ok_or_else(|| missing("dqn"))?,
                spec.schema,
                spec.capacity,
                spec.seed,
                device,
            )?)),
            Algo::Bc => Learner::Bc(Box::new(Bc::new(
                spec.policy,
                spec.bc.ok_or_else(|| missing("bc"))?,
                spec.schema,
                spec.capacity,
                spec.seed,
                device,
            )?)),
        })
    }

    pub fn algo(&self) -> Algo {
        match self {
            Learner::Ppo(_) => Algo::Ppo,
            Learner::Dqn(_) => Algo::Dqn,
            Learner::Bc(_) => Algo::Bc,
        }
    }

    pub fn model(&self) -> &Model<B> {
        match self {
            Learner::Ppo(p) => p.model(),
            Learner::Dqn(d) => d.model(),
            Learner::Bc(b) => b.model(),
        }
    }

    /// Stores a chunk (PPO also computes its advantages).
    pub fn add_chunk(&mut self, chunk: &Chunk) {
        match self {
            Learner::Ppo(p) => p.add_chunk(chunk),
            Learner::Dqn(d) => d.add_chunk(chunk),
            Learner::Bc(b) => b.add_chunk(chunk),
        }
    }

    /// Off-policy learners keep chunks of any policy version.
    pub fn off_policy(&self) -> bool {
        !matches!(self, Learner::Ppo(_))
    }

    /// Whether an update can run now: PPO once `frames_per_update` frames are stored; DQN
    /// after `learning_starts`; BC always.
    pub fn ready(&self, frames_per_update: usize) -> bool {
        match self {
            Learner::Ppo(p) => p.stored() >= frames_per_update,
            Learner::Dqn(d) => d.ready(),
            Learner::Bc(b) => b.stored() > 0,
        }
    }

    /// One update: PPO's epochs over its storage, or `steps` gradient steps (DQN, BC), with
    /// the statistics averaged.
    pub fn update(&mut self, steps: usize) -> anyhow::Result<UpdateStats> {
        let step = |l: &mut Learner<B>| match l {
            Learner::Ppo(p) => p.update(),
            Learner::Dqn(d) => d.train_step(),
            Learner::Bc(b) => b.train_step(),
        };
        if matches!(self, Learner::Ppo(_)) || steps <= 1 {
            return step(self);
        }
        let mut sum = UpdateStats::default();
        for _ in 0..steps {
            let s = step(self)?;
            sum.loss += s.loss;
            sum.policy_loss += s.policy_loss;
            sum.value_loss += s.value_loss;
            sum.grad_norm += s.grad_norm;
            sum.q_mean += s.q_mean;
            sum.minibatches += 1;
        }
        let k = steps as f32;
        for v in [
            &mut sum.loss,
            &mut sum.policy_loss,
            &mut sum.value_loss,
            &mut sum.grad_norm,
            &mut sum.q_mean,
        ] {
            *v /= k;
        }
        Ok(sum)
    }

    pub fn save_state(&self) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
        match self {
            Learner::Ppo(p) => p.save_state(),
            Learner::Dqn(d) => d.save_state(),
            Learner::Bc(b) => b.save_state(),
        }
    }

    pub fn load_state(&mut self, model: Vec<u8>, optim: Vec<u8>) -> anyhow::Result<()> {
        match self {
            Learner::Ppo(p) => p.load_state(model, optim),
            Learner::Dqn(d) => d.load_state(model, optim),
            Learner::Bc(b) => b.load_state(model, optim),
        }
    }
}

/// What the checkpoint saves of a learner ([`common::checkpoint`]).
impl<B: AutodiffBackend> common::checkpoint::Checkpointed<B> for Learner<B> {
    fn model(&self) -> &Model<B> {
        Learner::model(self)
    }

    fn save_state(&self) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
        Learner::save_state(self)
    }

    fn load_state(&mut self, model: Vec<u8>, optim: Vec<u8>) -> anyhow::Result<()> {
        Learner::load_state(self, model, optim)
    }
}

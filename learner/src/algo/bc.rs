//! Behaviour cloning: maximise the log-probability of the recorded actions over sequence
//! slices (recurrent mode, optional burn-in): the simplest supervised check of the sequence
//! path, and a learner-only baseline on recorded data. Its statistics: the negative
//! log-likelihood as `loss` and `policy_loss`, and the gradient norm.

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;
use common::backend::{to_vec as host, CpuAutodiff};
use common::checkpoint::Checkpointed;
use common::chunk::{Chunk, ChunkSchema};
use common::policy::PolicyConfig;

use crate::algo::optim::Model;
use crate::algo::slice_sampler::SampledBatch;
use crate::algo::slices::SliceTrainer;
use crate::algo::Algorithm;
use crate::config::BcSection;
use crate::ranks::RankLost;
use crate::run::metrics::UpdateStats;

pub struct Bc<B: AutodiffBackend = CpuAutodiff> {
    trainer: SliceTrainer<B>,
    seed: u64,
}

impl<B: AutodiffBackend> Bc<B> {
    pub fn new(
        policy: &PolicyConfig,
        bc: &BcSection,
        schema: &ChunkSchema,
        capacity: usize,
        seed: u64,
        device: &B::Device,
    ) -> anyhow::Result<Self> {
        let trainer = SliceTrainer::new(policy, *bc, schema, capacity, seed, seed ^ 0xbc, device)?;
        Ok(Bc { trainer, seed })
    }

    /// Mean negative log-likelihood of the recorded actions on the real steps after burn-in.
    pub fn loss(&self, batch: &SampledBatch) -> Result<(Tensor<B, 1>, UpdateStats), RankLost> {
        let t = &self.trainer;
        let burn = t.slices.burn_in;
        let (sb, inputs) = t.inputs(batch);
        let device = t.trainee.device();
        let out = inputs.forward_learn(&t.trainee.model, &t.inference, burn);
        let logp = sb.log_prob(t.trainee.model.action(), out.head, burn, &device);
        let (mask, count) = t.learn_mask(&sb)?;
        let loss = (logp * mask).sum().neg() / count;
        // Several learner ranks: each rank's loss is its part of the group's mean.
        let mut value = [host(loss.clone().inner())[0]];
        crate::ranks::all_reduce_sum(&mut value)?;
        let value = value[0];
        let stats = UpdateStats {
            loss: value,
            policy_loss: value,
            ..UpdateStats::default()
        };
        Ok((loss, stats))
    }
}

impl<B: AutodiffBackend> Algorithm<B> for Bc<B> {
    fn add_chunk(&mut self, chunk: &Chunk) {
        self.trainer.storage.extend(chunk);
    }

    /// Any stored frame will do.
    fn ready(&self) -> bool {
        !self.trainer.storage.is_empty()
    }

    /// One gradient step on a freshly sampled batch.
    fn update(&mut self) -> anyhow::Result<UpdateStats> {
        let batch = self.trainer.sample()?;
        let (loss, stats) = self.loss(&batch)?;
        let grad_norm = self.trainer.step(loss)?;
        Ok(UpdateStats { grad_norm, ..stats })
    }

    fn off_policy(&self) -> bool {
        true
    }

    /// The storage as `shard_frames.len()` shards, shard `k` sampled with rank `k`'s seed.
    fn as_ranks(&mut self, ranks: usize, shard_frames: &[usize]) -> anyhow::Result<()> {
        debug_assert_eq!(ranks, shard_frames.len());
        let seed = self.seed;
        (self.trainer).as_ranks(shard_frames, |k| crate::ranks::rank_seed(seed, k) ^ 0xbc)
    }
}

impl<B: AutodiffBackend> Checkpointed<B> for Bc<B> {
    fn model(&self) -> &Model<B> {
        &self.trainer.trainee.model
    }

    fn save_state(&self) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
        self.trainer.trainee.save_state(None)
    }

    fn load_state(&mut self, model: Vec<u8>, optim: Vec<u8>) -> anyhow::Result<()> {
        self.trainer.load_state(model, optim)
    }

    /// The sampler's position.
    fn host_state(&self) -> Vec<u8> {
        self.trainer.host_state()
    }

    fn load_host_state(&mut self, state: &[u8]) -> anyhow::Result<()> {
        self.trainer.load_host_state(state)
    }
}

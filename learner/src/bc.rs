//! Behaviour cloning: maximise the log-probability of the recorded actions over sequence
//! slices (recurrent mode, optional burn-in): the simplest supervised check of the sequence
//! path, and a learner-only baseline on recorded data.

use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;
use common::backend::{to_vec as host, CpuAutodiff};
use common::chunk::{Chunk, ChunkSchema};
use common::policy::dist::{categorical_log_prob, squashed_gaussian_log_prob_tensor};
use common::policy::{ActionSpec, Policy, PolicyConfig};

use crate::batch::{columns, tensor3, SliceBatch};
use crate::config::BcSection;
use crate::dqn::check_initial_state;
use crate::optim::{Model, Trainee};
use crate::ppo::UpdateStats;
use crate::replay::ReplayStorage;
use crate::slice_sampler::{EndKey, SampledBatch, SliceSampler, SliceSamplerConfig};

pub struct Bc<B: AutodiffBackend = CpuAutodiff> {
    trainee: Trainee<B>,
    inference: Policy<B::InnerBackend>,
    config: BcSection,
    storage: ReplayStorage,
    sampler: SliceSampler,
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
        check_initial_state(bc.initial_state, policy, schema)?;
        let trainee = Trainee::new(policy, seed, device)?;
        Ok(Bc {
            inference: trainee.inference(),
            trainee,
            config: bc.clone(),
            storage: ReplayStorage::new(schema, capacity),
            sampler: SliceSampler::new(SliceSamplerConfig {
                slice_len: Some(bc.slice_len),
                num_slices: None,
                batch_size: bc.slice_len * bc.num_slices,
                strict_length: false,
                pad_output: true,
                end_key: EndKey::Done,
                replacement: true,
                seed: seed ^ 0xbc,
            })?,
        })
    }

    pub fn model(&self) -> &Model<B> {
        &self.trainee.model
    }

    pub fn stored(&self) -> usize {
        self.storage.len()
    }

    pub fn add_chunk(&mut self, chunk: &Chunk) {
        self.storage.extend(chunk);
    }

    /// One gradient step on a freshly sampled batch.
    pub fn train_step(&mut self) -> anyhow::Result<UpdateStats> {
        let batch = self.sampler.sample(&self.storage)?;
        let (loss, stats) = self.loss(&batch);
        let grad_norm = self
            .trainee
            .step(loss, self.config.lr, self.config.max_grad_norm);
        self.inference = self.trainee.inference();
        Ok(UpdateStats { grad_norm, ..stats })
    }

    /// Mean negative log-likelihood of the recorded actions on the real steps after burn-in.
    pub fn loss(&self, batch: &SampledBatch) -> (Tensor<B, 1>, UpdateStats) {
        let c = &self.config;
        let (len, burn) = (c.slice_len, c.burn_in);
        let sb = SliceBatch::new(&self.storage, batch, len);
        let rows = sb.rows;
        let pc = self.inference.config();
        let inputs = sb.inputs(
            c.initial_state,
            pc.num_layers,
            pc.hidden_size,
            pc.cell.has_cell_state(),
        );
        let learn = len - burn;
        let device = self.trainee.device();
        let out = inputs.forward_learn(&self.trainee.model, &self.inference, burn);
        let logp = match self.trainee.model.action() {
            ActionSpec::Discrete { .. } => {
                categorical_log_prob(out.head, sb.action_index(burn, &device))
            }
            ActionSpec::Continuous { low, high } => {
                let a = low.len();
                let acts = columns(&sb.gather(&self.storage.action, a), rows, len, a, burn, len);
                squashed_gaussian_log_prob_tensor(
                    out.head,
                    tensor3(acts, rows, learn, a, &device),
                    low,
                    high,
                )
            }
        };
        let mask: Vec<f32> = sb.mask().iter().map(|&m| m as u8 as f32).collect();
        let mask = columns(&mask, rows, len, 1, burn, len);
        let count = mask.iter().sum::<f32>().max(1.0);
        let loss = (logp * tensor3(mask, rows, learn, 1, &device)).sum().neg() / count;
        let value = host(loss.clone().inner())[0];
        (
            loss,
            UpdateStats {
                loss: value,
                policy_loss: value,
                minibatches: 1,
                ..UpdateStats::default()
            },
        )
    }

    pub fn save_state(&self) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
        self.trainee.save_state()
    }

    pub fn load_state(&mut self, model: Vec<u8>, optim: Vec<u8>) -> anyhow::Result<()> {
        self.trainee.load_state(model, optim)?;
        self.inference = self.trainee.inference();
        Ok(())
    }
}

//! What the learners share: the model DQN and behaviour cloning train on slices sampled from
//! replay storage ([`SliceTrainer`]), a sampled batch of slices as tensors `[rows, slice_len, ..]`,
//! the recurrent-mode forward of a slice with burn-in, and the step at a trajectory's cut.

use std::ops::Range;

use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Bool, Int, Tensor, TensorData};
use common::backend::to_vec as host;
use common::chunk::ChunkSchema;
use common::policy::dist::{
    categorical_log_prob, multi_categorical_log_prob, squashed_gaussian_log_prob_tensor,
};
use common::policy::{obs_tensor, pixel_tensor, ActionSpec, Policy, PolicyConfig, PolicyOutput};
use recur_rnn::{set_recurrent_mode, RecurrentError, RecurrentMode, RecurrentState};

use crate::algo::optim::Trainee;
use crate::algo::replay_buffer::ReplayStorage;
use crate::algo::slice_sampler::{
    SampledBatch, SamplerError, ShardSamplers, SliceSampler, SliceSamplerConfig,
};
use crate::config::{InitialState, SliceTraining};
use crate::ranks::RankLost;

/// A model trained on slices of replayed steps: one gradient step samples `num_slices` padded
/// slices of `slice_len` (with replacement, `is_init` at every slice start), computes the
/// algorithm's loss on the steps after the burn-in and takes an Adam step.
pub struct SliceTrainer<B: AutodiffBackend> {
    pub trainee: Trainee<B>,
    /// The model without autodiff (same device; refreshed after every step).
    pub inference: Policy<B::InnerBackend>,
    pub slices: SliceTraining,
    pub storage: ReplayStorage,
    sampler: SliceSampler,
    /// `--as-ranks N`: the storage as N ranks' shards, each sampled as its rank would.
    shards: Option<ShardSamplers>,
}

impl<B: AutodiffBackend> SliceTrainer<B> {
    /// `capacity`: replay frames; `seed` initialises the model, `sampler_seed` the sampler.
    pub fn new(
        policy: &PolicyConfig,
        slices: SliceTraining,
        schema: &ChunkSchema,
        capacity: usize,
        seed: u64,
        sampler_seed: u64,
        device: &B::Device,
    ) -> anyhow::Result<Self> {
        // With `stored` slice-start states, the policy's recurrent state has the data's shape.
        if slices.initial_state == InitialState::Stored
            && (policy.cell != schema.cell
                || policy.state_layers() != schema.num_layers
                || policy.hidden_size != schema.hidden_size)
        {
            anyhow::bail!(
                "initial_state = \"stored\" needs the data's recurrent state shape: the data has \
                 {} x {} layers x {} units, the policy {} x {} x {}; use initial_state = \"zeros\" \
                 (with burn_in) or match [policy]",
                schema.cell.name(),
                schema.num_layers,
                schema.hidden_size,
                policy.cell.name(),
                policy.state_layers(),
                policy.hidden_size
            );
        }
        let trainee = Trainee::new(policy, seed, device)?;
        let (len, n) = (slices.slice_len, slices.num_slices);
        Ok(SliceTrainer {
            inference: trainee.inference(),
            trainee,
            slices,
            storage: ReplayStorage::new(schema, capacity),
            sampler: SliceSampler::new(SliceSamplerConfig::padded(len, n, true, sampler_seed))?,
            shards: None,
        })
    }

    /// A fresh batch of slices.
    pub fn sample(&mut self) -> Result<SampledBatch, SamplerError> {
        match self.shards.as_mut() {
            Some(shards) => shards.sample(&self.storage),
            None => self.sampler.sample(&self.storage),
        }
    }

    /// Samples the storage as `shard_frames.len()` ranks would
    /// ([`Algorithm::as_ranks`](crate::algo::Algorithm::as_ranks)): shard `k`, the next
    /// `shard_frames[k]` stored frames, by a sampler seeded `sampler_seed(k)` that takes rank
    /// `k`'s share of `num_slices`.
    pub fn as_ranks(
        &mut self,
        shard_frames: &[usize],
        sampler_seed: impl Fn(usize) -> u64,
    ) -> anyhow::Result<()> {
        let ranks = shard_frames.len();
        let n = self.slices.num_slices;
        anyhow::ensure!(
            n.is_multiple_of(ranks),
            "num_slices = {n} does not divide over {ranks} learner ranks: it is the whole \
             group's (each rank takes 1/{ranks}); make it a multiple of {ranks}"
        );
        let mut at = 0;
        let shards = (shard_frames.iter())
            .map(|&f| {
                at += f;
                at - f..at
            })
            .collect();
        let len = self.slices.slice_len;
        self.shards = Some(ShardSamplers::new(shards, |k| {
            SliceSamplerConfig::padded(len, n / ranks, true, sampler_seed(k))
        })?);
        Ok(())
    }

    /// `batch` read out of the storage, with its network inputs (slice-start states stored
    /// or zeros, as configured).
    pub fn inputs<'a>(&'a self, batch: &'a SampledBatch) -> (SliceBatch<'a>, SliceInputs) {
        let sb = SliceBatch::new(&self.storage, batch, self.slices.slice_len);
        let pc = self.inference.config();
        let (l, h) = (pc.state_layers(), pc.hidden_size);
        let inputs = sb.inputs(self.slices.initial_state, l, h, pc.cell.has_cell_state());
        (sb, inputs)
    }

    /// The mask of the learned steps (real, after the burn-in), `[rows, len - burn_in, 1]`,
    /// and their count (at least 1; under several learner ranks the group's, so a rank lost
    /// while it is summed is the error).
    pub fn learn_mask(&self, sb: &SliceBatch) -> Result<(Tensor<B, 3>, f32), RankLost> {
        let (len, burn) = (self.slices.slice_len, self.slices.burn_in);
        let mask: Vec<f32> = sb.mask().iter().map(|&m| m as u8 as f32).collect();
        let mask = columns(&mask, sb.rows, len, 1, burn, len);
        // Several learner ranks: the group's count, each rank's loss a part of the group's mean.
        let mut count = [mask.iter().map(|&m| m as f64).sum::<f64>()];
        crate::ranks::all_reduce_sum(&mut count)?;
        let count = (count[0] as f32).max(1.0);
        let device = self.trainee.device();
        Ok((tensor3(mask, sb.rows, len - burn, 1, &device), count))
    }

    /// One Adam step on `loss` (the gradient norm clipped); refreshes the inference copy and
    /// returns the norm before clipping.
    pub fn step(&mut self, loss: Tensor<B, 1>) -> Result<f32, RankLost> {
        let norm = self
            .trainee
            .step(loss, self.slices.lr, self.slices.max_grad_norm)?;
        self.inference = self.trainee.inference();
        Ok(norm)
    }

    /// The sampler's position ([`Checkpointed::host_state`](common::checkpoint::Checkpointed)).
    pub fn host_state(&self) -> Vec<u8> {
        crate::algo::optim::encode(&self.sampler.state())
    }

    /// Restores [`SliceTrainer::host_state`] (empty: nothing saved).
    pub fn load_host_state(&mut self, state: &[u8]) -> anyhow::Result<()> {
        if !state.is_empty() {
            self.sampler.set_state(crate::algo::optim::decode(state)?);
        }
        Ok(())
    }

    pub fn load_state(&mut self, model: Vec<u8>, optim: Vec<u8>) -> anyhow::Result<()> {
        self.trainee.load_state(model, optim)?;
        self.inference = self.trainee.inference();
        Ok(())
    }
}

/// One padded batch of `rows` slices of `len` steps, read out of the storage.
pub struct SliceBatch<'a> {
    pub storage: &'a ReplayStorage,
    pub batch: &'a SampledBatch,
    pub rows: usize,
    pub len: usize,
    /// Real steps of each row (the rest is padding).
    pub valid: Vec<usize>,
}

impl<'a> SliceBatch<'a> {
    /// `batch` must come from a padding sampler with slices of `len` steps.
    pub fn new(storage: &'a ReplayStorage, batch: &'a SampledBatch, len: usize) -> Self {
        SliceBatch {
            storage,
            batch,
            rows: batch.slices.len(),
            len,
            valid: batch.slices.iter().map(|&(_, n)| n).collect(),
        }
    }

    /// `[rows * len * w]` values of a per-step column `v` (`w` per step).
    pub fn gather<T: Copy>(&self, v: &[T], w: usize) -> Vec<T> {
        gather(v, &self.batch.positions, w)
    }

    /// True on real steps, false on padding.
    pub fn mask(&self) -> &[bool] {
        self.batch.mask.as_deref().expect("a padded batch")
    }

    /// The `k` discrete indices per step of columns `from..len` (`k` = 1: a discrete action),
    /// `[rows, len - from, k]`, on `device`.
    pub fn action_indices<B: Backend>(
        &self,
        from: usize,
        k: usize,
        device: &B::Device,
    ) -> Tensor<B, 3, Int> {
        let idx: Vec<i64> = self
            .gather(&self.storage.action, k)
            .into_iter()
            .map(|a| a as i64)
            .collect();
        let idx = columns(&idx, self.rows, self.len, k, from, self.len);
        let shape = [self.rows, self.len - from, k];
        Tensor::from_data(TensorData::new(idx, shape), device)
    }

    /// The log-probability `[rows, len - from, 1]` of the stored actions of columns
    /// `from..len` under `head` (`action`'s distribution parameters over those columns).
    pub fn log_prob<B: Backend>(
        &self,
        action: &ActionSpec,
        head: Tensor<B, 3>,
        from: usize,
        device: &B::Device,
    ) -> Tensor<B, 3> {
        match action {
            ActionSpec::Discrete { .. } => {
                categorical_log_prob(head, self.action_indices(from, 1, device))
            }
            ActionSpec::MultiDiscrete { nvec } => multi_categorical_log_prob(
                head,
                self.action_indices(from, nvec.len(), device),
                nvec,
            ),
            ActionSpec::Continuous { low, high } => {
                let (rows, len, a) = (self.rows, self.len, low.len());
                let all = self.gather(&self.storage.action, a);
                let acts = columns(&all, rows, len, a, from, len);
                let acts = tensor3(acts, rows, len - from, a, device);
                squashed_gaussian_log_prob_tensor(head, acts, low, high)
            }
        }
    }

    /// Observations, `is_init` and the slice-start states (stored or zeros) of the columns
    /// `from..len`, for a network with `l` layers of `h` units.
    pub fn inputs(&self, initial: InitialState, l: usize, h: usize, has_cell: bool) -> SliceInputs {
        let s = self.storage.schema();
        let d = s.obs_dim;
        let state = |v: &[f32]| -> Vec<f32> {
            match initial {
                InitialState::Stored => self.gather(v, l * h),
                InitialState::Zeros => vec![0.0; self.rows * self.len * l * h],
            }
        };
        SliceInputs {
            rows: self.rows,
            len: self.len,
            d,
            l,
            h,
            obs: self.gather(&self.storage.observation, d),
            px: s.pixels(),
            pixels: self.gather(&self.storage.pixels, s.pixels()),
            is_init: self.batch.is_init.clone(),
            rs_h: state(&self.storage.rs_h),
            rs_c: has_cell.then(|| state(&self.storage.rs_c)),
        }
    }
}

/// The entries `positions` of a per-step column `v` (`w` values per step), in that order.
pub fn gather<T: Copy>(v: &[T], positions: &[usize], w: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(positions.len() * w);
    for &p in positions {
        out.extend_from_slice(&v[p * w..(p + 1) * w]);
    }
    out
}

/// One sequential step of `net` on `obs` (`[m, obs_dim]`) from the post-step states `rs_h`,
/// `rs_c` (`[m, L, H]` each), no trajectory starting: the outputs where trajectories are cut
/// without terminating (their bootstrap values).
pub fn step_at_cut<M: Backend>(
    net: &Policy<M>,
    obs: Vec<f32>,
    pixels: &[u8],
    rs_h: Vec<f32>,
    rs_c: Option<Vec<f32>>,
) -> Result<PolicyOutput<M, 2, 3>, RecurrentError> {
    let pc = net.config();
    let m = rs_h.len() / (pc.state_layers() * pc.hidden_size);
    let device = net.policy_head.weight.val().device();
    let px = pixels.len() / m.max(1);
    let state = |v| tensor3(v, m, pc.state_layers(), pc.hidden_size, &device);
    let _seq = set_recurrent_mode(RecurrentMode::Sequential);
    net.forward(
        obs_tensor(obs, [m, pc.obs_dim], &device),
        pixel_tensor(pixels, [m, px], &device),
        Tensor::<M, 1, Bool>::from_data(TensorData::new(vec![false; m], [m]), &device),
        RecurrentState {
            rs_h: state(rs_h),
            rs_c: rs_c.map(state),
        },
    )
}

/// Columns `from..to` of every row of `v` (`[rows, len, w]`, row-major).
pub fn columns<T: Copy>(
    v: &[T],
    rows: usize,
    len: usize,
    w: usize,
    from: usize,
    to: usize,
) -> Vec<T> {
    let mut out = Vec::with_capacity(rows * (to - from) * w);
    for r in 0..rows {
        out.extend_from_slice(&v[(r * len + from) * w..(r * len + to) * w]);
    }
    out
}

/// Host copies of a batch's network inputs, `[rows, len, ..]`.
pub struct SliceInputs {
    pub rows: usize,
    pub len: usize,
    d: usize,
    l: usize,
    h: usize,
    pub obs: Vec<f32>,
    /// Bytes of a step's pixels lane (0 without images).
    pub px: usize,
    /// `[rows, len, px]`.
    pub pixels: Vec<u8>,
    pub is_init: Vec<bool>,
    pub rs_h: Vec<f32>,
    pub rs_c: Option<Vec<f32>>,
}

impl SliceInputs {
    /// Columns `from..to` of every row of `v` (`w` values per step).
    fn columns<T: Copy>(&self, v: &[T], w: usize, from: usize, to: usize) -> Vec<T> {
        columns(v, self.rows, self.len, w, from, to)
    }

    /// Recurrent mode over columns `cols` of `net`, each row starting at column `cols.start`
    /// from `start` (`[rows, L, H]` per state entry; `None`: the stored state there).
    pub fn forward<M: Backend>(
        &self,
        net: &Policy<M>,
        cols: Range<usize>,
        start: Option<(&[f32], Option<&[f32]>)>,
    ) -> PolicyOutput<M, 3, 4> {
        let (rows, t, lh) = (self.rows, cols.len(), self.l * self.h);
        let (from, to) = (cols.start, cols.end);
        let device = net.policy_head.weight.val().device();
        let mut is_init = self.columns(&self.is_init, 1, from, to);
        let mut rs_h = self.columns(&self.rs_h, lh, from, to);
        let mut rs_c = self.rs_c.as_ref().map(|c| self.columns(c, lh, from, to));
        if let Some((h0, c0)) = start {
            for r in 0..rows {
                // A trajectory that starts exactly here keeps its stored state.
                if is_init[r * t] {
                    continue;
                }
                is_init[r * t] = true;
                rs_h[r * t * lh..(r * t + 1) * lh].copy_from_slice(&h0[r * lh..(r + 1) * lh]);
                if let (Some(c), Some(c0)) = (&mut rs_c, c0) {
                    c[r * t * lh..(r * t + 1) * lh].copy_from_slice(&c0[r * lh..(r + 1) * lh]);
                }
            }
        }
        let state = |v: Vec<f32>| {
            Tensor::<M, 4>::from_data(TensorData::new(v, [rows, t, self.l, self.h]), &device)
        };
        let _mode = set_recurrent_mode(RecurrentMode::Recurrent);
        net.forward_batch(
            obs_tensor(
                self.columns(&self.obs, self.d, from, to),
                [rows, t, self.d],
                &device,
            ),
            pixel_tensor(
                &self.columns(&self.pixels, self.px, from, to),
                [rows, t, self.px],
                &device,
            ),
            Tensor::<M, 2, Bool>::from_data(TensorData::new(is_init, [rows, t]), &device),
            RecurrentState {
                rs_h: state(rs_h),
                rs_c: rs_c.map(state),
            },
        )
        .expect("the batch matches the network")
    }

    /// The learner part of the slices, `[rows, len - burn_in, ..]` with autodiff: the first
    /// `burn_in` columns run on `inference` (the same weights, no autodiff) only to produce the
    /// state at column `burn_in`, so neither loss nor gradient touches them.
    pub fn forward_learn<B: AutodiffBackend>(
        &self,
        model: &Policy<B>,
        inference: &Policy<B::InnerBackend>,
        burn_in: usize,
    ) -> PolicyOutput<B, 3, 4> {
        if burn_in == 0 {
            return self.forward(model, 0..self.len, None);
        }
        let lh = self.l * self.h;
        let out = self.forward(inference, 0..burn_in, None);
        // The post-step state of each row's last burn-in column.
        let last = |v: Vec<f32>| columns(&v, self.rows, burn_in, lh, burn_in - 1, burn_in);
        let h0 = last(host(out.next.rs_h));
        let c0 = out.next.rs_c.map(|c| last(host(c)));
        self.forward(model, burn_in..self.len, Some((&h0, c0.as_deref())))
    }
}

/// A `[rows, len, w]` tensor on `device`.
pub fn tensor3<B: Backend>(
    v: Vec<f32>,
    rows: usize,
    len: usize,
    w: usize,
    device: &B::Device,
) -> Tensor<B, 3> {
    Tensor::from_data(TensorData::new(v, [rows, len, w]), device)
}

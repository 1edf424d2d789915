//! What PPO's two update paths share: the interface they implement ([`Update`]: the critic's
//! pass, a minibatch's optimizer step, the end of an update, the checkpoint bytes), the
//! frames an update trains on ([`Rollout`]) and the minibatch a step takes ([`Minibatch`]).
//! burn's module ([`Trainee`]: the model and burn's Adam) stays the model of record on both
//! paths.

use burn::tensor::backend::AutodiffBackend;
use common::chunk::{Chunk, ChunkSchema};

use crate::algo::optim::Trainee;
use crate::algo::ppo::flat::net::LossConfig;
use crate::algo::replay_buffer::ReplayStorage;
use crate::algo::slice_sampler::SampledBatch;
use crate::algo::slices::{SliceBatch, SliceInputs};
use crate::config::{InitialState, PpoSection};
use crate::run::metrics::UpdateStats;

/// One of PPO's update paths: how the critic's values and a minibatch's step are computed, and
/// what the path keeps of the trained state beside the model of record.
pub trait Update<B: AutodiffBackend> {
    /// The path as the log line names it: `burn` or `fused`.
    fn name(&self) -> &'static str;

    /// The critic's value of every position of `chunk` (recurrent mode over `[E, T]` from its
    /// stored states) and, when `rows` is not empty, the value of the next observation at each
    /// of `rows` (one sequential step from the post-step state there).
    fn critic(
        &self,
        chunk: &Chunk,
        schema: &ChunkSchema,
        rows: &[usize],
    ) -> (Vec<f32>, Option<Vec<f32>>);

    /// One optimizer step on `mb`: its statistics, with the gradient norm before clipping.
    fn step(&mut self, trainee: &mut Trainee<B>, mb: &Minibatch<'_>) -> UpdateStats;

    /// The end of an update (after its epochs; the model of record already holds its new
    /// normalizer): the model of record takes the weights trained, and the path follows it.
    fn finish(&mut self, trainee: &mut Trainee<B>);

    /// The checkpoint bytes of the model and the optimizer (one format on both paths).
    fn save(&self, trainee: &Trainee<B>) -> anyhow::Result<(Vec<u8>, Vec<u8>)>;
}

/// The frames stored since the last update, with their advantages and value targets (one per
/// position, in insertion order).
pub struct Rollout {
    pub frames: ReplayStorage,
    pub advantage: Vec<f32>,
    pub value_target: Vec<f32>,
}

impl Rollout {
    /// Stores `chunk` with its advantages and value targets.
    pub fn push(&mut self, chunk: &Chunk, advantage: Vec<f32>, value_target: Vec<f32>) {
        debug_assert_eq!(self.frames.len(), self.advantage.len());
        self.frames.extend(chunk);
        self.advantage.extend(advantage);
        self.value_target.extend(value_target);
    }

    pub fn clear(&mut self) {
        self.frames.clear();
        self.advantage.clear();
        self.value_target.clear();
    }
}

/// A sampled minibatch of the rollout, and the step's hyperparameters at the run's progress.
pub struct Minibatch<'a> {
    pub rollout: &'a Rollout,
    pub batch: &'a SampledBatch,
    pub slice_len: usize,
    pub loss: LossConfig,
    pub lr: f64,
    pub max_grad_norm: f32,
    /// The minibatch is one part of a group's (several learner ranks, or `--as-ranks`): the
    /// count of real steps and the advantages' moments are the group's, summed in `f64` over
    /// the parts ([`group_moments`]).
    pub group: bool,
}

/// A minibatch's slices and what both paths read of them (`[rows * len]` per value).
pub struct Slices<'a> {
    pub sb: SliceBatch<'a>,
    /// Observations, `is_init` and the stored states at the slices' starts.
    pub inputs: SliceInputs,
    /// 1 on real steps, 0 on padding; `count` real steps.
    pub mask: Vec<f32>,
    pub count: f32,
    /// Advantages normalised over the real steps.
    pub adv: Vec<f32>,
    pub old_logp: Vec<f32>,
    pub target: Vec<f32>,
}

impl<'a> Minibatch<'a> {
    /// `batch` of `rollout`, with `ppo`'s `lr`, `clip_eps` and `entropy_coef` at `progress` on
    /// their schedules.
    pub fn new(
        rollout: &'a Rollout,
        batch: &'a SampledBatch,
        ppo: &PpoSection,
        progress: f64,
    ) -> Self {
        Minibatch {
            rollout,
            batch,
            slice_len: ppo.slice_len,
            loss: LossConfig {
                clip_eps: ppo.clip_schedule.at(ppo.clip_eps as f64, progress) as f32,
                value_coef: ppo.value_coef,
                entropy_coef: ppo.entropy_schedule.at(ppo.entropy_coef as f64, progress) as f32,
            },
            lr: ppo.lr_schedule.at(ppo.lr, progress),
            max_grad_norm: ppo.max_grad_norm,
            group: false,
        }
    }

    /// The slices read out of the rollout (both paths start here).
    pub fn slices(&self) -> Slices<'a> {
        let frames = &self.rollout.frames;
        let s = frames.schema();
        let sb = SliceBatch::new(frames, self.batch, self.slice_len);
        let mask: Vec<f32> = sb.mask().iter().map(|&m| m as u8 as f32).collect();
        let adv_raw = sb.gather(&self.rollout.advantage, 1);
        let (count, mean, std) = if self.group {
            group_moments(&adv_raw, &mask)
        } else {
            let count: f32 = mask.iter().sum();
            let masked_mean = |f: &dyn Fn(f32) -> f32| {
                adv_raw
                    .iter()
                    .zip(&mask)
                    .map(|(&x, m)| f(x) * m)
                    .sum::<f32>()
                    / count
            };
            let mean = masked_mean(&|x| x);
            (count, mean, masked_mean(&|x| (x - mean).powi(2)).sqrt())
        };
        let adv = adv_raw.iter().map(|x| (x - mean) / (std + 1e-8)).collect();
        let has_cell = s.cell.has_cell_state();
        Slices {
            inputs: sb.inputs(InitialState::Stored, s.num_layers, s.hidden_size, has_cell),
            old_logp: sb.gather(&frames.sample_log_prob, 1),
            target: sb.gather(&self.rollout.value_target, 1),
            sb,
            mask,
            count,
            adv,
        }
    }
}

/// The count of real steps (`mask` 1) of a group's minibatch and the mean and standard
/// deviation of its advantages, from this part's `adv` and every other rank's: one all-reduce
/// of `[count, sum, sum of squares]` in `f64` (a no-op for one rank, where `--as-ranks` holds
/// the whole group's minibatch).
pub fn group_moments(adv: &[f32], mask: &[f32]) -> (f32, f32, f32) {
    let mut sums = [0.0f64; 3];
    for (&x, &m) in adv.iter().zip(mask) {
        let x = x as f64 * m as f64;
        sums[0] += m as f64;
        sums[1] += x;
        sums[2] += x * x;
    }
    crate::ranks::all_reduce_sum(&mut sums);
    let n = sums[0].max(1.0);
    let mean = sums[1] / n;
    let var = (sums[2] / n - mean * mean).max(0.0);
    (sums[0] as f32, mean as f32, var.sqrt() as f32)
}

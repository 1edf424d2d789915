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

    /// One optimizer step on `mb`: its statistics, with the gradient norm before clipping. Errs
    /// only when a learner rank was lost in the gradient's all-reduce.
    fn step(&mut self, trainee: &mut Trainee<B>, mb: &Minibatch<'_>)
        -> anyhow::Result<UpdateStats>;

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
    /// group's count of real steps and the mean and standard deviation of its advantages
    /// ([`group_moments`]), which the loss takes instead of this part's own.
    pub group: Option<(f32, f32, f32)>,
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
            group: None,
        }
    }

    /// The slices read out of the rollout (both paths start here).
    pub fn slices(&self) -> Slices<'a> {
        let frames = &self.rollout.frames;
        let s = frames.schema();
        let sb = SliceBatch::new(frames, self.batch, self.slice_len);
        let mask: Vec<f32> = sb.mask().iter().map(|&m| m as u8 as f32).collect();
        let adv_raw = sb.gather(&self.rollout.advantage, 1);
        let (count, mean, std) = if let Some(moments) = self.group {
            moments
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

/// The count of real steps of each of an epoch's minibatches `batches` and the mean and
/// standard deviation of its advantages over the whole group's minibatch: this part's sums and
/// every other rank's, in one all-reduce of `[count, sum, sum of squares]` per minibatch in
/// `f64` for the whole epoch (a no-op for one rank, where `--as-ranks` holds the group's
/// minibatches whole).
pub fn group_moments(
    rollout: &Rollout,
    batches: &[SampledBatch],
    slice_len: usize,
) -> Result<Vec<(f32, f32, f32)>, crate::ranks::RankLost> {
    let mut sums = vec![0.0f64; 3 * batches.len()];
    for (batch, s) in batches.iter().zip(sums.chunks_exact_mut(3)) {
        let sb = SliceBatch::new(&rollout.frames, batch, slice_len);
        let adv = sb.gather(&rollout.advantage, 1);
        for (&x, _) in adv.iter().zip(sb.mask()).filter(|(_, &m)| m) {
            s[0] += 1.0;
            s[1] += x as f64;
            s[2] += x as f64 * x as f64;
        }
    }
    crate::ranks::all_reduce_sum(&mut sums)?;
    Ok((sums.chunks_exact(3))
        .map(|s| {
            let n = s[0].max(1.0);
            let mean = s[1] / n;
            let var = (s[2] / n - mean * mean).max(0.0);
            (s[0] as f32, mean as f32, var.sqrt() as f32)
        })
        .collect())
}

//! Adam over one flat parameter buffer (burn's `Adam` with `epsilon` 1e-5, the same update
//! in the same order of operations), global-norm clipping, and the conversion of its moments
//! to and from burn's optimizer record, so that checkpoints keep one format whichever update
//! path wrote them.

use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::record::AdaptorRecord;
use burn::optim::{Adam, AdamState, AdaptiveMomentumState, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorData};
use common::backend::to_vec as host;
use recur_rnn::fused::{vectorized, SimdLevel};

use super::layout::{Layout, Slot};

const BETA_1: f32 = 0.9;
const BETA_2: f32 = 0.999;
const EPSILON: f32 = 1e-5;

/// Adam's state for every parameter of a [`Layout`]: first and second moments and the step
/// count (all parameters step together).
#[derive(Clone, Debug, PartialEq)]
pub struct FlatAdam {
    pub m: Vec<f32>,
    pub v: Vec<f32>,
    pub t: usize,
}

impl FlatAdam {
    pub fn new(len: usize) -> Self {
        FlatAdam {
            m: vec![0.0; len],
            v: vec![0.0; len],
            t: 0,
        }
    }

    /// One step of `params` along `grads` with learning rate `lr`.
    pub fn step(&mut self, params: &mut [f32], grads: &[f32], lr: f64) {
        assert_eq!(params.len(), self.m.len());
        assert_eq!(grads.len(), self.m.len());
        self.t += 1;
        let time = self.t as i32;
        let bias_correction2_sqrt = (1.0 - BETA_2.powi(time)).sqrt();
        let combined = bias_correction2_sqrt / (1.0 - BETA_1.powi(time));
        let eps = EPSILON * bias_correction2_sqrt;
        let lr = lr as f32;
        let (f1, f2) = (1.0 - BETA_1, 1.0 - BETA_2);
        let (m, v) = (&mut self.m, &mut self.v);
        // Element-wise, so the wide code computes what the scalar loop would, bit for bit.
        vectorized(
            SimdLevel::current(),
            #[inline(always)]
            || {
                for (((p, &g), m), v) in params.iter_mut().zip(grads).zip(m).zip(v) {
                    *m = *m * BETA_1 + g * f1;
                    *v = *v * BETA_2 + g * g * f2;
                    let delta = *m * combined / (v.sqrt() + eps);
                    *p -= delta * lr;
                }
            },
        );
    }
}

/// Scales `grads` so that their global L2 norm is at most `max_norm` (the burn path's
/// `clip_global_norm`: squares summed per parameter tensor in f32, in 16 lanes here, tensors
/// in f64); returns the norm before clipping.
pub fn clip_global_norm(layout: &Layout, grads: &mut [f32], max_norm: f32) -> f32 {
    let sq: f64 = vectorized(
        SimdLevel::current(),
        #[inline(always)]
        || {
            (layout.slots().iter())
                .map(|s| sum_of_squares(&grads[s.range()]) as f64)
                .sum()
        },
    );
    let norm = sq.sqrt() as f32;
    if norm > max_norm && norm.is_finite() {
        let scale = max_norm / (norm + 1e-6);
        grads.iter_mut().for_each(|g| *g *= scale);
    }
    norm
}

/// `sum(x^2)` over 16 running lanes (one zmm), so that the loop vectorizes: a single f32
/// accumulator would serialize every add on its latency.
#[inline(always)]
fn sum_of_squares(x: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 16];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += v * v;
        }
    }
    let tail: f32 = chunks.remainder().iter().map(|v| v * v).sum();
    lanes.iter().sum::<f32>() + tail
}

type Optim<B, M> = OptimizerAdaptor<Adam, M, B>;

/// The flat state held in burn's optimizer `optim` (zero moments for parameters it has not
/// stepped yet).
pub fn from_burn<B, M>(layout: &Layout, optim: &Optim<B, M>) -> FlatAdam
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
{
    let records = optim.to_record();
    let mut flat = FlatAdam::new(layout.total);
    for slot in layout.slots() {
        let Some(record) = records.get(&slot.id).cloned() else {
            continue;
        };
        let (time, m, v) = match slot.shape.len() {
            1 => moments::<B, 1>(record),
            2 => moments::<B, 2>(record),
            4 => moments::<B, 4>(record),
            rank => unreachable!("policy parameters have rank 1, 2 or 4 (convs), got {rank}"),
        };
        flat.m[slot.range()].copy_from_slice(&m);
        flat.v[slot.range()].copy_from_slice(&v);
        flat.t = flat.t.max(time);
    }
    flat
}

fn moments<B: AutodiffBackend, const D: usize>(
    record: AdaptorRecord<Adam, B>,
) -> (usize, Vec<f32>, Vec<f32>) {
    let state: AdamState<B::InnerBackend, D> = record.into_state();
    let m = state.momentum;
    (m.time, host(m.moment_1), host(m.moment_2))
}

/// `optim` holding `flat`'s state (nothing before the first step, as burn's own).
pub fn into_burn<B, M>(
    layout: &Layout,
    flat: &FlatAdam,
    optim: Optim<B, M>,
    device: &burn::tensor::Device<B::InnerBackend>,
) -> Optim<B, M>
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
{
    let mut records = optim.to_record();
    records.clear();
    if flat.t > 0 {
        for slot in layout.slots() {
            let record = match slot.shape.len() {
                1 => record::<B, 1>(slot, flat, device),
                2 => record::<B, 2>(slot, flat, device),
                4 => record::<B, 4>(slot, flat, device),
                rank => unreachable!("policy parameters have rank 1, 2 or 4 (convs), got {rank}"),
            };
            records.insert(slot.id, record);
        }
    }
    optim.load_record(records)
}

fn record<B: AutodiffBackend, const D: usize>(
    slot: &Slot,
    flat: &FlatAdam,
    device: &burn::tensor::Device<B::InnerBackend>,
) -> AdaptorRecord<Adam, B> {
    let tensor = |v: &[f32]| {
        Tensor::<B::InnerBackend, D>::from_data(
            TensorData::new(v[slot.range()].to_vec(), slot.shape.clone()),
            device,
        )
    };
    AdaptorRecord::from_state(AdamState {
        momentum: AdaptiveMomentumState {
            time: flat.t,
            moment_1: tensor(&flat.m),
            moment_2: tensor(&flat.v),
            max_moment_2: None,
        },
    })
}

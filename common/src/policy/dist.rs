//! Action distributions of the policy head.
//!
//! - **Categorical** over `n` logits.
//! - **Squashed Gaussian** (TorchRL's `TanhNormal`): `u ~ N(mean, exp(log_std))`,
//!   `y = tanh(u)`, action `a = low + (y + 1) / 2 * (high - low)`. The log-probability is always
//!   computed from the action itself (`y` recovered from `a`), by the actor on the host and by
//!   the learner on tensors, so both agree on what was stored in the chunk.
//!
//! Host functions take one row (`&[f32]`) and are what the actor uses to sample; tensor
//! functions take `[.., K]` heads and are what the losses use.

use burn::tensor::activation::log_softmax;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};

/// `log_std` is clamped to this range before use.
pub const LOG_STD_MIN: f32 = -5.0;
pub const LOG_STD_MAX: f32 = 2.0;
/// `y` is kept inside `(-1, 1)` by this margin before `atanh`.
const Y_EPS: f32 = 1e-6;
const HALF_LOG_TWO_PI: f32 = 0.918_938_5;

/// Samples an index from `logits` with the uniform draw `u` in `[0, 1)` (inverse CDF);
/// returns it with its log-probability.
pub fn sample_categorical(logits: &[f32], u: f32) -> (usize, f32) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = logits.iter().map(|&l| (l - max).exp()).sum();
    let log_z = max + sum.ln();
    let target = u * sum;
    let mut acc = 0.0;
    let mut pick = logits.len() - 1;
    for (i, &l) in logits.iter().enumerate() {
        acc += (l - max).exp();
        if target < acc {
            pick = i;
            break;
        }
    }
    (pick, logits[pick] - log_z)
}

/// The index of the largest logit (greedy action).
pub fn argmax(logits: &[f32]) -> usize {
    (0..logits.len()).fold(0, |best, i| if logits[i] > logits[best] { i } else { best })
}

/// Samples a squashed-Gaussian action from `head` = `[mean (A), log_std (A)]` with standard
/// normal draws `eps` (`A`), writing it into `action`; returns its log-probability.
pub fn sample_squashed_gaussian(
    head: &[f32],
    eps: &[f32],
    low: &[f32],
    high: &[f32],
    action: &mut [f32],
) -> f32 {
    let a = low.len();
    for i in 0..a {
        let std = head[a + i].clamp(LOG_STD_MIN, LOG_STD_MAX).exp();
        let y = (head[i] + std * eps[i]).tanh();
        action[i] = low[i] + (y + 1.0) * 0.5 * (high[i] - low[i]);
    }
    squashed_gaussian_log_prob(head, action, low, high)
}

/// The log-probability of `action` under the squashed Gaussian `head` = `[mean, log_std]`.
pub fn squashed_gaussian_log_prob(head: &[f32], action: &[f32], low: &[f32], high: &[f32]) -> f32 {
    // Evaluated term for term as `squashed_gaussian_log_prob_tensor` does.
    let a = low.len();
    let mut lp = 0.0;
    for i in 0..a {
        let log_std = head[a + i].clamp(LOG_STD_MIN, LOG_STD_MAX);
        let half_range = 0.5 * (high[i] - low[i]);
        let y = ((action[i] - low[i]) / half_range - 1.0).clamp(-1.0 + Y_EPS, 1.0 - Y_EPS);
        let u = ((y + 1.0) / (-y + 1.0)).ln() * 0.5;
        let z = (u - head[i]) / log_std.exp();
        lp += z * z * -0.5
            - log_std
            - HALF_LOG_TWO_PI
            - (-(y * y) + (1.0 + Y_EPS)).ln()
            - half_range.ln();
    }
    lp
}

/// The mean action of a squashed Gaussian (deterministic evaluation), written into `action`.
pub fn squashed_gaussian_mode(head: &[f32], low: &[f32], high: &[f32], action: &mut [f32]) {
    for i in 0..low.len() {
        action[i] = low[i] + (head[i].tanh() + 1.0) * 0.5 * (high[i] - low[i]);
    }
}

/// Log-probability of integer `actions` `[.., 1]` under `logits` `[.., n]`: `[.., 1]`.
pub fn categorical_log_prob<B: Backend, const D: usize>(
    logits: Tensor<B, D>,
    actions: Tensor<B, D, Int>,
) -> Tensor<B, D> {
    log_softmax(logits, D - 1).gather(D - 1, actions)
}

/// Entropy of the categorical `logits` `[.., n]`: `[.., 1]`.
pub fn categorical_entropy<B: Backend, const D: usize>(logits: Tensor<B, D>) -> Tensor<B, D> {
    let logp = log_softmax(logits, D - 1);
    (logp.clone().exp() * logp).sum_dim(D - 1).neg()
}

/// Log-probability of multi-discrete `actions` `[.., K]` under the factorized categorical
/// `logits` `[.., sum(nvec)]` (component `j`'s logits are the `nvec[j]` after those of the
/// components before it): the sum of the components' log-probabilities, `[.., 1]`.
pub fn multi_categorical_log_prob<B: Backend, const D: usize>(
    logits: Tensor<B, D>,
    actions: Tensor<B, D, Int>,
    nvec: &[usize],
) -> Tensor<B, D> {
    (logits
        .split_with_sizes(nvec.to_vec(), D - 1)
        .into_iter()
        .enumerate())
    .map(|(j, part)| categorical_log_prob(part, actions.clone().narrow(D - 1, j, 1)))
    .reduce(|total, part| total + part)
    .expect("at least one component")
}

/// Entropy of the factorized categorical `logits` `[.., sum(nvec)]`: the sum of the
/// components' entropies, `[.., 1]`.
pub fn multi_categorical_entropy<B: Backend, const D: usize>(
    logits: Tensor<B, D>,
    nvec: &[usize],
) -> Tensor<B, D> {
    (logits.split_with_sizes(nvec.to_vec(), D - 1).into_iter())
        .map(categorical_entropy)
        .reduce(|total, part| total + part)
        .expect("at least one component")
}

/// Log-probability of box `actions` `[.., A]` under `head` `[.., 2A]`: `[.., 1]`; the same
/// formula as [`squashed_gaussian_log_prob`].
pub fn squashed_gaussian_log_prob_tensor<B: Backend, const D: usize>(
    head: Tensor<B, D>,
    actions: Tensor<B, D>,
    low: &[f32],
    high: &[f32],
) -> Tensor<B, D> {
    let a = low.len();
    let device = head.device();
    let row = |v: Vec<f32>| {
        let mut shape = [1usize; D];
        shape[D - 1] = a;
        Tensor::<B, D>::from_data(TensorData::new(v, shape), &device)
    };
    let low_t = row(low.to_vec());
    let half = row(low.iter().zip(high).map(|(l, h)| 0.5 * (h - l)).collect());
    let log_half = half.clone().log();
    let mean = head.clone().narrow(D - 1, 0, a);
    let log_std = head.narrow(D - 1, a, a).clamp(LOG_STD_MIN, LOG_STD_MAX);
    let y = ((actions - low_t) / half - 1.0).clamp(-1.0 + Y_EPS, 1.0 - Y_EPS);
    // atanh(y) = 0.5 * ln((1 + y) / (1 - y))
    let u = ((y.clone() + 1.0) / (y.clone().neg() + 1.0)).log() * 0.5;
    let z = (u - mean) / log_std.clone().exp();
    let per_dim = z.powi_scalar(2) * -0.5
        - log_std
        - HALF_LOG_TWO_PI
        - (y.clone() * y).neg().add_scalar(1.0 + Y_EPS).log()
        - log_half;
    per_dim.sum_dim(D - 1)
}

/// Entropy of the pre-squash Gaussian `[.., 1]` (the usual surrogate: the squashed
/// distribution's entropy has no closed form).
pub fn gaussian_entropy<B: Backend, const D: usize>(
    head: Tensor<B, D>,
    action_dim: usize,
) -> Tensor<B, D> {
    let log_std = head
        .narrow(D - 1, action_dim, action_dim)
        .clamp(LOG_STD_MIN, LOG_STD_MAX);
    (log_std + 0.5 + HALF_LOG_TWO_PI).sum_dim(D - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{cpu_device, Cpu};

    #[test]
    fn categorical_sampling_follows_the_cdf() {
        let logits = [0.0f32, (3.0f32).ln()]; // p = [0.25, 0.75]
        assert_eq!(sample_categorical(&logits, 0.0).0, 0);
        assert_eq!(sample_categorical(&logits, 0.2499).0, 0);
        assert_eq!(sample_categorical(&logits, 0.2501).0, 1);
        assert_eq!(sample_categorical(&logits, 0.999_999).0, 1);
        let (a, lp) = sample_categorical(&logits, 0.9);
        assert_eq!(a, 1);
        assert!((lp - 0.75f32.ln()).abs() < 1e-6);
        assert_eq!(argmax(&logits), 1);
    }

    #[test]
    fn host_and_tensor_log_probs_agree() {
        let device = cpu_device();
        let logits = [0.3f32, -1.2, 2.0];
        let t = Tensor::<Cpu, 2>::from_data(TensorData::new(logits.to_vec(), [1, 3]), &device);
        for a in 0..3 {
            let lp_host = logits[a] - logits.iter().map(|l| l.exp()).sum::<f32>().ln();
            let idx =
                Tensor::<Cpu, 2, Int>::from_data(TensorData::new(vec![a as i64], [1, 1]), &device);
            let lp: f32 = categorical_log_prob(t.clone(), idx).into_scalar();
            assert!((lp - lp_host).abs() < 1e-5, "{lp} vs {lp_host}");
        }
        let probs: Vec<f32> = logits.iter().map(|l| l.exp()).collect();
        let z: f32 = probs.iter().sum();
        let h_host: f32 = probs.iter().map(|p| -(p / z) * (p / z).ln()).sum();
        let h: f32 = categorical_entropy(t).into_scalar();
        assert!((h - h_host).abs() < 1e-5);

        let head = [0.4f32, -0.3, -0.5, 0.1]; // A = 2
        let (low, high) = ([-2.0f32, 0.0], [2.0f32, 1.0]);
        let mut action = [0.0f32; 2];
        let lp_host = sample_squashed_gaussian(&head, &[0.7, -1.3], &low, &high, &mut action);
        assert!(action[0] > -2.0 && action[0] < 2.0 && action[1] > 0.0 && action[1] < 1.0);
        let head_t = Tensor::<Cpu, 2>::from_data(TensorData::new(head.to_vec(), [1, 4]), &device);
        let act_t = Tensor::<Cpu, 2>::from_data(TensorData::new(action.to_vec(), [1, 2]), &device);
        let lp: f32 = squashed_gaussian_log_prob_tensor(head_t, act_t, &low, &high).into_scalar();
        assert!((lp - lp_host).abs() < 1e-4, "{lp} vs {lp_host}");
    }

    #[test]
    fn squashed_gaussian_density_integrates_to_one() {
        // 1-D: integrate exp(log_prob) over the box with a fine midpoint rule.
        let head = [0.3f32, -0.4];
        let (low, high) = ([-2.0f32], [2.0f32]);
        let n = 200_000;
        let width = 4.0 / n as f64;
        let mut total = 0.0f64;
        for k in 0..n {
            let a = -2.0 + (k as f64 + 0.5) * width;
            total +=
                (squashed_gaussian_log_prob(&head, &[a as f32], &low, &high) as f64).exp() * width;
        }
        assert!((total - 1.0).abs() < 2e-3, "density integrates to {total}");
    }

    #[test]
    fn multi_categorical_is_the_sum_of_its_components() {
        let device = cpu_device();
        let logits = vec![0.1f32, -0.3, 0.7, 1.0, 0.0, 2.0, -1.0];
        let nvec = [3usize, 4];
        let t = Tensor::<Cpu, 2>::from_data(TensorData::new(logits.clone(), [1, 7]), &device);
        let a = Tensor::<Cpu, 2, Int>::from_data(TensorData::new(vec![2i64, 1], [1, 2]), &device);
        let logp: Vec<f32> = multi_categorical_log_prob(t.clone(), a, &nvec)
            .into_data()
            .to_vec()
            .unwrap();
        let lp = |l: &[f32], i: usize| {
            let m = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            l[i] - m - l.iter().map(|x| (x - m).exp()).sum::<f32>().ln()
        };
        let want = lp(&logits[..3], 2) + lp(&logits[3..], 1);
        assert!((logp[0] - want).abs() < 1e-5, "{logp:?} vs {want}");
        let ent: Vec<f32> = multi_categorical_entropy(t, &nvec)
            .into_data()
            .to_vec()
            .unwrap();
        let h = |l: &[f32]| -(0..l.len()).map(|i| lp(l, i).exp() * lp(l, i)).sum::<f32>();
        assert!((ent[0] - h(&logits[..3]) - h(&logits[3..])).abs() < 1e-5);
    }
}

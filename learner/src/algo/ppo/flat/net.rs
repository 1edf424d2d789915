//! One PPO minibatch through the whole policy on host buffers: forward (normalizer, tanh
//! encoder, LSTM/GRU layers on the fused kernels, heads), the clipped-surrogate loss with value
//! loss and entropy bonus over a (multi-)categorical action, and the backward to every
//! parameter, written out by hand. Same maths as the burn path in [`crate::algo::ppo::autodiff`], which
//! the tests hold it to.

use recur_rnn::fused::host::{
    layer_backward, layer_forward, layer_inference, pack_layer, sgemm, tanh_in_place, LayerDims,
    LayerPacks, LayerParams, StoredStates, Tape,
};
use recur_rnn::{CellKind, Recompute};

use super::layout::{CoreSlots, DenseSlots, Layout};
use crate::run::metrics::UpdateStats;
use crate::run::profile::Phase;
use common::policy::image::concat_rows;

/// The network the flat parameters describe.
#[derive(Clone, Copy)]
pub struct Net<'a> {
    pub layout: &'a Layout,
    pub params: &'a [f32],
    /// The normalizer's rows `[4, obs_dim]`: mean, variance, count, clip.
    pub obs_norm: &'a [f32],
    pub cell: CellKind,
    pub hidden: usize,
    pub recompute: Recompute,
    /// Choices per action component (one component for a discrete action).
    pub nvec: &'a [usize],
    /// Each core layer's weights packed from `params` ([`Net::pack`]); `None`: each call
    /// packs its own.
    pub packs: Option<&'a [LayerPacks]>,
    /// `false`: every step starts from a zero state (`PolicyConfig::memory`).
    pub memory: bool,
}

/// `start`, `rs_h` and `rs_c` as the core sees them: themselves, or for a policy without
/// memory every step a start from zeros.
struct Starts {
    start: Vec<bool>,
    h: Vec<f32>,
    c: Option<Vec<f32>>,
}

impl Starts {
    fn of(memory: bool, start: &[bool], h: &[f32], c: Option<&[f32]>) -> Option<Starts> {
        (!memory).then(|| Starts {
            start: vec![true; start.len()],
            h: vec![0.0; h.len()],
            c: c.map(|c| vec![0.0; c.len()]),
        })
    }

    /// The starts and stored states the core reads: `zeros` ([`Starts::of`]) where there are,
    /// else the given ones.
    fn view<'a>(
        zeros: &'a Option<Starts>,
        start: &'a [bool],
        h: &'a [f32],
        c: Option<&'a [f32]>,
        layers: usize,
    ) -> (&'a [bool], StoredStates<'a>) {
        match zeros {
            None => (start, StoredStates { h, c, layers }),
            Some(z) => (
                &z.start,
                StoredStates {
                    h: &z.h,
                    c: z.c.as_deref(),
                    layers,
                },
            ),
        }
    }
}

/// A minibatch of `rows` slices of `len` steps, position `p = row * len + t`.
pub struct Batch<'a> {
    pub rows: usize,
    pub len: usize,
    /// `[N, obs_dim]`.
    pub obs: &'a [f32],
    /// `[N, F]`: every image's features, side by side (the convolutional encoders run on the
    /// whole minibatch before it is split into blocks); empty without images.
    pub images: &'a [f32],
    /// `[N]`: where a step takes its stored state.
    pub start: &'a [bool],
    /// `[N, layers, H]`.
    pub rs_h: &'a [f32],
    pub rs_c: Option<&'a [f32]>,
    /// `[N, components]`: the action indices (as stored in chunks).
    pub action: &'a [f32],
    pub old_logp: &'a [f32],
    pub target: &'a [f32],
    /// Normalized advantages.
    pub adv: &'a [f32],
    /// Real steps (padding is false).
    pub mask: &'a [bool],
}

/// Positions `at .. at + span` of `v`, which holds `n` positions of equal width.
pub(crate) fn part<T>(v: &[T], n: usize, at: usize, span: usize) -> &[T] {
    let w = v.len() / n;
    &v[at * w..(at + span) * w]
}

impl Batch<'_> {
    /// Rows `first .. first + rows` of this minibatch.
    pub fn rows(&self, first: usize, rows: usize) -> Batch<'_> {
        let (n, at) = (self.rows * self.len, first * self.len);
        let span = rows * self.len;
        Batch {
            rows,
            len: self.len,
            obs: part(self.obs, n, at, span),
            images: part(self.images, n, at, span),
            start: part(self.start, n, at, span),
            rs_h: part(self.rs_h, n, at, span),
            rs_c: self.rs_c.map(|c| part(c, n, at, span)),
            action: part(self.action, n, at, span),
            old_logp: part(self.old_logp, n, at, span),
            target: part(self.target, n, at, span),
            adv: part(self.adv, n, at, span),
            mask: part(self.mask, n, at, span),
        }
    }
}

/// The log-ratio of new to old action probabilities is clamped to `±LOG_RATIO_LIMIT` before
/// `exp` (in both update paths), and passes no gradient where the clamp bites. A squashed
/// Gaussian whose `log_std` sits at its floor makes the log-probability of a saturated action
/// so sensitive to the mean that one optimizer step can move it by hundreds: unclamped, the
/// ratio overflowed to `inf` and the weights went NaN (POPGym Pendulum, issue 59). `exp(20)`
/// is far outside any clip range, so an ordinary update never meets the clamp.
pub const LOG_RATIO_LIMIT: f32 = 20.0;

/// The loss's coefficients at this point of the run.
#[derive(Clone, Copy, Debug)]
pub struct LossConfig {
    pub clip_eps: f32,
    pub value_coef: f32,
    pub entropy_coef: f32,
}

/// The gradient of every parameter (flat, the layout's order), and the loss, its parts and
/// diagnostics (every [`UpdateStats`] field but `grad_norm` and `q_mean`).
pub struct Outcome {
    pub grads: Vec<f32>,
    pub stats: UpdateStats,
    /// The loss's gradient with respect to [`Batch::images`] `[N, F]` (empty without images):
    /// what the convolutional encoders' backward starts from.
    pub d_images: Vec<f32>,
}

impl Net<'_> {
    fn p(&self, slot: &super::layout::Slot) -> &[f32] {
        &self.params[slot.range()]
    }

    /// Core layer `l`'s parameters (and their packs, where the net has them).
    fn core_params(&self, l: usize) -> LayerParams<'_> {
        let c = &self.layout.core[l];
        LayerParams {
            w_ih: self.p(&c.w_ih),
            w_hh: self.p(&c.w_hh),
            b_ih: c.b_ih.as_ref().map(|s| self.p(s)),
            b_hh: c.b_hh.as_ref().map(|s| self.p(s)),
            packs: self.packs.map(|p| &p[l]),
        }
    }

    /// Every core layer's weights packed from `params`, for [`Net::packs`].
    pub fn pack(&self) -> Vec<LayerPacks> {
        // Through a net without packs: `FlatUpdate::of` packs the first time from a net
        // whose packs are still empty, and packing reads only the values anyway.
        let own = Net {
            packs: None,
            ..*self
        };
        (0..self.layout.core.len())
            .map(|l| pack_layer(&own.dims(&own.layout.core[l], 1, 1), &own.core_params(l)))
            .collect()
    }

    /// `x W + b` for a burn `Linear` (`W` `[in, out]`) over `n` rows.
    fn dense(&self, l: &DenseSlots, x: &[f32], n: usize) -> Vec<f32> {
        let (w, bias) = (self.p(&l.weight), self.p(&l.bias));
        let mut y = vec![0.0f32; n * l.output];
        sgemm(n, l.output, l.input, x, false, w, false, 0.0, &mut y);
        for row in y.chunks_exact_mut(l.output) {
            row.iter_mut().zip(bias).for_each(|(y, b)| *y += b);
        }
        y
    }

    /// `clamp((obs - mean) / sqrt(var + 1e-8), -clip, clip)` per feature.
    fn normalize(&self, obs: &[f32]) -> Vec<f32> {
        let d = self.obs_norm.len() / 4;
        if d == 0 {
            return Vec::new();
        }
        let row = |r: usize| &self.obs_norm[r * d..(r + 1) * d];
        let (mean, var, clip) = (row(0), row(1), row(3));
        let mut x = obs.to_vec();
        for row in x.chunks_exact_mut(d) {
            for j in 0..d {
                let v = (row[j] - mean[j]) / (var[j] + 1e-8).sqrt();
                row[j] = v.max(-clip[j]).min(clip[j]);
            }
        }
        x
    }

    /// Normalizes and encodes `n` observations: every encoder layer's input, then the
    /// encoder's output (empty without an observation's values).
    fn encode(&self, obs: &[f32], n: usize) -> Vec<Vec<f32>> {
        let mut acts = vec![self.normalize(obs)];
        for l in &self.layout.encoder {
            let mut z = self.dense(l, acts.last().expect("non-empty"), n);
            tanh_in_place(&mut z);
            acts.push(z);
        }
        acts
    }

    /// The core's input `[n, values + F]` where there are images: the MLP's output (`values`
    /// wide; none without an observation's values) and the images' features, row by row.
    /// `None` without images: the MLP's output is the core's input as it is.
    fn core_input(values: &[f32], images: &[f32], n: usize) -> Option<Vec<f32>> {
        (!images.is_empty()).then(|| {
            let mut x = Vec::new();
            concat_rows(&[values, images], n, &mut x);
            x
        })
    }

    /// A core layer call's shape over `[rows, len]`.
    fn dims(&self, c: &CoreSlots, rows: usize, len: usize) -> LayerDims {
        LayerDims {
            cell: self.cell,
            rows,
            steps: len,
            input: c.input,
            hidden: self.hidden,
        }
    }

    /// The loss of `b` (a minibatch, or a block of its rows) under `cfg` and its gradients,
    /// every mean taken over the minibatch's `count` real steps: the blocks' losses,
    /// statistics and gradients add up to the minibatch's.
    pub fn ppo(&self, b: &Batch<'_>, cfg: LossConfig, count: f32) -> Outcome {
        let n = b.rows * b.len;
        let forward = Phase::start("fused.forward");
        let (h, layout) = (self.hidden, self.layout);
        let layers = layout.core.len();
        // Forward. acts[k] is encoder layer k's input; the last is the core's input.
        let acts = self.encode(b.obs, n);
        let values = acts.last().expect("non-empty");
        let values_width = values.len() / n;
        let joined = Self::core_input(values, b.images, n);
        let core_in = joined.as_deref().unwrap_or(values);
        let zeros = Starts::of(self.memory, b.start, b.rs_h, b.rs_c);
        let (start, stored) = Starts::view(&zeros, b.start, b.rs_h, b.rs_c, layers);
        let mut outs: Vec<Vec<f32>> = Vec::with_capacity(layers);
        let mut tapes: Vec<Tape> = Vec::with_capacity(layers);
        for (l, c) in layout.core.iter().enumerate() {
            let input = if l == 0 { core_in } else { &outs[l - 1] };
            let mut out = vec![0.0f32; n * h];
            let tape = layer_forward(
                &self.dims(c, b.rows, b.len),
                &self.core_params(l),
                input,
                start,
                stored,
                l,
                self.recompute,
                &mut out,
            );
            outs.push(out);
            tapes.push(tape);
        }
        let features = outs.last().expect("at least one layer");
        let logits = self.dense(&layout.policy_head, features, n);
        let value = self.dense(&layout.value_head, features, n);
        drop(forward);
        let loss_phase = Phase::start("fused.loss");

        // Loss and its gradient with respect to the heads' outputs.
        let width = layout.policy_head.output;
        let comps = self.nvec.len();
        let mut d_logits = vec![0.0f32; n * width];
        let mut d_value = vec![0.0f32; n];
        let (mut pl, mut vl, mut ent_sum, mut kl, mut clipped) = (0.0f32, 0.0, 0.0, 0.0, 0.0);
        let (lo, hi) = (1.0 - cfg.clip_eps, 1.0 + cfg.clip_eps);
        let mut logp = vec![0.0f32; width];
        let mut prob = vec![0.0f32; width];
        let mut comp_entropy = vec![0.0f32; comps];
        for i in 0..n {
            let z = &logits[i * width..(i + 1) * width];
            let (mut lp, mut entropy, mut at) = (0.0f32, 0.0f32, 0);
            for (j, &k) in self.nvec.iter().enumerate() {
                let zs = &z[at..at + k];
                let max = zs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let lse = max + zs.iter().map(|v| (v - max).exp()).sum::<f32>().ln();
                let mut e = 0.0f32;
                for q in 0..k {
                    logp[at + q] = zs[q] - lse;
                    prob[at + q] = logp[at + q].exp();
                    e -= prob[at + q] * logp[at + q];
                }
                let a = b.action[i * comps + j] as usize;
                debug_assert!(a < k, "action {a} of component {j} within {k} choices");
                lp += logp[at + a.min(k - 1)];
                comp_entropy[j] = e;
                entropy += e;
                at += k;
            }
            if !b.mask[i] {
                continue;
            }
            let w = 1.0 / count;
            let raw_log_ratio = lp - b.old_logp[i];
            let log_ratio = raw_log_ratio.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT);
            let ratio = log_ratio.exp();
            let adv = b.adv[i];
            let (s1, s2) = (ratio * adv, ratio.clamp(lo, hi) * adv);
            pl += s1.min(s2);
            let err = value[i] - b.target[i];
            vl += err * err;
            ent_sum += entropy;
            kl += ratio - 1.0 - log_ratio;
            clipped += ((ratio - 1.0).abs() > cfg.clip_eps) as u8 as f32;
            // d(-min(s1, s2))/d ratio: the unclipped term where it is the smaller one or the
            // clamp passes the ratio through.
            // The clamp on the log-ratio passes no gradient where it bites (as burn's clamp).
            let limited = raw_log_ratio.abs() > LOG_RATIO_LIMIT;
            let g_ratio = if !limited && (s1 <= s2 || (lo..=hi).contains(&ratio)) {
                adv
            } else {
                0.0
            };
            let d_lp = -w * g_ratio * ratio;
            let d_ent = -cfg.entropy_coef * w;
            let mut at = 0;
            for (j, &k) in self.nvec.iter().enumerate() {
                let a = (b.action[i * comps + j] as usize).min(k - 1);
                let e = comp_entropy[j];
                for q in 0..k {
                    let p = prob[at + q];
                    let onehot = (q == a) as u8 as f32;
                    // dH/dz = -p (log p + H).
                    d_logits[i * width + at + q] =
                        d_lp * (onehot - p) + d_ent * (-p * (logp[at + q] + e));
                }
                at += k;
            }
            d_value[i] = cfg.value_coef * w * err;
        }
        let policy_loss = -pl / count;
        let value_loss = vl / count * 0.5;
        let entropy = ent_sum / count;
        let loss = policy_loss + value_loss * cfg.value_coef - entropy * cfg.entropy_coef;

        drop(loss_phase);
        let _backward = Phase::start("fused.backward");
        let mut grads = vec![0.0f32; layout.total];
        let ph = &layout.policy_head;
        let vh = &layout.value_head;
        self.dense_weight_grads(ph, features, &d_logits, n, &mut grads);
        self.dense_weight_grads(vh, features, &d_value, n, &mut grads);
        // d features = dlogits Wp^T + dvalue Wv^T.
        let mut dh = self.dense_input_grad(ph, &d_logits, n);
        let wv = self.p(&vh.weight);
        for (row, &dv) in dh.chunks_exact_mut(h).zip(&d_value) {
            row.iter_mut().zip(wv).for_each(|(d, &w)| *d += dv * w);
        }
        for (l, (c, tape)) in layout.core.iter().zip(tapes).enumerate().rev() {
            let input = if l == 0 { core_in } else { &outs[l - 1] };
            let want_x = l > 0 || !layout.encoder.is_empty() || !b.images.is_empty();
            let g = layer_backward(tape, &self.core_params(l), input, start, &dh, want_x);
            grads[c.w_ih.range()].copy_from_slice(&g.w_ih);
            grads[c.w_hh.range()].copy_from_slice(&g.w_hh);
            if let (Some(s), Some(v)) = (&c.b_ih, &g.b_ih) {
                grads[s.range()].copy_from_slice(v);
            }
            if let (Some(s), Some(v)) = (&c.b_hh, &g.b_hh) {
                grads[s.range()].copy_from_slice(v);
            }
            if let Some(dx) = g.x {
                dh = dx;
            }
        }
        // Split d(core input) into the MLP's part and the images'.
        let mut d_images = Vec::new();
        if !b.images.is_empty() {
            let w = dh.len() / n;
            let (mut dv, wi) = (Vec::with_capacity(n * values_width), w - values_width);
            d_images.reserve(n * wi);
            for row in dh.chunks_exact(w) {
                dv.extend_from_slice(&row[..values_width]);
                d_images.extend_from_slice(&row[values_width..]);
            }
            dh = dv;
        }
        for (k, l) in layout.encoder.iter().enumerate().rev() {
            // dh is d(output of layer k); through tanh: d z = d out * (1 - out^2).
            let out = &acts[k + 1];
            for (d, &y) in dh.iter_mut().zip(out) {
                *d *= 1.0 - y * y;
            }
            self.dense_weight_grads(l, &acts[k], &dh, n, &mut grads);
            if k > 0 {
                dh = self.dense_input_grad(l, &dh, n);
            }
        }
        Outcome {
            grads,
            stats: UpdateStats {
                loss,
                policy_loss,
                value_loss,
                entropy,
                approx_kl: kl / count,
                clip_frac: clipped / count,
                ..UpdateStats::default()
            },
            d_images,
        }
    }

    /// Inference over `[rows, len]` from stored states (`rs_h`/`rs_c` `[N, layers, H]`): the
    /// value of every position and the post-step state `[N, layers, H]` at every segment end
    /// (other positions zero): what PPO's critic pass needs.
    #[allow(clippy::too_many_arguments)]
    pub fn values(
        &self,
        rows: usize,
        len: usize,
        obs: &[f32],
        images: &[f32],
        start: &[bool],
        rs_h: &[f32],
        rs_c: Option<&[f32]>,
    ) -> (Vec<f32>, Vec<f32>, Option<Vec<f32>>) {
        let (n, h, layout) = (rows * len, self.hidden, self.layout);
        let layers = layout.core.len();
        let values = self.encode(obs, n).pop().expect("non-empty");
        let mut x = Self::core_input(&values, images, n).unwrap_or(values);
        let zeros = Starts::of(self.memory, start, rs_h, rs_c);
        let (start, stored) = Starts::view(&zeros, start, rs_h, rs_c, layers);
        let mut next_h = vec![0.0f32; n * layers * h];
        let mut next_c = self
            .cell
            .has_cell_state()
            .then(|| vec![0.0f32; n * layers * h]);
        for (l, c) in layout.core.iter().enumerate() {
            let mut out = vec![0.0f32; n * h];
            layer_inference(
                &self.dims(c, rows, len),
                &self.core_params(l),
                &x,
                start,
                stored,
                l,
                &mut out,
                next_c.as_deref_mut(),
            );
            for p in 0..n {
                if p % len + 1 == len || start[p + 1] {
                    let at = (p * layers + l) * h;
                    next_h[at..at + h].copy_from_slice(&out[p * h..(p + 1) * h]);
                }
            }
            x = out;
        }
        let value = self.dense(&layout.value_head, &x, n);
        (value, next_h, next_c)
    }

    /// `dx = dy W^T` (`[n, in]`) of a dense layer.
    fn dense_input_grad(&self, l: &DenseSlots, dy: &[f32], n: usize) -> Vec<f32> {
        let mut dx = vec![0.0f32; n * l.input];
        let w = self.p(&l.weight);
        sgemm(n, l.input, l.output, dy, false, w, true, 0.0, &mut dx);
        dx
    }

    /// `dW = x^T dy` (`[in, out]`) and `db = sum over rows of dy`, into `grads`.
    fn dense_weight_grads(
        &self,
        l: &DenseSlots,
        x: &[f32],
        dy: &[f32],
        n: usize,
        grads: &mut [f32],
    ) {
        let dw = &mut grads[l.weight.range()];
        sgemm(l.input, l.output, n, x, true, dy, false, 0.0, dw);
        let db = &mut grads[l.bias.range()];
        db.fill(0.0);
        for row in dy.chunks_exact(l.output) {
            db.iter_mut().zip(row).for_each(|(d, &g)| *d += g);
        }
    }
}

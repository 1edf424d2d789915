//! PPO's flat update on the CPU, the one `ppo.update = "fused"` selects (the config value and
//! the profile phases `fused.*` keep that name): a whole minibatch step (normalizer, encoder,
//! recurrent core, heads, PPO loss, their hand-written backward, global-norm clipping and Adam)
//! over one flat parameter, gradient and Adam buffer on host memory, running the recurrent
//! layers on the fused kernels of `recur_rnn::fused`, with no burn op and no autodiff
//! graph in between.
//!
//! [`FlatUpdate`] is one of PPO's update paths ([`Update`]). The burn module stays the model of
//! record. [`FlatUpdate::of`] reads its parameters into one flat buffer and Adam's moments out of
//! burn's optimizer, the minibatches step that buffer, and the end of an update writes it back;
//! Adam's moments live here between updates and go into burn's optimizer record only for a
//! checkpoint ([`adam::into_burn`]), so a checkpoint has one format whichever path wrote it.
//! burn's path ([`super::autodiff`]) is the reference the tests hold this one to: same loss, same
//! gradients, same weights after a few updates.

pub mod adam;
pub mod layout;
pub mod net;

use std::any::TypeId;
use std::borrow::Cow;

use burn::tensor::backend::{AutodiffBackend, Backend};
use common::backend::{to_vec as host, CpuAutodiff};
use common::chunk::{Chunk, ChunkSchema};
use common::policy::{ActionSpec, CriticCore, Policy, PolicyConfig};
use recur_rnn::fused::{
    self,
    host::{threads_for, LayerPacks},
};
use recur_rnn::{CellKind, RecurrentBackend};

use std::sync::{Mutex, MutexGuard};

use common::policy::image::{concat_rows, image_shape, ImageSpec};
use recur_rnn::encoder::{Encoder, EncoderGrads, Tape as EncoderTape};

use adam::FlatAdam;
use layout::{CnnSlots, Layout};
use net::{part, Batch, LossConfig, Net, Outcome};

use super::update::{Minibatch, Update};
use crate::algo::optim::Trainee;
use crate::algo::slices::gather;
use crate::run::metrics::UpdateStats;
use crate::run::profile::{self, Phase};

/// The lock's value, also after a panic elsewhere (the encoders hold no invariant a panic
/// could break: every call rewrites what it reads).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Why `model` cannot take the fused update (`None`: it can), naming the setting.
pub fn unsupported<B: Backend>(model: &Policy<B>) -> Option<String> {
    let (policy, core) = (model.config(), &model.core);
    if TypeId::of::<B>() != TypeId::of::<CpuAutodiff>() {
        return Some("a learner device other than the CPU".to_string());
    }
    if core.backend() != RecurrentBackend::Fused {
        return Some(format!(
            "policy.backend = \"{}\" (resolved; the fused update runs the fused kernels)",
            core.backend().name()
        ));
    }
    if !matches!(policy.cell, CellKind::Lstm | CellKind::Gru) {
        return Some(format!(
            "policy.cell = \"{}\" (the fused update runs LSTM and GRU cores)",
            policy.cell.name()
        ));
    }
    if policy.critic_core != CriticCore::Shared {
        return Some("policy.critic_core = \"separate\"".to_string());
    }
    if let ActionSpec::Continuous { .. } = policy.action {
        return Some("a continuous (Box) action space".to_string());
    }
    let dropout = core.config().dropout;
    (dropout != 0.0).then(|| format!("dropout {dropout} between the core's layers"))
}

/// The choices per component of a (multi-)discrete action.
fn nvec(action: &ActionSpec) -> Vec<usize> {
    match action {
        ActionSpec::Discrete { n } => vec![*n],
        ActionSpec::MultiDiscrete { nvec } => nvec.clone(),
        ActionSpec::Continuous { .. } => unreachable!("checked by `unsupported`"),
    }
}

/// The fused update's state: the layout, the parameters during an update, Adam's moments.
pub struct FlatUpdate {
    layout: Layout,
    params: Vec<f32>,
    obs_norm: Vec<f32>,
    adam: FlatAdam,
    config: PolicyConfig,
    recompute: recur_rnn::Recompute,
    /// Choices per action component.
    nvec: Vec<usize>,
    /// The core layers' weights packed from `params` (repacked by each [`apply`](Self::apply)):
    /// the critic pass, its bootstrap and a minibatch's forward and backward share them.
    packs: Vec<LayerPacks>,
    /// One convolutional encoder per image, its parameters copied from `params` (by
    /// [`of`](Self::of) and each [`apply`](Self::apply)).
    images: Mutex<Vec<ImageTrainer>>,
}

/// One image's encoder on the host ([`Encoder`]: im2col into the fused GEMM, a hand-written
/// backward), with what its backward keeps between a minibatch's forward and backward.
struct ImageTrainer {
    spec: ImageSpec,
    encoder: Encoder,
    slots: CnnSlots,
    tape: EncoderTape,
    grads: EncoderGrads,
}

impl ImageTrainer {
    fn new(spec: &ImageSpec, slots: CnnSlots) -> Self {
        let encoder = Encoder::new(&spec.config, image_shape(&spec.part), 0)
            .expect("the model's encoder was built from this config and shape");
        ImageTrainer {
            grads: EncoderGrads::zeros(&encoder),
            spec: spec.clone(),
            encoder,
            slots,
            tape: EncoderTape::default(),
        }
    }

    /// Copies this encoder's parameters out of the flat buffer (torch's layouts).
    fn load(&mut self, params: &[f32]) {
        for (name, slot, transposed) in &self.slots.params {
            let v = &params[slot.range()];
            let values = if *transposed {
                transpose(v, slot.shape[0], slot.shape[1])
            } else {
                v.to_vec()
            };
            self.encoder
                .set_param(name, &values)
                .expect("the layout's slots are the encoder's parameters");
        }
    }
}

/// `[rows, cols]` -> `[cols, rows]`.
fn transpose(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0f32; v.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = v[r * cols + c];
        }
    }
    t
}

impl FlatUpdate {
    /// The fused update of `trainee`'s model (checked with [`unsupported`] first) with the Adam
    /// state of its optimizer: at the start, and anew after a checkpoint load (the loaded record
    /// brings its own parameter ids).
    pub fn of<B: AutodiffBackend>(trainee: &Trainee<B>) -> Self {
        let model = &trainee.model;
        let layout = Layout::of(model);
        let mut fused = FlatUpdate {
            adam: adam::from_burn(&layout, trainee.optim()),
            params: layout.read(model),
            obs_norm: host(model.obs_norm.val()),
            config: model.config().clone(),
            nvec: nvec(&model.config().action),
            recompute: model.core.config().recompute,
            images: Mutex::new(
                (model.cnn.iter().zip(&layout.cnn))
                    .map(|(e, slots)| ImageTrainer::new(e.spec(), slots.clone()))
                    .collect(),
            ),
            layout,
            packs: Vec::new(),
        };
        fused.packs = fused.net().pack();
        fused.load_images();
        fused
    }

    /// The image encoders' parameters from the flat buffer.
    fn load_images(&mut self) {
        let params = &self.params;
        for img in lock(&self.images).iter_mut() {
            img.load(params);
        }
    }

    /// Every image's features `[n, F]` side by side, of a pixels lane `[n, px]` (empty without
    /// images). `train`: each encoder keeps its tape for [`images_backward`](Self::images_backward).
    pub fn encode_images(&self, pixels: &[u8], n: usize, train: bool) -> Vec<f32> {
        let mut images = lock(&self.images);
        if images.is_empty() || n == 0 {
            return Vec::new();
        }
        let _phase = Phase::start("fused.images");
        let px = pixels.len() / n;
        let mut own = Vec::new();
        let mut parts: Vec<&[f32]> = Vec::with_capacity(images.len());
        for img in images.iter_mut() {
            let ImageTrainer {
                spec,
                encoder,
                tape,
                ..
            } = img;
            let bytes = spec.bytes_in(pixels, px, &mut own);
            let features = if train {
                encoder.forward_train(bytes, n, tape)
            } else {
                encoder.forward(bytes, n)
            };
            parts.push(features.expect("the pixels lane holds every image of every step"));
        }
        let mut out = Vec::new();
        concat_rows(&parts, n, &mut out);
        out
    }

    /// Adds to `grads` (flat, burn's layouts) the image encoders' parameter gradients of the
    /// last training [`encode_images`](Self::encode_images), given `d_images` `[n, F]`.
    pub fn images_backward(&self, d_images: &[f32], grads: &mut [f32]) {
        let mut images = lock(&self.images);
        if images.is_empty() {
            return;
        }
        let _phase = Phase::start("fused.images");
        let n = d_images.len() / images.iter().map(|i| i.slots.features).sum::<usize>();
        let total = d_images.len() / n.max(1);
        let mut at = 0;
        for img in images.iter_mut() {
            let f = img.slots.features;
            let d: Vec<f32> = (0..n)
                .flat_map(|p| d_images[p * total + at..p * total + at + f].iter().copied())
                .collect();
            at += f;
            img.grads.zero();
            let ImageTrainer {
                encoder,
                tape,
                grads: g,
                ..
            } = img;
            encoder
                .backward(tape, &d, g)
                .expect("the tape is of these parameters and these frames");
            for (name, slot, transposed) in &img.slots.params {
                let v = img.grads.get(name).expect("a gradient per parameter");
                let out = &mut grads[slot.range()];
                if *transposed {
                    // torch [features, flat] -> burn [flat, features].
                    out.copy_from_slice(&transpose(v, slot.shape[1], slot.shape[0]));
                } else {
                    out.copy_from_slice(v);
                }
            }
        }
    }

    /// The network as the parameters stand (its `values` are the critic's pass).
    pub fn net(&self) -> Net<'_> {
        Net {
            layout: &self.layout,
            params: &self.params,
            obs_norm: &self.obs_norm,
            cell: self.config.cell,
            hidden: self.config.hidden_size,
            recompute: self.recompute,
            nvec: &self.nvec,
            packs: Some(&self.packs),
            memory: self.config.memory,
        }
    }

    /// The loss of one minibatch and its gradients (no step), over `blocks` blocks of its rows
    /// (see [`by_row_blocks`]) whose gradients add up; `None`: one per thread where the rows
    /// allow several.
    pub fn loss(&self, batch: &Batch<'_>, cfg: LossConfig, blocks: Option<usize>) -> Outcome {
        let count = batch.mask.iter().filter(|&&m| m).count() as f32;
        self.loss_over(batch, cfg, blocks, count)
    }

    /// [`loss`](Self::loss) with its means taken over `count` steps: the whole group's
    /// minibatch where several learner ranks each hold a part of it.
    pub fn loss_over(
        &self,
        batch: &Batch<'_>,
        cfg: LossConfig,
        blocks: Option<usize>,
        count: f32,
    ) -> Outcome {
        let blocks = blocks.unwrap_or_else(|| threads_for(batch.rows, batch.len));
        let net = self.net();
        let mut parts = by_row_blocks(batch.rows, blocks, |first, rows| {
            net.ppo(&batch.rows(first, rows), cfg, count)
        });
        if parts.len() == 1 {
            return parts.pop().expect("one part");
        }
        let mut grads = vec![0.0f32; self.layout.total];
        let mut d_images = Vec::new();
        for o in &parts {
            grads.iter_mut().zip(&o.grads).for_each(|(g, &v)| *g += v);
            d_images.extend_from_slice(&o.d_images);
        }
        let stats: Vec<_> = parts.into_iter().map(|o| o.stats).collect();
        Outcome {
            grads,
            stats: UpdateStats::sum(&stats),
            d_images,
        }
    }

    /// The critic's pass ([`Net::values`]) over `blocks` blocks of the rows (see
    /// [`by_row_blocks`]); `None`: one per thread where the rows allow several.
    #[allow(clippy::too_many_arguments)]
    pub fn values(
        &self,
        len: usize,
        obs: &[f32],
        pixels: &[u8],
        start: &[bool],
        rs_h: &[f32],
        rs_c: Option<&[f32]>,
        blocks: Option<usize>,
    ) -> (Vec<f32>, Vec<f32>, Option<Vec<f32>>) {
        let blocks = blocks.unwrap_or_else(|| threads_for(start.len() / len, len));
        let net = self.net();
        let n = start.len();
        let images = self.encode_images(pixels, n, false);
        let parts = by_row_blocks(n / len, blocks, |first, rows| {
            let (at, span) = (first * len, rows * len);
            net.values(
                rows,
                len,
                part(obs, n, at, span),
                part(&images, n, at, span),
                part(start, n, at, span),
                part(rs_h, n, at, span),
                rs_c.map(|c| part(c, n, at, span)),
            )
        });
        let mut parts = parts.into_iter();
        let mut out = parts.next().expect("at least one block");
        for (value, next_h, next_c) in parts {
            out.0.extend(value);
            out.1.extend(next_h);
            if let (Some(all), Some(c)) = (out.2.as_mut(), next_c) {
                all.extend(c);
            }
        }
        out
    }

    /// One optimizer step along `grads` (from [`loss`](Self::loss), summed over the learner
    /// ranks by [`Update::step`]): clipped to a global norm of `max_norm`, then Adam at `lr`.
    /// Returns the norm before clipping.
    pub fn apply(&mut self, grads: &mut [f32], lr: f64, max_norm: f32) -> f32 {
        let norm = adam::clip_global_norm(&self.layout, grads, max_norm);
        self.adam.step(&mut self.params, grads, lr);
        self.packs = profile::time("fused.pack", || self.net().pack());
        self.load_images();
        norm
    }

    /// The minibatch's loss and gradients (no step).
    pub(crate) fn minibatch_loss(&self, mb: &Minibatch<'_>) -> Outcome {
        let s = mb.slices();
        let action_dim = s.sb.storage.schema().action_dim();
        let n = s.sb.rows * s.sb.len;
        let real = RealSteps::of(s.sb.mask());
        let images = real.encode(self, &s.inputs.pixels, n);
        let batch = Batch {
            rows: s.sb.rows,
            len: s.sb.len,
            obs: &s.inputs.obs,
            images: &images,
            start: &s.inputs.is_init,
            rs_h: &s.inputs.rs_h,
            rs_c: s.inputs.rs_c.as_deref(),
            action: &s.sb.gather(&s.sb.storage.action, action_dim),
            old_logp: &s.old_logp,
            target: &s.target,
            adv: &s.adv,
            mask: s.sb.mask(),
        };
        let mut out = self.loss_over(&batch, mb.loss, None, s.count);
        let d_images = real.gather(&out.d_images, n);
        self.images_backward(&d_images, &mut out.grads);
        out
    }
}

/// The real (unpadded) steps of a minibatch, where its image encoders run: with slices that end
/// at episode ends (`ppo.pack_slices = false`) most of a short-episode task's `[rows, len]`
/// batch is padding, which no loss term reads. Padding is trailing in each row, so the core
/// never carries a padded step's features into a real one; the padded features are zeros, and
/// their gradients, zero anyway (the loss's mask), are left out of the encoder's backward.
struct RealSteps {
    /// The real positions, in order; `None`: every position is real.
    keep: Option<Vec<usize>>,
}

impl RealSteps {
    fn of(mask: &[bool]) -> Self {
        let keep = (mask.iter().enumerate())
            .filter(|&(_, &m)| m)
            .map(|(p, _)| p)
            .collect::<Vec<_>>();
        RealSteps {
            keep: (!keep.is_empty() && keep.len() < mask.len()).then_some(keep),
        }
    }

    /// The training features `[n, F]` of every position of `pixels` (`[n, px]`): the encoders'
    /// on the real ones, zeros on the padding.
    fn encode(&self, fused: &FlatUpdate, pixels: &[u8], n: usize) -> Vec<f32> {
        let Some(keep) = &self.keep else {
            return fused.encode_images(pixels, n, true);
        };
        if pixels.is_empty() {
            return Vec::new();
        }
        let px = pixels.len() / n;
        let features = fused.encode_images(&gather(pixels, keep, px), keep.len(), true);
        if features.is_empty() {
            return features;
        }
        let f = features.len() / keep.len(); // `of` never keeps an empty list
        let mut out = vec![0.0f32; n * f];
        for (row, &p) in features.chunks_exact(f).zip(keep) {
            out[p * f..(p + 1) * f].copy_from_slice(row);
        }
        out
    }

    /// The rows of `d` (`[n, F]`) at the real positions, as [`encode`](Self::encode) ran them.
    fn gather<'d>(&self, d: &'d [f32], n: usize) -> Cow<'d, [f32]> {
        match &self.keep {
            Some(keep) if !d.is_empty() => Cow::Owned(gather(d, keep, d.len() / n)),
            _ => Cow::Borrowed(d),
        }
    }
}

impl<B: AutodiffBackend> Update<B> for FlatUpdate {
    fn name(&self) -> &'static str {
        "fused"
    }

    fn critic(
        &self,
        chunk: &Chunk,
        s: &ChunkSchema,
        rows: &[usize],
    ) -> (Vec<f32>, Option<Vec<f32>>) {
        let (t, d, lh) = (s.steps, s.obs_dim, s.num_layers * s.hidden_size);
        // Every row starts from its stored state (recurrent mode's segment starts).
        let start: Vec<bool> = (chunk.is_init.iter().enumerate())
            .map(|(p, &x)| x == 1 || p % t == 0)
            .collect();
        let (obs, rs_h, rs_c) = (&chunk.observation, &chunk.rs_h, chunk.rs_c.as_deref());
        let px = &chunk.pixels;
        let (value, next_h, next_c) = self.values(t, obs, px, &start, rs_h, rs_c, None);
        let boot = (!rows.is_empty()).then(|| {
            let obs = gather(&chunk.next_observation, rows, d);
            let px = gather(&chunk.next_pixels, rows, s.pixels());
            let h = gather(&next_h, rows, lh);
            let c = next_c.map(|c| gather(&c, rows, lh));
            let start = vec![true; rows.len()];
            self.values(1, &obs, &px, &start, &h, c.as_deref(), None).0
        });
        (value, boot)
    }

    fn step(&mut self, _: &mut Trainee<B>, mb: &Minibatch<'_>) -> anyhow::Result<UpdateStats> {
        let Outcome {
            mut grads,
            mut stats,
            ..
        } = self.minibatch_loss(mb);
        let grad_norm = profile::time("fused.optimizer", || {
            // Several learner ranks: each rank's loss divided by the group's count of steps,
            // the sum of their gradients is the gradient of the whole group's minibatch
            // (train/group.rs), so that every rank steps alike; the statistics (each rank's
            // part of the group's means) ride in the same all-reduce.
            if crate::ranks::world().size > 1 {
                let n = grads.len();
                grads.extend(stats.ppo_parts());
                crate::ranks::all_reduce_gradient(&mut grads)?;
                stats.set_ppo_parts(grads[n..].try_into().expect("six statistics"));
                grads.truncate(n);
            }
            Ok::<_, crate::ranks::RankLost>(self.apply(&mut grads, mb.lr, mb.max_grad_norm))
        })?;
        Ok(UpdateStats { grad_norm, ..stats })
    }

    /// Writes the parameters trained into the model of record and takes its normalizer (the
    /// parameters are read once, by [`of`](FlatUpdate::of): only this changes them afterwards).
    fn finish(&mut self, trainee: &mut Trainee<B>) {
        let sync = || self.layout.write(trainee.model.clone(), &self.params);
        trainee.model = profile::time("sync", sync);
        self.obs_norm = host(trainee.model.obs_norm.val());
    }

    fn save(&self, trainee: &Trainee<B>) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
        let optim = trainee.optim().clone();
        let optim = adam::into_burn(&self.layout, &self.adam, optim, &trainee.device());
        trainee.save_state(Some(optim))
    }
}

/// `f(first, rows)` over `blocks` blocks of `rows` rows, in row order, each on a thread of its
/// own through the whole network, with the kernels on that thread alone. The callers take one
/// block per thread where the rows allow several ([`threads_for`]): one wake-up of the pool
/// per call, and the encoder, heads and loss split too (splitting only the recurrent core's
/// rows woke the pool for each layer's forward and backward, and left the rest to one thread).
fn by_row_blocks<T: Send>(
    rows: usize,
    blocks: usize,
    f: impl Fn(usize, usize) -> T + Sync,
) -> Vec<T> {
    if blocks < 2 {
        return vec![f(0, rows)];
    }
    let f = &f;
    fused::parallel(
        fused::blocks(rows, blocks)
            .into_iter()
            .map(|(first, rows)| move || fused::single_threaded(|| f(first, rows)))
            .collect(),
    )
}

#[cfg(test)]
mod image_tests;
#[cfg(test)]
mod tests;

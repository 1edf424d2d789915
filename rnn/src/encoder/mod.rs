//! A convolutional image encoder on the CPU: `uint8` frames in, features out, with a
//! hand-written backward for the learner.
//!
//! ```
//! use recur_rnn::encoder::{Encoder, EncoderConfig, EncoderGrads, ImageShape, Tape};
//!
//! // MiniGrid's 7x7x3 codes through the `minigrid` preset: [N, 7, 7, 3] bytes -> [N, 128].
//! let mut enc = Encoder::new(&EncoderConfig::minigrid(), ImageShape::new(7, 7, 3), 0)?;
//! let obs = vec![1u8; 4 * 7 * 7 * 3];
//! assert_eq!(enc.forward(&obs, 4)?.len(), 4 * 128); // the actor's call: no tape
//!
//! // The learner's: a tape, then the gradient of sum(features * g) for every parameter.
//! let mut tape = Tape::default();
//! let features = enc.forward_train(&obs, 4, &mut tape)?.to_vec();
//! let mut grads = EncoderGrads::zeros(&enc);
//! enc.backward(&tape, &vec![1.0; features.len()], &mut grads)?;
//! assert_eq!(grads.get("convs.0.weight").unwrap().len(), 16 * 3 * 2 * 2);
//! # Ok::<(), recur_rnn::encoder::EncoderError>(())
//! ```
//!
//! # What it computes
//! As torch's `nn.Sequential` of the same layers (tests/reference/encoder/README.md):
//! ```text
//! obs [N, H, W, C] uint8 -> x = f32(obs) * scale
//! for each layer: Conv2d(kernel, stride, zero padding) + ReLU, or MaxPool2d(kernel)
//! flatten in (C, H, W) order -> features = ReLU(x linear.weight^T + linear.bias)  [N, features]
//! ```
//! Parameters carry torch's names and layouts, in `state_dict` order: `convs.{i}.weight`
//! `[out, in, k, k]` and `convs.{i}.bias` for the conv at index `i` of `layers`, then
//! `linear.weight` `[features, flat]` and `linear.bias`.
//!
//! # Calls
//! - [`Encoder::forward`]: inference (the actor, `E` frames a step); the result lives in the
//!   encoder's workspace until the next call.
//! - [`Encoder::forward_train`] + [`Encoder::backward`]: the learner's, all `B*T` frames of a
//!   minibatch in one call; the [`Tape`] keeps what the backward needs (the frames, every
//!   layer's output, the max-pools' argmax) and is reused across calls. The input is `uint8`,
//!   so there is no input gradient: `backward` gives the parameters' gradients of
//!   `sum(features * grad_features)` and **adds** them to an [`EncoderGrads`] (as torch
//!   accumulates `.grad`; [`EncoderGrads::zero`] clears it).
//!
//! # How it is fast
//! Activations are NHWC: a convolution is im2col (contiguous `kernel * C` runs per kernel row)
//! and one GEMM `[pixels, K] x [K, out]` on the fused backend's packed SIMD kernels
//! ([`crate::fused::gemm_packed`], AVX-512 or AVX2 picked at run time), written straight as the
//! next layer's NHWC input; bias and ReLU follow in one vectorized pass. Frames go in
//! sub-batches whose im2col buffer stays in L2. The weights are reordered (`(kh, kw, c)`
//! kernels, the linear weight's columns in the NHWC flatten's order) and packed once per set
//! of parameter values, so the actor's calls pay no packing. Frames are split over the fused
//! backend's threads ([`crate::fused::threads`]) in contiguous blocks, each thread running
//! every layer on its block (no barrier between layers); the backward gives each thread its
//! own gradient buffers, summed at the end. Buffers (activations, im2col, gradients) are kept
//! across calls.

mod config;
mod im2col;
mod maxpool;
mod net;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

pub use config::{EncoderConfig, EncoderLayer, ImageShape, OneHot, Op, Plan, Stage, PRESETS};
use net::{BlockActs, BlockTape, Packs, Scratch};

use crate::fused::{blocks, parallel, threads};

/// Forward FLOPs per thread below which a call runs on the calling thread alone (a wake-up of
/// a pool worker costs tens of microseconds in a VM; see `fused::host::MIN_ROW_STEPS_PER_THREAD`).
pub const MIN_FLOPS_PER_THREAD: usize = 4_000_000;

/// Chunks of frames per thread of a multi-threaded call, taken in turn: with one block per
/// thread, a core that another process held made the whole call wait for its half.
pub const CHUNKS_PER_THREAD: usize = 4;

/// The fewest frames in a chunk (the linear layer's GEMM streams its weights once a chunk).
pub const MIN_CHUNK_FRAMES: usize = 8;

/// What went wrong building or calling an encoder; each names the field and the value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EncoderError {
    /// A configuration value is out of range.
    #[error("encoder config: `{field}` = {value} is invalid: expected {expected}")]
    Config {
        field: String,
        value: String,
        expected: String,
    },
    /// An input has the wrong length.
    #[error("encoder call: `{field}` has {got} values, expected {expected}")]
    Shape {
        field: &'static str,
        got: usize,
        expected: String,
    },
    /// Loading a parameter by name failed.
    #[error("encoder parameter `{name}`: {problem}")]
    Parameter { name: String, problem: String },
    /// A tape that does not come from this encoder's latest parameters.
    #[error("encoder tape: {0}")]
    Tape(String),
}

impl EncoderError {
    pub(crate) fn config(
        field: impl Into<String>,
        value: impl std::fmt::Display,
        expected: impl Into<String>,
    ) -> Self {
        EncoderError::Config {
            field: field.into(),
            value: value.to_string(),
            expected: expected.into(),
        }
    }
}

/// A convolutional encoder with its parameters and its workspace (see the module doc).
pub struct Encoder {
    plan: Plan,
    names: Vec<String>,
    shapes: Vec<Vec<usize>>,
    params: Vec<Vec<f32>>,
    /// Changes with every parameter write: tapes and packs are of one version.
    version: u64,
    packs: Option<(u64, Packs)>,
    /// The inference call's activations.
    work: Tape,
    scratch: Vec<Scratch>,
}

/// Process-wide source of parameter versions, so that a tape of one encoder is never taken
/// for another's.
static VERSIONS: AtomicU64 = AtomicU64::new(1);

fn next_version() -> u64 {
    VERSIONS.fetch_add(1, Ordering::Relaxed)
}

/// What [`Encoder::forward_train`] keeps for [`Encoder::backward`]; reuse one across calls.
#[derive(Default)]
pub struct Tape {
    frames: usize,
    version: u64,
    obs: Vec<u8>,
    outs: Vec<Vec<f32>>,
    argmax: Vec<Vec<u32>>,
    features: Vec<f32>,
}

impl Tape {
    /// The features of the call, `[N, features]`.
    pub fn features(&self) -> &[f32] {
        &self.features
    }

    /// Frames of the call.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// Sizes every buffer for `frames` frames of `plan` (kept allocations are reused).
    fn prepare(&mut self, plan: &Plan, frames: usize, version: u64) {
        self.frames = frames;
        self.version = version;
        let stages = plan.stages.len();
        self.outs.resize_with(stages, Vec::new);
        self.argmax.resize_with(stages, Vec::new);
        for (i, s) in plan.stages.iter().enumerate() {
            self.outs[i].resize(frames * s.output.len(), 0.0);
            let pooled = matches!(s.op, Op::Maxpool { .. });
            self.argmax[i].resize(if pooled { frames * s.output.len() } else { 0 }, 0);
        }
        self.features.resize(frames * plan.features, 0.0);
    }

    /// Each frame block's rows of every buffer.
    fn blocks(&mut self, plan: &Plan, parts: &[(usize, usize)]) -> Vec<BlockActs<'_>> {
        let lens = |per: usize| parts.iter().map(move |&(_, n)| n * per);
        let mut outs: Vec<_> = (self.outs.iter_mut().zip(&plan.stages))
            .map(|(buf, s)| split_mut(buf, lens(s.output.len())).into_iter())
            .collect();
        let mut args: Vec<_> = (self.argmax.iter_mut().zip(&plan.stages))
            .map(|(buf, s)| {
                let per = if buf.is_empty() { 0 } else { s.output.len() };
                split_mut(buf, lens(per)).into_iter()
            })
            .collect();
        split_mut(&mut self.features, lens(plan.features))
            .into_iter()
            .map(|features| BlockActs {
                outs: outs
                    .iter_mut()
                    .map(|o| o.next().expect("a block each"))
                    .collect(),
                argmax: args
                    .iter_mut()
                    .map(|a| a.next().expect("a block each"))
                    .collect(),
                features,
            })
            .collect()
    }
}

/// Gradients of every parameter, in the encoder's parameter order and torch's layouts.
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderGrads {
    names: Vec<String>,
    values: Vec<Vec<f32>>,
}

impl EncoderGrads {
    /// Zero gradients for `encoder`'s parameters.
    pub fn zeros(encoder: &Encoder) -> Self {
        EncoderGrads {
            names: encoder.names.clone(),
            values: encoder.params.iter().map(|p| vec![0.0; p.len()]).collect(),
        }
    }

    /// Sets every gradient to zero.
    pub fn zero(&mut self) {
        self.values.iter_mut().for_each(|v| v.fill(0.0));
    }

    /// The gradient of parameter `name`.
    pub fn get(&self, name: &str) -> Option<&[f32]> {
        let i = self.names.iter().position(|n| n == name)?;
        Some(&self.values[i])
    }

    /// `(name, gradient)` in parameter order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[f32])> {
        self.names
            .iter()
            .map(String::as_str)
            .zip(self.values.iter().map(Vec::as_slice))
    }
}

impl Encoder {
    /// An encoder for frames of `input`, its parameters drawn as torch's defaults
    /// (`U(-1/sqrt(fan_in), 1/sqrt(fan_in))` for weights and biases) from `seed`.
    pub fn new(config: &EncoderConfig, input: ImageShape, seed: u64) -> Result<Self, EncoderError> {
        let plan = config.plan(input)?;
        let mut names = Vec::new();
        let mut shapes = Vec::new();
        for s in &plan.stages {
            if let Op::Conv { index, kernel, .. } = s.op {
                let (o, c) = (s.output.channels, s.input.channels);
                names.push(format!("convs.{index}.weight"));
                shapes.push(vec![o, c, kernel, kernel]);
                names.push(format!("convs.{index}.bias"));
                shapes.push(vec![o]);
            }
        }
        names.extend(["linear.weight".to_string(), "linear.bias".to_string()]);
        shapes.extend([vec![plan.features, plan.flat], vec![plan.features]]);
        let mut rng = SplitMix(seed);
        let params = shapes
            .chunks(2)
            .flat_map(|pair| {
                let fan_in: usize = pair[0][1..].iter().product();
                let bound = 1.0 / (fan_in as f32).sqrt();
                pair.iter()
                    .map(|shape| {
                        let n = shape.iter().product();
                        (0..n)
                            .map(|_| bound * rng.symmetric())
                            .collect::<Vec<f32>>()
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        Ok(Encoder {
            plan,
            names,
            shapes,
            params,
            version: next_version(),
            packs: None,
            work: Tape::default(),
            scratch: Vec::new(),
        })
    }

    /// The checked config: every layer's shapes, the flatten's size, the output width.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Parameter names in order (torch's `state_dict` names).
    pub fn param_names(&self) -> &[String] {
        &self.names
    }

    /// `(name, shape, values)` of every parameter, in order.
    pub fn params(&self) -> impl Iterator<Item = (&str, &[usize], &[f32])> {
        (0..self.names.len()).map(|i| {
            (
                self.names[i].as_str(),
                self.shapes[i].as_slice(),
                self.params[i].as_slice(),
            )
        })
    }

    /// Sets parameter `name` to `values` (torch's layout, its shape's element count).
    pub fn set_param(&mut self, name: &str, values: &[f32]) -> Result<(), EncoderError> {
        let i =
            self.names
                .iter()
                .position(|n| n == name)
                .ok_or_else(|| EncoderError::Parameter {
                    name: name.to_string(),
                    problem: format!("no such parameter (the encoder has {:?})", self.names),
                })?;
        if values.len() != self.params[i].len() {
            return Err(EncoderError::Parameter {
                name: name.to_string(),
                problem: format!(
                    "{} values given, its shape {:?} holds {}",
                    values.len(),
                    self.shapes[i],
                    self.params[i].len()
                ),
            });
        }
        self.params[i].copy_from_slice(values);
        self.version = next_version();
        Ok(())
    }

    fn check_obs(&self, obs: &[u8], frames: usize) -> Result<(), EncoderError> {
        let per = self.plan.input.len();
        if obs.len() != frames * per {
            return Err(EncoderError::Shape {
                field: "obs",
                got: obs.len(),
                expected: format!(
                    "{frames} frames of {:?} = {}",
                    self.plan.input,
                    frames * per
                ),
            });
        }
        Ok(())
    }

    /// Packs the current parameters if the packs are stale (with the backward's if asked).
    fn ensure_packs(&mut self, backward: bool) {
        if self.packs.as_ref().is_none_or(|(v, _)| *v != self.version) {
            let old = self.packs.take().map(|(_, p)| p);
            self.packs = Some((self.version, Packs::new(&self.plan, &self.params, old)));
        }
        if backward {
            let packs = &mut self.packs.as_mut().expect("just built").1;
            packs.with_backward(&self.plan);
        }
    }

    /// The threads a call over `frames` frames is worth, and its frames in contiguous chunks
    /// that those threads take in turn (several per thread: a thread that another process
    /// slows takes fewer).
    fn split(&self, frames: usize) -> (usize, Vec<(usize, usize)>) {
        let flops = frames * self.plan.flops_per_frame();
        let workers = threads().min(flops / MIN_FLOPS_PER_THREAD).max(1);
        if workers == 1 {
            return (1, blocks(frames, 1));
        }
        let chunks = (workers * CHUNKS_PER_THREAD).min(frames / MIN_CHUNK_FRAMES);
        (workers, blocks(frames, chunks.max(workers)))
    }

    /// Features `[N, features]` of `frames` frames `obs` (`[N, H, W, C]` bytes), inference
    /// only; valid until the next call.
    pub fn forward(&mut self, obs: &[u8], frames: usize) -> Result<&[f32], EncoderError> {
        self.check_obs(obs, frames)?;
        let mut work = std::mem::take(&mut self.work);
        self.run_forward(obs, frames, &mut work);
        self.work = work;
        Ok(&self.work.features)
    }

    /// [`forward`](Self::forward) keeping in `tape` what [`backward`](Self::backward)
    /// needs; returns the features `[N, features]` (also [`Tape::features`]).
    pub fn forward_train<'t>(
        &mut self,
        obs: &[u8],
        frames: usize,
        tape: &'t mut Tape,
    ) -> Result<&'t [f32], EncoderError> {
        self.check_obs(obs, frames)?;
        tape.obs.clear();
        tape.obs.extend_from_slice(obs);
        self.run_forward(obs, frames, tape);
        Ok(&tape.features)
    }

    fn run_forward(&mut self, obs: &[u8], frames: usize, tape: &mut Tape) {
        self.ensure_packs(false);
        let (workers, chunks) = self.split(frames);
        self.scratch.resize_with(workers, Scratch::default);
        tape.prepare(&self.plan, frames, self.version);
        let slots: Vec<_> = (tape.blocks(&self.plan, &chunks).into_iter())
            .map(|acts| Mutex::new(Some(acts)))
            .collect();
        let (plan, params) = (&self.plan, &self.params);
        let packs = &self.packs.as_ref().expect("built above").1;
        let in_len = plan.input.len();
        let (next, chunks, slots) = (&AtomicUsize::new(0), &chunks, &slots);
        let jobs: Vec<_> = (self.scratch.iter_mut().take(workers))
            .map(|scratch| {
                move || {
                    while let Some((i, &(first, n))) = take_chunk(next, chunks) {
                        let acts = lock(&slots[i]).take().expect("each chunk is taken once");
                        let obs = &obs[first * in_len..(first + n) * in_len];
                        net::forward_block(plan, packs, params, obs, n, acts, &mut scratch.col);
                    }
                }
            })
            .collect();
        parallel(jobs);
    }

    /// Adds to `grads` the gradient of `sum(features * grad_features)` with respect to every
    /// parameter, for the call `tape` recorded (`grad_features` `[N, features]`). Fails if the
    /// parameters changed since that call or the tape is another encoder's.
    pub fn backward(
        &mut self,
        tape: &Tape,
        grad_features: &[f32],
        grads: &mut EncoderGrads,
    ) -> Result<(), EncoderError> {
        if tape.version != self.version {
            return Err(EncoderError::Tape(
                "it was recorded with other parameter values (or by another encoder): run \
                 forward_train again after changing parameters"
                    .into(),
            ));
        }
        let frames = tape.frames;
        if grad_features.len() != frames * self.plan.features {
            return Err(EncoderError::Shape {
                field: "grad_features",
                got: grad_features.len(),
                expected: format!("[{frames}, {}]", self.plan.features),
            });
        }
        if grads.names != self.names {
            return Err(EncoderError::Parameter {
                name: format!("{:?}", grads.names),
                problem: format!("gradients of other parameters than {:?}", self.names),
            });
        }
        let (workers, chunks) = self.split(frames);
        self.ensure_packs(true);
        self.scratch.resize_with(workers, Scratch::default);
        let plan = &self.plan;
        let packs = &self.packs.as_ref().expect("built above").1;
        let in_len = plan.input.len();
        fn rows(buf: &[f32], (first, n): (usize, usize), per: usize) -> &[f32] {
            &buf[first * per..(first + n) * per]
        }
        let blocks: Vec<_> = (chunks.iter())
            .map(|&(first, n)| BlockTape {
                obs: &tape.obs[first * in_len..(first + n) * in_len],
                outs: (plan.stages.iter().zip(&tape.outs))
                    .map(|(s, o)| rows(o, (first, n), s.output.len()))
                    .collect(),
                argmax: (plan.stages.iter().zip(&tape.argmax))
                    .map(|(s, a)| match a.is_empty() {
                        true => &a[..],
                        false => &a[first * s.output.len()..(first + n) * s.output.len()],
                    })
                    .collect(),
                features: rows(&tape.features, (first, n), plan.features),
            })
            .collect();
        let (next, chunks, blocks) = (&AtomicUsize::new(0), &chunks, &blocks);
        let jobs: Vec<_> = (self.scratch.iter_mut().take(workers))
            .map(|scratch| {
                move || {
                    let mut ran = false;
                    while let Some((i, &(first, n))) = take_chunk(next, chunks) {
                        let g = rows(grad_features, (first, n), plan.features);
                        net::backward_block(plan, packs, blocks[i].clone(), n, g, scratch, ran);
                        ran = true;
                    }
                    ran
                }
            })
            .collect();
        let ran = parallel(jobs);
        self.add_grads(&ran, grads);
        Ok(())
    }

    /// Sums the threads' gradients into `grads`, from the GEMMs' layouts to torch's.
    /// `ran[t]`: whether thread `t` took a chunk (its gradients count).
    fn add_grads(&mut self, ran: &[bool], grads: &mut EncoderGrads) {
        let plan = &self.plan;
        // The other threads' sums into the first's (contiguous), then one reordering pass.
        let mut took = (self.scratch.iter_mut().zip(ran)).filter_map(|(s, &r)| r.then_some(s));
        let Some(sum) = took.next() else {
            return; // no frames
        };
        let sum = &mut sum.grads;
        for t in took {
            for (acc, part) in (sum.conv_w.iter_mut().chain(&mut sum.conv_b))
                .chain([&mut sum.linear_w, &mut sum.linear_b])
                .zip(
                    (t.grads.conv_w.iter().chain(&t.grads.conv_b))
                        .chain([&t.grads.linear_w, &t.grads.linear_b]),
                )
            {
                add_to(acc, part);
            }
        }
        for (i, s) in plan.stages.iter().enumerate() {
            let Op::Conv { kernel, .. } = s.op else {
                continue;
            };
            let slot = net::param_slot(plan, i);
            let (c, o) = (s.input.channels, s.output.channels);
            let kk = kernel * kernel;
            let dw = &mut grads.values[slot];
            // dW^T [(kh, kw, c), o] -> dW [o, c, kh, kw]
            for (r, row) in sum.conv_w[i].chunks_exact(o).enumerate() {
                let (khw, ch) = (r / c, r % c);
                for (oo, &v) in row.iter().enumerate() {
                    dw[(oo * c + ch) * kk + khw] += v;
                }
            }
            add_to(&mut grads.values[slot + 1], &sum.conv_b[i]);
        }
        let slot = net::linear_slot(plan);
        let perm = net::chw_of_hwc(plan);
        let (nf, flat) = (plan.features, plan.flat);
        // dW^T [(h, w, c), F] -> dW [F, (c, h, w)]
        for (f, dw) in grads.values[slot].chunks_exact_mut(flat).enumerate() {
            for (&col, v) in perm.iter().zip(sum.linear_w.iter().skip(f).step_by(nf)) {
                dw[col] += v;
            }
        }
        add_to(&mut grads.values[slot + 1], &sum.linear_b);
    }
}

/// The next chunk not yet taken (index and chunk), if any.
fn take_chunk<'a>(
    next: &AtomicUsize,
    chunks: &'a [(usize, usize)],
) -> Option<(usize, &'a (usize, usize))> {
    let i = next.fetch_add(1, Ordering::Relaxed);
    chunks.get(i).map(|c| (i, c))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in another chunk propagates out of `parallel`; the slot itself stays valid.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn add_to(acc: &mut [f32], part: &[f32]) {
    for (a, v) in acc.iter_mut().zip(part) {
        *a += v;
    }
}

/// Splits `buf` into consecutive pieces of the given lengths.
fn split_mut<T>(mut buf: &mut [T], lens: impl IntoIterator<Item = usize>) -> Vec<&mut [T]> {
    let mut out = Vec::new();
    for len in lens {
        let (head, tail) = std::mem::take(&mut buf).split_at_mut(len);
        out.push(head);
        buf = tail;
    }
    out
}

/// splitmix64: the initial parameters' uniform draws (no dependency for a one-off draw).
struct SplitMix(u64);

impl SplitMix {
    /// Uniform in `[-1, 1)`.
    fn symmetric(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

//! The actor's sequential-mode step without a tensor framework: the policy's weights copied
//! into plain `f32` buffers, each layer one or two GEMMs (the fused backend's SIMD GEMM, with
//! every weight matrix packed once when the weights are loaded, not on every step) followed
//! by one fused pass over the gates.
//!
//! Same equations and the same `is_init` contract as [`Policy::forward`] in sequential mode
//! (incoming state zeroed where `is_init`); the tests hold it to 1e-5 of that path. It exists
//! because a burn call per op costs more than the arithmetic at actor batch sizes: one actor
//! thread steps `E` environments at a time and the policy is small (hidden 64).

use super::image::{concat_rows, image_shape, ImageSpec};
use super::{ActionSpec, Policy};
use crate::backend::to_vec as host;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use recur_rnn::encoder::Encoder;
use recur_rnn::fused::{gemm_packed, Mat, Packed, SimdLevel};
use recur_rnn::math::{
    gru_hidden, lstm_cell_state, mingru_g_with, mingru_hidden, sigmoid, tanh, TwoRoundings,
};
use recur_rnn::CellKind;

/// A weight matrix `[k, n]`, row-major and packed for the SIMD GEMM (packed once per weight
/// load; every step reuses it).
#[derive(Clone, Debug)]
struct Weight {
    raw: Vec<f32>,
    packed: Packed,
    k: usize,
    n: usize,
}

impl Weight {
    fn new(raw: Vec<f32>, k: usize, n: usize) -> Self {
        assert_eq!(raw.len(), k * n, "a weight is [k, n]");
        let packed = Packed::new(Mat::rows(&raw, k, n), SimdLevel::current());
        Self { raw, packed, k, n }
    }
}

/// A dense layer: `y = x W + b`, `W` row-major `[inputs, outputs]`.
#[derive(Clone, Debug)]
struct Dense {
    w: Weight,
    b: Vec<f32>,
    outputs: usize,
}

impl Dense {
    /// `y[N, out] = x[N, in] W (+ b)`.
    fn forward(&self, x: &[f32], rows: usize, y: &mut Vec<f32>) {
        y.resize(rows * self.outputs, 0.0);
        matmul(x, rows, &self.w, y, 0.0);
        for row in y.chunks_exact_mut(self.outputs) {
            for (v, b) in row.iter_mut().zip(&self.b) {
                *v += b;
            }
        }
    }
}

/// One recurrent layer: `W_ih^T` `[in, G*H]`, `W_hh^T` `[H, G*H]` (none for minGRU), biases
/// `[G*H]` (zeros without bias).
#[derive(Clone, Debug)]
struct CellWeights {
    wih_t: Weight,
    whh_t: Option<Weight>,
    b_ih: Vec<f32>,
    b_hh: Vec<f32>,
}

/// The outputs of one step of `N` rows.
#[derive(Clone, Debug, Default)]
pub struct StepOutput {
    /// Policy head `[N, K]` (logits, or mean and log-std).
    pub head: Vec<f32>,
    /// State value `[N]`.
    pub value: Vec<f32>,
    /// `("next", rs_h)` `[N, L, H]`.
    pub next_h: Vec<f32>,
    /// `("next", rs_c)` `[N, L, H]` (LSTM).
    pub next_c: Vec<f32>,
}

/// One image's convolutional encoder on the host ([`Encoder`], with its parameters copied from
/// the burn [`super::image::ImageEncoder`]).
struct HostImage {
    spec: ImageSpec,
    encoder: Encoder,
}

impl HostImage {
    /// An encoder of `spec`'s image with the parameters `params` (torch's names and layouts).
    fn new<'a>(spec: &ImageSpec, params: impl IntoIterator<Item = (&'a str, &'a [f32])>) -> Self {
        let mut encoder = Encoder::new(&spec.config, image_shape(&spec.part), 0)
            .expect("the burn encoder was built from this config and shape");
        for (name, values) in params {
            encoder
                .set_param(name, values)
                .expect("the burn encoder has the host encoder's parameters");
        }
        HostImage {
            spec: spec.clone(),
            encoder,
        }
    }

    fn of<B: Backend>(enc: &super::image::ImageEncoder<B>) -> Self {
        let params = enc.torch_params();
        Self::new(
            enc.spec(),
            params.iter().map(|(name, _, v)| (name.as_str(), &v[..])),
        )
    }
}

impl Clone for HostImage {
    fn clone(&self) -> Self {
        Self::new(
            &self.spec,
            self.encoder.params().map(|(name, _, v)| (name, v)),
        )
    }
}

impl std::fmt::Debug for HostImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostImage")
            .field("spec", &self.spec)
            .field("plan", self.encoder.plan())
            .finish()
    }
}

/// A [`Policy`]'s weights in a form for fast sequential-mode steps on the host.
#[derive(Clone, Debug)]
pub struct InferencePolicy {
    cell: CellKind,
    obs_dim: usize,
    /// Bytes of a step's pixels lane.
    pixels: usize,
    hidden: usize,
    action: ActionSpec,
    /// The normalizer's rows (mean, variance, count, clip), `[4 * obs_dim]`.
    obs_norm: Vec<f32>,
    encoder: Vec<Dense>,
    /// One convolutional encoder per image, its features after the MLP's output.
    cnn: Vec<HostImage>,
    /// `false`: every step starts from a zero state ([`super::PolicyConfig::memory`]).
    memory: bool,
    core: Vec<CellWeights>,
    /// The value head's own core (empty with a shared core); its state follows the actor
    /// core's layers.
    critic: Vec<CellWeights>,
    policy_head: Dense,
    value_head: Dense,
    // Scratch, reused across calls.
    x: Vec<f32>,
    y: Vec<f32>,
    h: Vec<f32>,
    c: Vec<f32>,
    gx: Vec<f32>,
    gh: Vec<f32>,
    /// One image's bytes of every row, where the lane has several images.
    image: Vec<u8>,
}

fn dense<B: Backend>(l: &burn::nn::Linear<B>) -> Dense {
    let [inputs, outputs] = l.weight.val().dims();
    Dense {
        w: Weight::new(host(l.weight.val()), inputs, outputs),
        b: l.bias
            .as_ref()
            .map_or_else(|| vec![0.0; outputs], |b| host(b.val())),
        outputs,
    }
}

impl InferencePolicy {
    /// Copies `policy`'s weights.
    pub fn from_policy<B: Backend>(policy: &Policy<B>) -> Self {
        let core = &policy.core;
        let gh = core.cell().gates() * core.hidden_size();
        let cells = |core: &recur_rnn::RecurrentCore<B>| {
            core.layers
                .iter()
                .map(|layer| {
                    let [_, inputs] = layer.weight_ih.val().dims();
                    let bias = |b: &Option<burn::module::Param<Tensor<B, 1>>>| {
                        b.as_ref().map_or_else(|| vec![0.0; gh], |b| host(b.val()))
                    };
                    CellWeights {
                        wih_t: Weight::new(host(layer.weight_ih.val().transpose()), inputs, gh),
                        whh_t: layer.weight_hh.as_ref().map(|w| {
                            Weight::new(host(w.val().transpose()), core.hidden_size(), gh)
                        }),
                        b_ih: bias(&layer.bias_ih),
                        b_hh: bias(&layer.bias_hh),
                    }
                })
                .collect::<Vec<_>>()
        };
        InferencePolicy {
            critic: policy.critic_core.as_ref().map(cells).unwrap_or_default(),
            cell: core.cell(),
            obs_dim: policy.config().obs_dim,
            pixels: policy.config().pixels(),
            memory: policy.config().memory,
            cnn: policy.cnn.iter().map(HostImage::of).collect(),
            hidden: core.hidden_size(),
            action: policy.action().clone(),
            obs_norm: host(policy.obs_norm.val()),
            encoder: policy.encoder.iter().map(dense).collect(),
            core: cells(core),
            policy_head: dense(&policy.policy_head),
            value_head: dense(&policy.value_head),
            x: Vec::new(),
            y: Vec::new(),
            h: Vec::new(),
            c: Vec::new(),
            gx: Vec::new(),
            gh: Vec::new(),
            image: Vec::new(),
        }
    }

    pub fn action(&self) -> &ActionSpec {
        &self.action
    }

    pub fn head_size(&self) -> usize {
        self.policy_head.outputs
    }

    /// One sequential-mode step of `N` rows: `obs` `[N, obs_dim]`, `pixels` `[N, P]` (empty
    /// without images), `is_init` `[N]`, incoming state `rs_h` (and `rs_c` for an LSTM)
    /// `[N, S, H]` (`S` = the policy's state layers), zeroed where `is_init`.
    ///
    /// Panics when a buffer's length does not match `N` (a caller bug, not input data).
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        &mut self,
        obs: &[f32],
        pixels: &[u8],
        is_init: &[bool],
        rs_h: &[f32],
        rs_c: Option<&[f32]>,
        out: &mut StepOutput,
    ) {
        let n = is_init.len();
        let state_layers = self.core.len() + self.critic.len();
        let lh = state_layers * self.hidden;
        assert_eq!(
            obs.len(),
            n * self.obs_dim,
            "observation: {} values for {n} rows of {}",
            obs.len(),
            self.obs_dim
        );
        assert_eq!(
            pixels.len(),
            n * self.pixels,
            "pixels: {} bytes for {n} rows of {}",
            pixels.len(),
            self.pixels
        );
        assert_eq!(
            rs_h.len(),
            n * lh,
            "rs_h: {} values for {n} rows of [L, H] = {lh}",
            rs_h.len()
        );
        let lstm = self.cell == CellKind::Lstm;
        if lstm {
            assert_eq!(
                rs_c.map(<[f32]>::len),
                Some(n * lh),
                "an LSTM step needs rs_c [N, L, H]"
            );
        }
        // Normalizer (as Policy::normalize), then the encoder.
        self.x.clear();
        self.x.extend_from_slice(obs);
        let d = self.obs_dim;
        let (mean, rest) = self.obs_norm.split_at(d);
        let (var, rest) = rest.split_at(d);
        let clip = &rest[d..2 * d];
        for row in self.x.chunks_exact_mut(d.max(1)).filter(|_| d > 0) {
            for j in 0..d {
                row[j] = ((row[j] - mean[j]) / (var[j] + 1e-8).sqrt()).clamp(-clip[j], clip[j]);
            }
        }
        for layer in &self.encoder {
            layer.forward(&self.x, n, &mut self.y);
            for v in &mut self.y {
                *v = tanh(*v);
            }
            std::mem::swap(&mut self.x, &mut self.y);
        }
        if !self.cnn.is_empty() {
            self.encode_images(pixels, n);
        }
        let every_step = vec![true; if self.memory { 0 } else { n }];
        let is_init = if self.memory { is_init } else { &every_step };
        out.next_h.resize(n * lh, 0.0);
        out.next_c.resize(if lstm { n * lh } else { 0 }, 0.0);
        // The actor core from the encoder output, then (separate critic) the critic core from
        // the same encoder output, its state after the actor core's layers.
        let encoded = (!self.critic.is_empty()).then(|| self.x.clone());
        let cells = std::mem::take(&mut self.core);
        self.run_core(&cells, 0, is_init, rs_h, rs_c, lstm, lh, out);
        self.core = cells;
        self.policy_head.forward(&self.x, n, &mut out.head);
        if let Some(encoded) = encoded {
            self.x = encoded;
            let cells = std::mem::take(&mut self.critic);
            let offset = self.core.len();
            self.run_core(&cells, offset, is_init, rs_h, rs_c, lstm, lh, out);
            self.critic = cells;
        }
        self.value_head.forward(&self.x, n, &mut out.value);
    }

    /// Appends every image's features to each row of `self.x` (the MLP's output, or nothing
    /// without values): the core's input `[N, values + features...]`.
    fn encode_images(&mut self, pixels: &[u8], n: usize) {
        let mut parts: Vec<&[f32]> = vec![&self.x];
        for img in self.cnn.iter_mut() {
            let bytes = img.spec.bytes_in(pixels, self.pixels, &mut self.image);
            let features = img.encoder.forward(bytes, n);
            parts.push(features.expect("the pixels lane holds every image of every row"));
        }
        concat_rows(&parts, n, &mut self.y);
        std::mem::swap(&mut self.x, &mut self.y);
    }

    /// The layers `cells` on `self.x` (replaced by the last layer's output), reading and
    /// writing the state at layers `offset..` of the `[N, S, H]` buffers (`lh` = `S * H`).
    #[allow(clippy::too_many_arguments)]
    fn run_core(
        &mut self,
        cells: &[CellWeights],
        offset: usize,
        is_init: &[bool],
        rs_h: &[f32],
        rs_c: Option<&[f32]>,
        lstm: bool,
        lh: usize,
        out: &mut StepOutput,
    ) {
        let (n, hdim) = (is_init.len(), self.hidden);
        for (k, w) in cells.iter().enumerate() {
            let l = offset + k;
            // Incoming state of layer l, zeroed at is_init.
            let take = |src: &[f32], dst: &mut Vec<f32>| {
                dst.resize(n * hdim, 0.0);
                for (row, init) in is_init.iter().enumerate() {
                    let d = &mut dst[row * hdim..(row + 1) * hdim];
                    if *init {
                        d.fill(0.0);
                    } else {
                        d.copy_from_slice(&src[row * lh + l * hdim..row * lh + (l + 1) * hdim]);
                    }
                }
            };
            take(rs_h, &mut self.h);
            if let Some(c) = rs_c.filter(|_| lstm) {
                take(c, &mut self.c);
            }
            let g = self.cell.gates() * hdim;
            self.gx.resize(n * g, 0.0);
            matmul(&self.x, n, &w.wih_t, &mut self.gx, 0.0);
            match self.cell {
                CellKind::Lstm => {
                    // One gate buffer: x W_ih^T + h W_hh^T, then the biases in the fused pass.
                    matmul(&self.h, n, hidden_weights(w), &mut self.gx, 1.0);
                    let rows = self.gx.chunks_exact(g).zip(self.h.chunks_exact_mut(hdim));
                    for ((gates, h), c) in rows.zip(self.c.chunks_exact_mut(hdim)) {
                        lstm_cell(gates, &w.b_ih, &w.b_hh, h, c);
                    }
                }
                CellKind::Gru => {
                    // The n gate needs h W_hn^T + b_hn on its own.
                    self.gh.resize(n * g, 0.0);
                    matmul(&self.h, n, hidden_weights(w), &mut self.gh, 0.0);
                    let rows = self.gx.chunks_exact(g).zip(self.gh.chunks_exact(g));
                    for ((gx, gh), h) in rows.zip(self.h.chunks_exact_mut(hdim)) {
                        gru_cell(gx, gh, &w.b_ih, &w.b_hh, h);
                    }
                }
                CellKind::MinGru => {
                    // Both gates from the input alone: h' = h + z (g(v) - h).
                    for (gx, h) in self.gx.chunks_exact(g).zip(self.h.chunks_exact_mut(hdim)) {
                        mingru_cell(gx, &w.b_ih, h);
                    }
                }
            }
            // The layer's next state, at layer l of the `[N, S, H]` buffers.
            for row in 0..n {
                let (at, next) = (row * hdim, row * lh + l * hdim);
                out.next_h[next..next + hdim].copy_from_slice(&self.h[at..at + hdim]);
                if lstm {
                    out.next_c[next..next + hdim].copy_from_slice(&self.c[at..at + hdim]);
                }
            }
            // The layer's output is the next layer's input (no dropout at inference).
            std::mem::swap(&mut self.x, &mut self.h);
        }
    }
}

/// Below this many rows a plain row loop beats the packed GEMM's tiles.
const GEMM_MIN_ROWS: usize = 8;

/// `c[M, N] = a[M, K] b[K, N] + beta * c`, row-major slices.
fn matmul(a: &[f32], m: usize, b: &Weight, c: &mut [f32], beta: f32) {
    let (k, n) = (b.k, b.n);
    if m < GEMM_MIN_ROWS {
        let b = &b.raw;
        for (a_row, c_row) in a.chunks_exact(k).zip(c.chunks_exact_mut(n)).take(m) {
            if beta == 0.0 {
                c_row.fill(0.0);
            }
            for (&x, b_row) in a_row.iter().zip(b.chunks_exact(n)) {
                for (y, &w) in c_row.iter_mut().zip(b_row) {
                    *y += x * w;
                }
            }
        }
        return;
    }
    gemm_packed(
        Mat::rows(&a[..m * k], m, k),
        &b.packed,
        beta,
        &mut c[..m * n],
        n,
    );
}

/// One LSTM row: `gates` = x W_ih^T + h W_hh^T `[4H]` (i, f, g, o); updates `h`, `c` in place.
fn lstm_cell(gates: &[f32], b_ih: &[f32], b_hh: &[f32], h: &mut [f32], c: &mut [f32]) {
    let hd = h.len();
    let (gi, rest) = gates.split_at(hd);
    let (gf, rest) = rest.split_at(hd);
    let (gg, go) = rest.split_at(hd);
    for j in 0..hd {
        let i = sigmoid(gi[j] + (b_ih[j] + b_hh[j]));
        let f = sigmoid(gf[j] + (b_ih[hd + j] + b_hh[hd + j]));
        let g = tanh(gg[j] + (b_ih[2 * hd + j] + b_hh[2 * hd + j]));
        let o = sigmoid(go[j] + (b_ih[3 * hd + j] + b_hh[3 * hd + j]));
        let c_next = lstm_cell_state(i, f, g, c[j]);
        c[j] = c_next;
        h[j] = o * tanh(c_next);
    }
}

/// One GRU row: `gx` = x W_ih^T, `gh` = h W_hh^T `[3H]` (r, z, n); updates `h` in place.
fn gru_cell(gx: &[f32], gh: &[f32], b_ih: &[f32], b_hh: &[f32], h: &mut [f32]) {
    let hd = h.len();
    for j in 0..hd {
        let r = sigmoid((gx[j] + b_ih[j]) + (gh[j] + b_hh[j]));
        let z = sigmoid((gx[hd + j] + b_ih[hd + j]) + (gh[hd + j] + b_hh[hd + j]));
        let n = tanh((gx[2 * hd + j] + b_ih[2 * hd + j]) + r * (gh[2 * hd + j] + b_hh[2 * hd + j]));
        h[j] = gru_hidden(z, n, h[j]);
    }
}

/// One minGRU row: `gx` = x [W_z; W_h]^T `[2H]` (z, h); updates `h` in place.
fn mingru_cell(gx: &[f32], b_ih: &[f32], h: &mut [f32]) {
    let hd = h.len();
    for j in 0..hd {
        let z = sigmoid(gx[j] + b_ih[j]);
        let candidate = mingru_g_with::<TwoRoundings>(gx[hd + j] + b_ih[hd + j]);
        h[j] = mingru_hidden(z, candidate, h[j]);
    }
}

/// A layer's `W_hh^T`; LSTM and GRU layers have one (minGRU's arm never asks).
fn hidden_weights(w: &CellWeights) -> &Weight {
    w.whh_t.as_ref().expect("LSTM and GRU layers have W_hh")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{cpu_device, Cpu};
    use crate::policy::{CriticCore, PolicyConfig};
    use burn::tensor::{Bool, TensorData};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use recur_rnn::RecurrentState;

    /// The inference step equals the burn policy's sequential-mode forward.
    #[test]
    fn matches_the_burn_policy() {
        let device = cpu_device();
        let mut rng = StdRng::seed_from_u64(3);
        let actions = [
            ActionSpec::Discrete { n: 3 },
            ActionSpec::Continuous {
                low: vec![-2.0, 0.0],
                high: vec![2.0, 1.0],
            },
        ];
        for (c, cell) in [CellKind::Lstm, CellKind::Gru, CellKind::MinGru]
            .into_iter()
            .enumerate()
        {
            let k = c % actions.len();
            for layers in [1, 2] {
                for (e, encoder) in [vec![], vec![16], vec![8, 12]].into_iter().enumerate() {
                    // A separate critic core on one encoder of each cell and depth.
                    let critic = if e == 1 {
                        CriticCore::Separate
                    } else {
                        CriticCore::Shared
                    };
                    let config = PolicyConfig::new(5, actions[k].clone())
                        .with_cell(cell)
                        .with_num_layers(layers)
                        .with_hidden_size(24)
                        .with_encoder(encoder.clone())
                        .with_critic_core(critic);
                    let policy = config
                        .init_seeded::<Cpu>(c as u64 + 10 * layers as u64, &device)
                        .unwrap();
                    // Two layers: a normalizer that shifts, scales and clips (observations
                    // reach +-2, normalized ones are clipped at 1.5).
                    let policy = if layers == 2 {
                        let stats = crate::policy::ObsStats {
                            mean: vec![0.5, -0.2, 0.0, 1.0, 0.1],
                            var: vec![0.25, 1.0, 4.0, 0.5, 2.0],
                            count: 100.0,
                        };
                        policy.with_obs_stats(&stats, 1.5)
                    } else {
                        policy
                    };
                    let mut fast = InferencePolicy::from_policy(&policy);
                    let n = 7;
                    let sl = config.state_layers();
                    let lh = sl * 24;
                    for _ in 0..3 {
                        let obs: Vec<f32> =
                            (0..n * 5).map(|_| rng.random_range(-2.0..2.0)).collect();
                        let is_init: Vec<bool> = (0..n).map(|_| rng.random_bool(0.4)).collect();
                        let rs_h: Vec<f32> =
                            (0..n * lh).map(|_| rng.random_range(-1.0..1.0)).collect();
                        let rs_c: Vec<f32> =
                            (0..n * lh).map(|_| rng.random_range(-1.0..1.0)).collect();
                        let mut out = StepOutput::default();
                        fast.step(
                            &obs,
                            &[],
                            &is_init,
                            &rs_h,
                            (cell == CellKind::Lstm).then_some(&rs_c[..]),
                            &mut out,
                        );
                        let t3 = |v: &Vec<f32>| {
                            Tensor::<Cpu, 3>::from_data(
                                TensorData::new(v.clone(), [n, sl, 24]),
                                &device,
                            )
                        };
                        let want = policy
                            .forward(
                                Tensor::from_data(TensorData::new(obs.clone(), [n, 5]), &device),
                                None,
                                Tensor::<Cpu, 1, Bool>::from_data(
                                    TensorData::new(is_init.clone(), [n]),
                                    &device,
                                ),
                                RecurrentState {
                                    rs_h: t3(&rs_h),
                                    rs_c: (cell == CellKind::Lstm).then(|| t3(&rs_c)),
                                },
                            )
                            .unwrap();
                        let close = |what: &str, got: &[f32], want: Vec<f32>| {
                            assert_eq!(got.len(), want.len(), "{what}");
                            let worst = got
                                .iter()
                                .zip(&want)
                                .map(|(a, b)| (a - b).abs())
                                .fold(0.0f32, f32::max);
                            assert!(
                                worst < 1e-5,
                                "{cell:?} L={layers} enc={encoder:?} {critic:?}: {what} differs by {worst}"
                            );
                        };
                        close("head", &out.head, host(want.head));
                        close("value", &out.value, host(want.value));
                        close("next_h", &out.next_h, host(want.next.rs_h));
                        if let Some(c) = want.next.rs_c {
                            close("next_c", &out.next_c, host(c));
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod image_tests {
    use super::*;
    use crate::backend::{cpu_device, Cpu};
    use crate::envs::ImagePart;
    use crate::policy::{pixel_tensor, PolicyConfig};
    use burn::tensor::{Bool, TensorData};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use recur_rnn::encoder::{EncoderConfig, EncoderLayer};
    use recur_rnn::RecurrentState;

    fn part(key: &str, shape: [usize; 3]) -> ImagePart {
        ImagePart {
            key: key.into(),
            shape,
        }
    }

    /// Image policies (pixels alone; values and an image; values and two images, the Dict
    /// concatenation): the host step, with its im2col encoder, equals the burn policy's
    /// sequential-mode forward.
    #[test]
    fn image_policies_match_the_burn_policy() {
        let device = cpu_device();
        let mut rng = StdRng::seed_from_u64(5);
        let small = EncoderConfig {
            layers: vec![
                EncoderLayer::conv(4, 3, 2, 1),
                EncoderLayer::Maxpool { kernel: 2 },
                EncoderLayer::conv(6, 2, 1, 0),
            ],
            scale: 1.0 / 255.0,
            features: 10,
            onehot: None,
        };
        let cases = [
            (0, vec![part("pixels", [12, 10, 1])], small.clone()),
            (4, vec![part("image", [7, 7, 3])], EncoderConfig::minigrid()),
            (
                3,
                vec![part("a", [9, 9, 2]), part("b", [12, 10, 1])],
                small.clone(),
            ),
            // MiniGrid's codes one-hot (the pixels drawn as codes, some past the ranges).
            (
                4,
                vec![part("image", [7, 7, 3])],
                EncoderConfig {
                    onehot: Some(vec![11, 6, 3]),
                    ..EncoderConfig::minigrid()
                },
            ),
        ];
        for (case, (d, images, cnn)) in cases.into_iter().enumerate() {
            for cell in [CellKind::Lstm, CellKind::Gru] {
                // One of them without memory (every step from zeros).
                let config = PolicyConfig::new(d, ActionSpec::Discrete { n: 3 })
                    .with_images(images.clone())
                    .with_cnn(Some(cnn.clone()))
                    .with_cell(cell)
                    .with_memory(!(case == 1 && cell == CellKind::Gru))
                    .with_hidden_size(16);
                let policy = config.init_seeded::<Cpu>(case as u64, &device).unwrap();
                let mut fast = InferencePolicy::from_policy(&policy);
                let (n, p, lh) = (5, config.pixels(), 16);
                for _ in 0..2 {
                    let obs: Vec<f32> = (0..n * d).map(|_| rng.random_range(-2.0..2.0)).collect();
                    let top = if cnn.onehot.is_some() { 12 } else { 255 };
                    let pixels: Vec<u8> = (0..n * p).map(|_| rng.random_range(0..=top)).collect();
                    let is_init: Vec<bool> = (0..n).map(|_| rng.random_bool(0.4)).collect();
                    let rs_h: Vec<f32> = (0..n * lh).map(|_| rng.random_range(-1.0..1.0)).collect();
                    let rs_c = rs_h.iter().map(|v| v * 0.5).collect::<Vec<f32>>();
                    let lstm = cell == CellKind::Lstm;
                    let mut out = StepOutput::default();
                    fast.step(
                        &obs,
                        &pixels,
                        &is_init,
                        &rs_h,
                        lstm.then_some(&rs_c[..]),
                        &mut out,
                    );
                    let t3 = |v: &Vec<f32>| {
                        Tensor::<Cpu, 3>::from_data(TensorData::new(v.clone(), [n, 1, 16]), &device)
                    };
                    let want = policy
                        .forward(
                            Tensor::from_data(TensorData::new(obs.clone(), [n, d]), &device),
                            pixel_tensor(&pixels, [n, p], &device),
                            Tensor::<Cpu, 1, Bool>::from_data(
                                TensorData::new(is_init.clone(), [n]),
                                &device,
                            ),
                            RecurrentState {
                                rs_h: t3(&rs_h),
                                rs_c: lstm.then(|| t3(&rs_c)),
                            },
                        )
                        .unwrap();
                    for (what, got, want) in [
                        ("head", &out.head, host(want.head)),
                        ("value", &out.value, host(want.value)),
                        ("next_h", &out.next_h, host(want.next.rs_h)),
                    ] {
                        assert_eq!(got.len(), want.len(), "{what}");
                        let worst = (got.iter().zip(&want))
                            .map(|(a, b)| (a - b).abs())
                            .fold(0.0f32, f32::max);
                        assert!(
                            worst < 1e-5,
                            "case {case} {cell:?}: {what} differs by {worst}"
                        );
                    }
                }
            }
        }
    }

    /// A policy for images needs a cnn, and a cnn needs images; both refusals name the key.
    #[test]
    fn a_cnn_goes_with_images() {
        let device = cpu_device();
        let images = vec![part("pixels", [8, 8, 1])];
        let err = PolicyConfig::new(0, ActionSpec::Discrete { n: 2 })
            .with_images(images)
            .init::<Cpu>(&device)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("encoder.cnn") && err.contains("pixels [8, 8, 1]"),
            "{err}"
        );
        let err = PolicyConfig::new(3, ActionSpec::Discrete { n: 2 })
            .with_cnn(Some(EncoderConfig::minigrid()))
            .init::<Cpu>(&device)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("encoder.cnn") && err.contains("no image"),
            "{err}"
        );
        // A config too deep for the image: the layer and the shapes named.
        let err = PolicyConfig::new(0, ActionSpec::Discrete { n: 2 })
            .with_images(vec![part("pixels", [8, 8, 1])])
            .with_cnn(Some(EncoderConfig::nature()))
            .init::<Cpu>(&device)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("encoder.cnn") && err.contains("layers[1].kernel"),
            "{err}"
        );
    }

    /// An observation without values (images only) puts no tensor without elements on the
    /// device: burn's CubeCL backends refuse to write, read or launch over one, and the CUDA
    /// learner failed at its first step on PixelCartPole. Every parameter has elements, the
    /// observations go in as one placeholder column, and the result is the policy that takes
    /// `[.., 0]`, with its normalizer's count read back.
    #[test]
    fn image_only_policies_hold_no_empty_tensor() {
        use crate::policy::{obs_tensor, ObsStats};
        let device = cpu_device();
        let config = PolicyConfig::new(0, ActionSpec::Discrete { n: 2 })
            .with_images(vec![part("pixels", [12, 10, 1])])
            .with_cnn(Some(EncoderConfig {
                layers: vec![EncoderLayer::conv(4, 3, 2, 1)],
                scale: 1.0 / 255.0,
                features: 6,
                onehot: None,
            }))
            .with_hidden_size(8);
        let no_empty_parameter = |policy: &Policy<Cpu>| {
            for shape in crate::weights::layout(policy) {
                assert!(
                    shape.iter().product::<usize>() > 0,
                    "an empty parameter {shape:?}"
                );
            }
        };
        let policy = config.init_seeded::<Cpu>(3, &device).unwrap();
        no_empty_parameter(&policy);
        let n = 4;
        let placeholder = obs_tensor::<Cpu, 2>(Vec::new(), [n, 0], &device);
        assert_eq!(placeholder.dims(), [n, 1]);
        let pixels: Vec<u8> = (0..n * config.pixels())
            .map(|i| (i * 37 % 256) as u8)
            .collect();
        let run = |obs: Tensor<Cpu, 2>| {
            let state = Tensor::<Cpu, 3>::zeros([n, 1, 8], &device);
            let out = policy
                .forward(
                    obs,
                    pixel_tensor(&pixels, [n, config.pixels()], &device),
                    Tensor::<Cpu, 1, Bool>::from_data(TensorData::new(vec![true; n], [n]), &device),
                    RecurrentState::lstm(state.clone(), state),
                )
                .unwrap();
            (host(out.head), host(out.value))
        };
        let empty =
            Tensor::<Cpu, 2>::from_data(TensorData::new(Vec::<f32>::new(), [n, 0]), &device);
        assert_eq!(run(placeholder), run(empty));
        let stats = ObsStats {
            mean: Vec::new(),
            var: Vec::new(),
            count: 7.0,
        };
        let policy = policy.with_obs_stats(&stats, 5.0);
        assert_eq!(policy.obs_stats(), stats);
        no_empty_parameter(&policy);
        let mut fast = InferencePolicy::from_policy(&policy);
        let mut out = StepOutput::default();
        let h = vec![0.0f32; n * 8];
        fast.step(&[], &pixels, &[true; 4], &h, Some(&h), &mut out);
        assert_eq!(out.value.len(), n);
    }
}

//! The policy network shared by actor and learner: observation normalizer -> encoder MLP ->
//! recurrent core (LSTM, GRU or minGRU; optionally a second one for the value head) -> policy
//! head (categorical logits for a discrete action space, per component for a multi-discrete one,
//! mean and log-std of a tanh-squashed Gaussian for a box) and value head.
//!
//! A [`PolicyConfig`] is fitted to an environment's spaces ([`policy_config_for_spec`]) by the
//! learner, which sends it whole to its actors in their
//! [`ActorArgs`](crate::actor_args::ActorArgs).
//!
//! The actor runs it in sequential mode, one step of `E` environments at a time
//! ([`inference::InferencePolicy`]: its weights on the host, the equations of
//! [`Policy::forward`] on `[E, obs_dim]`); the learner in recurrent mode
//! ([`Policy::forward_batch`] on `[B, T, obs_dim]`, or [`Policy::forward`] on a flat packed
//! `[N]` axis) under [`set_recurrent_mode`](recur_rnn::set_recurrent_mode).

mod build;
pub mod dist;
pub mod image;
pub mod inference;
mod obs_stats;

pub use obs_stats::{ObsStats, OBS_NORM_ROWS};

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::Linear;
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::backend::{cpu_device, Cpu};
use crate::chunk::{ActionKind, Chunk, ChunkSchema};
use crate::envs::{EnvError, EnvSpec, ImagePart, Registry, Space};
use image::ImageEncoder;
use recur_rnn::{
    set_recurrent_mode, CellKind, RecurrentBackend, RecurrentCore, RecurrentError, RecurrentMode,
    RecurrentOutput, RecurrentState,
};

/// The action space a policy acts in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionSpec {
    /// One of `n` actions; the head outputs `n` logits.
    Discrete { n: usize },
    /// A vector in the box `[low, high]`; the head outputs the mean and log-std of a Gaussian
    /// whose sample is squashed by `tanh` and scaled into the box.
    Continuous { low: Vec<f32>, high: Vec<f32> },
    /// One of `nvec[j]` choices per component `j`; the head outputs `nvec[j]` logits per
    /// component, concatenated (a factorized categorical: components are independent given
    /// the features, the log-probability is the sum of the components').
    MultiDiscrete { nvec: Vec<usize> },
}

impl ActionSpec {
    /// Outputs of the policy head: `n` logits, or `2 * dim` (mean, then log-std).
    pub fn head_size(&self) -> usize {
        match self {
            ActionSpec::Discrete { n } => *n,
            ActionSpec::Continuous { low, .. } => 2 * low.len(),
            ActionSpec::MultiDiscrete { nvec } => nvec.iter().sum(),
        }
    }

    /// Floats per action in a chunk: 1 (the index) or the box dimension.
    pub fn action_dim(&self) -> usize {
        match self {
            ActionSpec::Discrete { .. } => 1,
            ActionSpec::Continuous { low, .. } => low.len(),
            ActionSpec::MultiDiscrete { nvec } => nvec.len(),
        }
    }
}

/// The policy's action spec for an environment's action space.
pub fn action_spec(space: &Space) -> ActionSpec {
    match space {
        Space::Discrete { n } => ActionSpec::Discrete { n: *n },
        Space::Box { low, high } => ActionSpec::Continuous {
            low: low.clone(),
            high: high.clone(),
        },
        Space::MultiDiscrete { nvec } => ActionSpec::MultiDiscrete { nvec: nvec.clone() },
        Space::Image { .. } | Space::Dict { .. } => {
            unreachable!(
                "registration refuses {} as an action space",
                space.describe()
            )
        }
    }
}

/// A policy config fitted to environment `env` of the built-in registry (gymnasium ids
/// start a worker to read the spaces).
pub fn policy_config_for(env: &str) -> Result<PolicyConfig, EnvError> {
    Ok(policy_config_for_spec(&Registry::builtin().spec(env)?))
}

/// A policy config fitted to an environment's spaces.
pub fn policy_config_for_spec(spec: &EnvSpec) -> PolicyConfig {
    PolicyConfig::new(
        spec.observation_space.dim(),
        action_spec(&spec.action_space),
    )
    .with_images(spec.observation_space.images())
}

/// The chunk layout of an actor running `policy` with `envs` environments and `steps` steps
/// per chunk (the learner derives the run's schema the same way).
pub fn chunk_schema(policy: &PolicyConfig, envs: usize, steps: usize) -> ChunkSchema {
    ChunkSchema {
        envs,
        steps,
        obs_dim: policy.obs_dim,
        action: match &policy.action {
            ActionSpec::Discrete { .. } => ActionKind::Discrete,
            ActionSpec::Continuous { low, .. } => ActionKind::Continuous { dim: low.len() },
            ActionSpec::MultiDiscrete { nvec } => ActionKind::MultiDiscrete { dim: nvec.len() },
        },
        cell: policy.cell,
        num_layers: policy.state_layers(),
        hidden_size: policy.hidden_size,
        images: policy.images.clone(),
    }
}

/// Configuration of a [`Policy`].
#[derive(Config, Debug, PartialEq)]
pub struct PolicyConfig {
    /// Observation features.
    pub obs_dim: usize,
    pub action: ActionSpec,
    /// The images of the observation's pixels lane ([`Space::images`]), empty without.
    #[config(default = "Vec::new()")]
    pub images: Vec<ImagePart>,
    /// Widths of the encoder MLP's hidden layers over the observation's values (tanh after
    /// each); empty = the normalized values go to the core as they are.
    #[config(default = "vec![64]")]
    pub encoder: Vec<usize>,
    /// The convolutional encoder of every image of the pixels lane (one encoder per image,
    /// each with this config); required when there are images. The core's input is the MLP's
    /// output (when the observation has values) followed by each image's features.
    #[config(default = "None")]
    pub cnn: Option<recur_rnn::encoder::EncoderConfig>,
    #[config(default = "CellKind::Lstm")]
    pub cell: CellKind,
    /// Hidden size of the recurrent core.
    #[config(default = 64)]
    pub hidden_size: usize,
    #[config(default = 1)]
    pub num_layers: usize,
    /// Recurrent-mode backend of the core.
    #[config(default = "RecurrentBackend::Auto")]
    pub backend: RecurrentBackend,
    /// Whether the learner keeps [`Policy::obs_norm`] up to date (running mean and variance
    /// of the observations it trains on). Off, the normalizer stays the identity.
    #[config(default = false)]
    pub obs_norm: bool,
    /// Normalized observations are clipped to `[-obs_clip, obs_clip]` (with `obs_norm`).
    #[config(default = 10.0)]
    pub obs_clip: f32,
    /// Whether the value head reads the actor's recurrent core (`shared`) or a core of its
    /// own (`separate`, SB3's `enable_critic_lstm`) on the same encoder output.
    #[config(default = "CriticCore::Shared")]
    pub critic_core: CriticCore,
    /// `false`: the core starts from a zero state at every step (every step is `is_init`), so
    /// the policy is feedforward with the same layers: the floor a task that needs memory is
    /// measured against.
    #[config(default = true)]
    pub memory: bool,
    /// Added to the LSTM's forget-gate bias (`bias_ih`'s second block of `H`) after PyTorch's
    /// initialization, in every layer of every core: 1.0 starts the cell remembering (Gers
    /// et al. 2000, Jozefowicz et al. 2015; Keras's `unit_forget_bias`). 0 keeps PyTorch's
    /// `nn.LSTM` initialization exactly. LSTM only.
    #[config(default = 0.0)]
    pub forget_bias: f32,
}

/// Where the value head's recurrent features come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CriticCore {
    /// The actor's recurrent core (one state).
    #[default]
    Shared,
    /// A second recurrent core of the same cell and sizes; its state follows the actor core's
    /// layers in `rs_h` / `rs_c` (`[.., 2L, H]`).
    Separate,
}

/// Policy head outputs and the value for a batch, plus the recurrent state to carry on.
#[derive(Clone, Debug)]
pub struct PolicyOutput<B: Backend, const D: usize, const DS: usize> {
    /// Categorical logits `[.., n]`, or mean and log-std `[.., 2 * dim]`.
    pub head: Tensor<B, D>,
    /// State value `[.., 1]`.
    pub value: Tensor<B, D>,
    /// The recurrent core's output `[.., H]`.
    pub features: Tensor<B, D>,
    /// `("next", rs_h)` / `("next", rs_c)`.
    pub next: RecurrentState<B, DS>,
}

/// Observation normalizer -> encoder MLP -> recurrent core -> policy and value heads.
#[derive(Module, Debug)]
pub struct Policy<B: Backend> {
    /// `[OBS_NORM_ROWS, obs_dim]`: mean, variance, count, clip (see [`OBS_NORM_ROWS`]). A
    /// parameter so that weight blobs and checkpoints carry it, but no gradient reaches it
    /// (the forward detaches it); the learner sets it ([`Policy::with_obs_stats`]). Initially
    /// the identity: mean 0, variance 1, no clip.
    pub obs_norm: Param<Tensor<B, 2>>,
    pub encoder: Vec<Linear<B>>,
    /// One convolutional encoder per image of the pixels lane ([`PolicyConfig::cnn`]).
    pub cnn: Vec<ImageEncoder<B>>,
    pub core: RecurrentCore<B>,
    /// The value head's own core ([`CriticCore::Separate`]).
    pub critic_core: Option<RecurrentCore<B>>,
    pub policy_head: Linear<B>,
    pub value_head: Linear<B>,
    #[module(skip)]
    config: PolicyConfig,
}

/// Forces burn's lazily initialised parameters to draw their values now.
pub(super) struct Materialize;
impl<B: Backend> burn::module::ModuleMapper<B> for Materialize {}

/// Serialises seeded initialisation: burn draws initial weights from one process-wide RNG,
/// lazily, at a parameter's first use.
static SEEDED_INIT: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A CPU policy with `config`'s architecture, initialised deterministically from `seed`
/// ([`PolicyConfig::init_seeded`] on [`Cpu`]): what actors, evaluation and checkpoints build.
pub fn init_policy(config: &PolicyConfig, seed: u64) -> Result<Policy<Cpu>, RecurrentError> {
    config.init_seeded::<Cpu>(seed, &cpu_device())
}

impl PolicyConfig {
    /// This policy on the spaces of `spec`: its observation and action sizes replaced by the
    /// environment's, everything else kept (the same config when it was fitted to them).
    pub fn fitted_to(self, spec: &EnvSpec) -> PolicyConfig {
        let PolicyConfig {
            obs_dim,
            action,
            images,
            ..
        } = policy_config_for_spec(spec);
        PolicyConfig {
            obs_dim,
            action,
            images,
            ..self
        }
    }

    /// Bytes of a step's pixels lane (0 without images).
    pub fn pixels(&self) -> usize {
        self.images.iter().map(ImagePart::bytes).sum()
    }

    /// Layers of the recurrent state an actor carries and a chunk stores: `num_layers`, twice
    /// that with a separate critic core.
    pub fn state_layers(&self) -> usize {
        match self.critic_core {
            CriticCore::Shared => self.num_layers,
            CriticCore::Separate => 2 * self.num_layers,
        }
    }

    /// Builds the policy with weights that depend on `seed` alone: seeds burn's RNG and
    /// draws every parameter while holding a process-wide lock, so concurrent builders on
    /// other threads cannot interleave their draws.
    pub fn init_seeded<B: Backend>(
        &self,
        seed: u64,
        device: &B::Device,
    ) -> Result<Policy<B>, RecurrentError> {
        let _lock = SEEDED_INIT.lock().unwrap_or_else(|e| e.into_inner());
        B::seed(device, seed);
        Ok(self.init::<B>(device)?.map(&mut Materialize))
    }
}

impl<B: Backend> Policy<B> {
    pub fn config(&self) -> &PolicyConfig {
        &self.config
    }

    pub fn action(&self) -> &ActionSpec {
        &self.config.action
    }

    /// The core's input: the MLP over the normalized `obs` `[.., obs_dim]` (when the
    /// observation has values), followed by every image's features from `pixels` `[.., P]`.
    fn encode<const D: usize>(
        &self,
        obs: Tensor<B, D>,
        pixels: Option<Tensor<B, D>>,
    ) -> Result<Tensor<B, D>, RecurrentError> {
        let mut parts = Vec::with_capacity(1 + self.cnn.len());
        let dims = obs.dims();
        if self.config.obs_dim > 0 {
            parts.push(
                self.encoder
                    .iter()
                    .fold(self.normalize(obs), |x, layer| layer.forward(x).tanh()),
            );
        }
        if !self.cnn.is_empty() {
            let p = self.config.pixels();
            let pixels = match pixels {
                Some(px) if px.dims()[..D - 1] == dims[..D - 1] && px.dims()[D - 1] == p => px,
                other => {
                    return Err(RecurrentError::Shape {
                        field: "pixels",
                        got: other.map(|t| t.dims().to_vec()).unwrap_or_default(),
                        expected: format!("{:?} (the images' bytes of every step)", {
                            let mut want = dims;
                            want[D - 1] = p;
                            want
                        }),
                    })
                }
            };
            let n: usize = dims[..D - 1].iter().product();
            let flat = pixels.reshape([n, p]);
            for enc in &self.cnn {
                let mut shape = dims;
                shape[D - 1] = enc.features();
                parts.push(enc.forward(flat.clone()).reshape(shape));
            }
        }
        Ok(if parts.len() == 1 {
            parts.pop().expect("one part")
        } else {
            Tensor::cat(parts, D - 1)
        })
    }

    /// `clamp((obs - mean) / sqrt(var + 1e-8), -clip, clip)` per feature, with the statistics
    /// held out of autodiff.
    pub fn normalize<const D: usize>(&self, obs: Tensor<B, D>) -> Tensor<B, D> {
        let d = self.config.obs_dim;
        let stats = self.obs_norm.val().detach();
        let dims = obs.dims();
        let mut shape = [1usize; D];
        shape[D - 1] = d;
        let row = |i: usize| {
            stats
                .clone()
                .slice([i..i + 1, 0..d])
                .reshape(shape)
                .expand(dims)
        };
        let clip = row(3);
        ((obs - row(0)) / (row(1) + 1e-8).sqrt())
            .max_pair(clip.clone().neg())
            .min_pair(clip)
    }

    /// The observation statistics the normalizer holds.
    pub fn obs_stats(&self) -> ObsStats {
        let d = self.config.obs_dim;
        let v = crate::backend::to_vec(self.obs_norm.val());
        // Rows as wide as the tensor: `obs_norm_width(d)`, or 0 in a checkpoint from before
        // image-only observations had their one placeholder column.
        let w = v.len() / OBS_NORM_ROWS;
        ObsStats {
            mean: v[..d].to_vec(),
            var: v[w..w + d].to_vec(),
            count: v.get(2 * w).map_or(0.0, |&c| c as f64),
        }
    }

    /// The policy with its normalizer set to `stats`, clipping at `clip`.
    pub fn with_obs_stats(mut self, stats: &ObsStats, clip: f32) -> Self {
        let w = obs_norm_width(self.config.obs_dim);
        let (mean, var) = match self.config.obs_dim {
            0 => (&[0.0][..], &[1.0][..]),
            _ => (&stats.mean[..], &stats.var[..]),
        };
        let mut values = Vec::with_capacity(OBS_NORM_ROWS * w);
        values.extend_from_slice(mean);
        values.extend_from_slice(var);
        values.extend(std::iter::repeat_n(stats.count as f32, w));
        values.extend(std::iter::repeat_n(clip, w));
        let (id, tensor, mapper) = self.obs_norm.consume();
        let data = TensorData::new(values, [OBS_NORM_ROWS, w]);
        let new =
            Tensor::from_data(data, &tensor.device()).set_require_grad(tensor.is_require_grad());
        self.obs_norm = Param::from_mapped_value(id, new, mapper);
        self
    }

    /// One call on `N` rows: `obs` `[N, obs_dim]`, `is_init` `[N]`, `state` `[N, S, H]`
    /// (`S` = [`PolicyConfig::state_layers`]). In sequential mode `N` environments take one
    /// step (state zeroed at `is_init`); in recurrent mode the rows are one flat packed time
    /// axis (state replaced by the stored state at `is_init`).
    ///
    /// `pixels` `[N, P]`: the steps' pixels lane as `f32` byte values (`None` without images).
    pub fn forward(
        &self,
        obs: Tensor<B, 2>,
        pixels: Option<Tensor<B, 2>>,
        is_init: Tensor<B, 1, Bool>,
        state: RecurrentState<B, 3>,
    ) -> Result<PolicyOutput<B, 2, 3>, RecurrentError> {
        self.run(obs, pixels, is_init, state, RecurrentCore::forward)
    }

    /// One call on `[B, T]`: `obs` `[B, T, obs_dim]`, `is_init` `[B, T]`, stored `state`
    /// `[B, T, S, H]` (recurrent mode: sequences with resets at `is_init`).
    /// `pixels` `[B, T, P]` as in [`Policy::forward`].
    pub fn forward_batch(
        &self,
        obs: Tensor<B, 3>,
        pixels: Option<Tensor<B, 3>>,
        is_init: Tensor<B, 2, Bool>,
        state: RecurrentState<B, 4>,
    ) -> Result<PolicyOutput<B, 3, 4>, RecurrentError> {
        self.run(obs, pixels, is_init, state, RecurrentCore::forward_batch)
    }

    /// [`Policy::forward`] and [`Policy::forward_batch`] at any rank: normalize and encode
    /// `obs` `[.., obs_dim]`, run the actor core (and a separate critic core on its part of
    /// `state`) with `core_forward`, the core's call of that rank, then the heads.
    fn run<const D: usize, const DI: usize, const DS: usize>(
        &self,
        obs: Tensor<B, D>,
        pixels: Option<Tensor<B, D>>,
        is_init: Tensor<B, DI, Bool>,
        state: RecurrentState<B, DS>,
        core_forward: impl Fn(
            &RecurrentCore<B>,
            Tensor<B, D>,
            Tensor<B, DI, Bool>,
            RecurrentState<B, DS>,
        ) -> Result<RecurrentOutput<B, D, DS>, RecurrentError>,
    ) -> Result<PolicyOutput<B, D, DS>, RecurrentError> {
        check_obs(&obs.dims(), self.config.obs_dim)?;
        let x = self.encode(obs, pixels)?;
        let (is_init, state) = if self.config.memory {
            (is_init, state)
        } else {
            // Every step from zeros: `is_init` everywhere, the stored state zeroed.
            let dims = is_init.dims();
            let all = TensorData::new(vec![true; dims.iter().product()], dims);
            let state = RecurrentState {
                rs_h: state.rs_h.zeros_like(),
                rs_c: state.rs_c.map(|c| c.zeros_like()),
            };
            (Tensor::from_data(all, &is_init.device()), state)
        };
        let (actor_state, critic_state) = self.split_state(state);
        let out = core_forward(&self.core, x.clone(), is_init.clone(), actor_state)?;
        let critic = match (&self.critic_core, critic_state) {
            (Some(core), Some(state)) => Some(core_forward(core, x, is_init, state)?),
            _ => None,
        };
        let (value_features, critic_next) = match critic {
            Some(c) => (c.features, Some(c.next)),
            None => (out.features.clone(), None),
        };
        Ok(PolicyOutput {
            head: self.policy_head.forward(out.features.clone()),
            value: self.value_head.forward(value_features),
            features: out.features,
            next: join_state(out.next, critic_next),
        })
    }

    /// The recurrent-state entries an actor carries: the core's, with
    /// [`PolicyConfig::state_layers`] layers.
    pub fn primer(&self) -> recur_rnn::Primer {
        let mut primer = self.core.primer();
        for entry in &mut primer.entries {
            entry.shape[0] = self.config.state_layers();
        }
        primer
    }

    /// The actor core's and the critic core's parts of a state `[.., S, H]` (the layer axis
    /// is `D - 2`); the whole state and `None` with a shared core.
    fn split_state<const D: usize>(
        &self,
        state: RecurrentState<B, D>,
    ) -> (RecurrentState<B, D>, Option<RecurrentState<B, D>>) {
        if self.critic_core.is_none() {
            return (state, None);
        }
        let l = self.config.num_layers;
        let part = |from: usize| RecurrentState {
            rs_h: state.rs_h.clone().narrow(D - 2, from, l),
            rs_c: state.rs_c.clone().map(|c| c.narrow(D - 2, from, l)),
        };
        (part(0), Some(part(l)))
    }

    /// Recurrent mode over a whole chunk `[E, T]` of `schema`, each env row starting from
    /// its stored state (`rs_h`, `rs_c`) and resetting at `is_init`: what the learner's
    /// critic runs, and what reproduces the actor's step-by-step outputs.
    pub fn forward_chunk(
        &self,
        chunk: &Chunk,
        schema: &ChunkSchema,
    ) -> Result<PolicyOutput<B, 3, 4>, RecurrentError> {
        let (e, t, d) = (schema.envs, schema.steps, schema.obs_dim);
        let (l, h) = (schema.num_layers, schema.hidden_size);
        let device = self.policy_head.weight.val().device();
        let state = |v: &Vec<f32>| {
            Tensor::<B, 4>::from_data(TensorData::new(v.clone(), [e, t, l, h]), &device)
        };
        let is_init: Vec<bool> = chunk.is_init.iter().map(|&x| x == 1).collect();
        let _mode = set_recurrent_mode(RecurrentMode::Recurrent);
        self.forward_batch(
            obs_tensor(chunk.observation.clone(), [e, t, d], &device),
            pixel_tensor(&chunk.pixels, [e, t, schema.pixels()], &device),
            Tensor::from_data(TensorData::new(is_init, [e, t]), &device),
            RecurrentState {
                rs_h: state(&chunk.rs_h),
                rs_c: chunk.rs_c.as_ref().map(state),
            },
        )
    }
}

/// A pixels lane `[.., P]` as the `f32` byte values a policy's forward takes; `None` when
/// `P` is 0 (no images).
pub fn pixel_tensor<B: Backend, const D: usize>(
    bytes: &[u8],
    shape: [usize; D],
    device: &B::Device,
) -> Option<Tensor<B, D>> {
    (shape[D - 1] > 0).then(|| {
        let values: Vec<f32> = bytes.iter().map(|&b| f32::from(b)).collect();
        Tensor::from_data(TensorData::new(values, shape), device)
    })
}

/// The actor core's next state followed by the critic core's (if any) on the layer axis.
fn join_state<B: Backend, const D: usize>(
    actor: RecurrentState<B, D>,
    critic: Option<RecurrentState<B, D>>,
) -> RecurrentState<B, D> {
    match critic {
        None => actor,
        Some(critic) => RecurrentState {
            rs_h: Tensor::cat(vec![actor.rs_h, critic.rs_h], D - 2),
            rs_c: actor
                .rs_c
                .zip(critic.rs_c)
                .map(|(a, c)| Tensor::cat(vec![a, c], D - 2)),
        },
    }
}

/// Columns of [`Policy::obs_norm`]: one per observation value, and one placeholder column
/// (mean 0, variance 1, never read as a feature) for an observation without values (images
/// only). burn's CubeCL backends cannot write, read or launch over a tensor with no
/// elements (on CUDA the run failed at its first step), so no parameter is empty.
pub fn obs_norm_width(obs_dim: usize) -> usize {
    obs_dim.max(1)
}

/// Observations `values` `[.., obs_dim]` (`shape`) as the tensor [`Policy::forward`] takes;
/// without values (`obs_dim` 0, images only) one column of zeros `[.., 1]`, never read, for
/// the reason of [`obs_norm_width`].
pub fn obs_tensor<B: Backend, const D: usize>(
    values: Vec<f32>,
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D> {
    if shape[D - 1] > 0 {
        return Tensor::from_data(TensorData::new(values, shape), device);
    }
    let mut one = shape;
    one[D - 1] = 1;
    Tensor::zeros(one, device)
}

/// `dims` end in `obs_dim`, or for an observation without values in 0 or the one column of
/// [`obs_tensor`].
fn check_obs(dims: &[usize], obs_dim: usize) -> Result<(), RecurrentError> {
    let last = dims.last().copied();
    if last == Some(obs_dim) || (obs_dim == 0 && last == Some(1)) {
        return Ok(());
    }
    Err(RecurrentError::Shape {
        field: "observation",
        got: dims.to_vec(),
        expected: format!("[.., {obs_dim}] (obs_dim = {obs_dim})"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{cpu_device, to_vec, Cpu};

    /// Merging batches one by one gives the statistics of all of them at once.
    #[test]
    fn obs_stats_merge_equals_the_whole_batch() {
        let data: Vec<f32> = (0..60)
            .map(|i| ((i * 37) % 11) as f32 * 0.3 - 1.0)
            .collect();
        let fresh = || ObsStats {
            mean: vec![0.0; 3],
            var: vec![1.0; 3],
            count: 0.0,
        };
        let mut whole = fresh();
        whole.merge(&data);
        let mut parts = fresh();
        for part in data.chunks(9) {
            parts.merge(part);
        }
        for j in 0..3 {
            let col: Vec<f64> = data.iter().skip(j).step_by(3).map(|&x| x as f64).collect();
            let mean = col.iter().sum::<f64>() / 20.0;
            let var = col.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 20.0;
            for s in [&whole, &parts] {
                assert!((s.mean[j] as f64 - mean).abs() < 1e-5, "{s:?}");
                assert!((s.var[j] as f64 - var).abs() < 1e-5, "{s:?}");
            }
        }
        assert_eq!(parts.count, 20.0);
    }

    /// The normalizer starts as the identity and, once set, shifts, scales and clips; its
    /// statistics read back.
    #[test]
    fn normalizer_is_identity_until_set() {
        let device = cpu_device();
        let config = PolicyConfig::new(2, ActionSpec::Discrete { n: 2 });
        let policy = config.init_seeded::<Cpu>(0, &device).unwrap();
        let obs = Tensor::<Cpu, 2>::from_data(
            TensorData::new(vec![3.0f32, -1e6, 0.5, 7.0], [2, 2]),
            &device,
        );
        assert_eq!(to_vec(policy.normalize(obs.clone())), to_vec(obs.clone()));
        let stats = ObsStats {
            mean: vec![1.0, 0.0],
            var: vec![4.0, 1.0],
            count: 8.0,
        };
        let policy = policy.with_obs_stats(&stats, 5.0);
        assert_eq!(policy.obs_stats(), stats);
        let got = to_vec(policy.normalize(obs));
        let want = [1.0f32, -5.0, -0.25, 5.0];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "{got:?}");
        }
    }

    /// A separate critic core: stepping sequentially (state `[N, 2L, H]` carried between
    /// steps) gives the heads and values that one recurrent-mode call over `[N, T]` gives from
    /// the stored states, and the critic's half of the state differs from the actor's.
    #[test]
    fn separate_critic_core_sequential_equals_recurrent() {
        let device = cpu_device();
        let config = PolicyConfig::new(3, ActionSpec::Discrete { n: 2 })
            .with_hidden_size(8)
            .with_num_layers(2)
            .with_critic_core(CriticCore::Separate);
        let policy = config.init_seeded::<Cpu>(4, &device).unwrap();
        let (n, t, sl, h) = (3, 5, config.state_layers(), 8);
        assert_eq!(sl, 4);
        assert_eq!(policy.primer().entries[0].shape, [4, 8]);
        let obs: Vec<f32> = (0..n * t * 3)
            .map(|i| ((i * 7) % 5) as f32 * 0.4 - 1.0)
            .collect();
        let mut state_h = vec![0.0f32; n * sl * h];
        let mut state_c = vec![0.0f32; n * sl * h];
        let (mut stored_h, mut stored_c) = (Vec::new(), Vec::new());
        let (mut heads, mut values) = (vec![0.0f32; n * t * 2], vec![0.0f32; n * t]);
        for step in 0..t {
            let o: Vec<f32> = (0..n)
                .flat_map(|e| obs[(e * t + step) * 3..(e * t + step + 1) * 3].to_vec())
                .collect();
            stored_h.push(state_h.clone());
            stored_c.push(state_c.clone());
            let t3 = |v: &Vec<f32>| {
                Tensor::<Cpu, 3>::from_data(TensorData::new(v.clone(), [n, sl, h]), &device)
            };
            let out = policy
                .forward(
                    Tensor::from_data(TensorData::new(o, [n, 3]), &device),
                    None,
                    Tensor::from_data(TensorData::new(vec![step == 0; n], [n]), &device),
                    RecurrentState::lstm(t3(&state_h), t3(&state_c)),
                )
                .unwrap();
            let (hd, v) = (to_vec(out.head), to_vec(out.value));
            for e in 0..n {
                heads[(e * t + step) * 2..(e * t + step + 1) * 2]
                    .copy_from_slice(&hd[e * 2..e * 2 + 2]);
                values[e * t + step] = v[e];
            }
            state_h = to_vec(out.next.rs_h);
            state_c = to_vec(out.next.rs_c.unwrap());
        }
        let per_layer = sl * h;
        let (actor_half, critic_half) = state_h[..per_layer].split_at(per_layer / 2);
        assert_ne!(actor_half, critic_half);
        // Stored states as a chunk lays them out: [N, T, S, H].
        let stored = |steps: &Vec<Vec<f32>>| {
            let mut v = Vec::new();
            for e in 0..n {
                for s in steps {
                    v.extend_from_slice(&s[e * per_layer..(e + 1) * per_layer]);
                }
            }
            Tensor::<Cpu, 4>::from_data(TensorData::new(v, [n, t, sl, h]), &device)
        };
        let is_init: Vec<bool> = (0..n * t).map(|p| p % t == 0).collect();
        let _mode = set_recurrent_mode(RecurrentMode::Recurrent);
        let out = policy
            .forward_batch(
                Tensor::from_data(TensorData::new(obs, [n, t, 3]), &device),
                None,
                Tensor::from_data(TensorData::new(is_init, [n, t]), &device),
                RecurrentState::lstm(stored(&stored_h), stored(&stored_c)),
            )
            .unwrap();
        for (what, got, want) in [
            ("head", to_vec(out.head), heads),
            ("value", to_vec(out.value), values),
        ] {
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(worst < 1e-5, "{what} differs by {worst}");
        }
    }
}

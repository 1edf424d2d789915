//! Configuration shared by [`LstmModule`](super::LstmModule) and [`GruModule`](super::GruModule).

use burn::config::Config;
use serde::{Deserialize, Serialize};

use super::{CellKind, RecurrentError, RecurrentMode};

/// How recurrent mode handles `is_init` resets inside a batch (TorchRL's `recurrent_backend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RecurrentBackend {
    /// Split every row at `is_init`, pad the segments to a common length, run one batched RNN
    /// over them (no resets inside), and unpad. Cost grows with the number of segments.
    Pad,
    /// A time loop over the original rows with a per-step reset to the stored state: no
    /// padding, and a cost that does not depend on how many resets there are.
    Scan,
    /// Hand-written forward and backward kernels: on the CPU backends the `scan` time loop
    /// with one GEMM and one fused pass per step; on a CubeCL device (burn's CUDA or wgpu
    /// backend, built with the `cuda` or `wgpu` feature) the whole time loop of a layer in one
    /// kernel launch. Both have their own backward pass (saved gates, or recomputed with
    /// `recompute = "full"`).
    Fused,
    /// The best backend available: `fused` where it runs (the CPU backends, and burn's CUDA
    /// and wgpu backends in a build with their feature), `scan` elsewhere.
    #[default]
    Auto,
}

impl RecurrentBackend {
    /// The backend `auto` resolves to on the CPU backends (`Cpu`, `CpuAutodiff`): `fused`;
    /// concrete backends resolve to themselves. See [`resolve_for`](Self::resolve_for).
    pub fn resolve(self) -> RecurrentBackend {
        self.resolve_for(true)
    }

    /// The backend `auto` resolves to, given whether the tensor backend runs `fused` (see
    /// [`FusedKernels`]); concrete backends resolve to themselves.
    pub fn resolve_for(self, fused_available: bool) -> RecurrentBackend {
        match self {
            RecurrentBackend::Auto if fused_available => RecurrentBackend::Fused,
            RecurrentBackend::Auto => RecurrentBackend::Scan,
            concrete => concrete,
        }
    }
}

config_names!(
    RecurrentBackend,
    "backend",
    Pad => "pad",
    Scan => "scan",
    Fused => "fused",
    Auto => "auto",
);

/// Whether the backward pass saves activations (`none`) or recomputes them (`full`), trading
/// compute for activation memory (TorchRL's `recurrent_recompute`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Recompute {
    /// Save what the backward pass needs.
    #[default]
    None,
    /// Replay the forward pass during backward instead of saving per-step activations.
    Full,
}

config_names!(Recompute, "recompute", None => "none", Full => "full");

/// Which fused kernels a tensor backend runs (see [`fused_kernels`](crate::fused_kernels)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FusedKernels {
    /// None: `backend = "fused"` is refused, `auto` picks `scan`.
    Unavailable,
    /// The hand-written CPU kernels (`Cpu`, `CpuAutodiff`).
    Cpu,
    /// The CubeCL kernels (burn's CUDA or wgpu backend).
    Cube,
}

impl FusedKernels {
    pub fn available(self) -> bool {
        self != FusedKernels::Unavailable
    }
}

/// The arithmetic of the recurrent product `h W_hh^T` (and of its backward) in the CubeCL
/// fused kernels, as TorchRL's `recurrent_matmul_precision`: the state, the gates and every
/// sum stay `f32`; `tf32` and `bf16` round the product's operands (the state `h` entering a
/// step, `W_hh`, and in the backward the gate gradients) to those formats' mantissas (10 and
/// 7 bits, round to nearest even), as a tensor core does.
///
/// The CPU backends compute in `f32` only: there `tf32` and `bf16` are refused and `auto`
/// means `ieee`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum MatmulPrecision {
    /// IEEE `f32` products.
    Ieee,
    /// Operands rounded to TensorFloat-32 (10-bit mantissa).
    Tf32,
    /// Operands rounded to bfloat16 (7-bit mantissa).
    Bf16,
    /// `ieee` on every device today: the CubeCL kernel does its products on the CUDA cores,
    /// where rounding the operands costs time and saves none (a tensor-core path would
    /// resolve `auto` to `tf32` on GPUs that have them).
    #[default]
    Auto,
}

impl MatmulPrecision {
    /// The precision `auto` resolves to (`ieee`); concrete modes resolve to themselves.
    pub fn resolve(self) -> MatmulPrecision {
        match self {
            MatmulPrecision::Auto => MatmulPrecision::Ieee,
            concrete => concrete,
        }
    }
}

config_names!(
    MatmulPrecision,
    "matmul_precision",
    Ieee => "ieee",
    Tf32 => "tf32",
    Bf16 => "bf16",
    Auto => "auto",
);

/// Configuration of a recurrent module, with PyTorch's `nn.LSTM`/`nn.GRU` options and
/// TorchRL's recurrent-module options.
///
/// ```
/// use recur_rnn::burn_backend::{cpu_device, Cpu};
/// use recur_rnn::{RecurrentBackend, RecurrentConfig};
///
/// let lstm = RecurrentConfig::new(64, 256)
///     .with_num_layers(2)
///     .with_backend(RecurrentBackend::Scan)
///     .init_lstm::<Cpu>(&cpu_device())
///     .unwrap();
/// assert_eq!(lstm.primer().entries.len(), 2); // rs_h and rs_c
/// ```
#[derive(Config, Debug, PartialEq)]
pub struct RecurrentConfig {
    /// Features of the input `x`.
    pub input_size: usize,
    /// Features of the hidden state `h` (`H`).
    pub hidden_size: usize,
    /// Stacked layers (`L`); layer `l >= 1` reads layer `l - 1`'s output.
    #[config(default = 1)]
    pub num_layers: usize,
    /// Whether the layers have `bias_ih` and `bias_hh`.
    #[config(default = true)]
    pub bias: bool,
    /// Dropout on the output of every layer but the last, during training (autodiff) only.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// How recurrent mode handles resets.
    #[config(default = "RecurrentBackend::Auto")]
    pub backend: RecurrentBackend,
    /// Activation memory policy of the backward pass.
    #[config(default = "Recompute::None")]
    pub recompute: Recompute,
    /// The recurrent product's arithmetic in the CubeCL fused kernels.
    #[config(default = "MatmulPrecision::Auto")]
    pub matmul_precision: MatmulPrecision,
    /// The mode used when no [`set_recurrent_mode`](super::set_recurrent_mode) guard is alive.
    #[config(default = "RecurrentMode::Sequential")]
    pub default_recurrent_mode: RecurrentMode,
}

impl RecurrentConfig {
    /// Checks every value and combination; the error names the key and the value.
    /// `fused`: which fused kernels the tensor backend the module will run on has (`auto`
    /// resolves with it).
    pub fn validate(&self, cell: CellKind, fused: FusedKernels) -> Result<(), RecurrentError> {
        let fused_available = fused.available();
        let bad = |key, value: String, expected: &str| {
            Err(RecurrentError::Config {
                key,
                value,
                expected: expected.into(),
            })
        };
        if self.input_size == 0 {
            return bad("input_size", "0".into(), "must be at least 1");
        }
        if self.hidden_size == 0 {
            return bad("hidden_size", "0".into(), "must be at least 1");
        }
        if self.num_layers == 0 {
            return bad("num_layers", "0".into(), "must be at least 1");
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return bad(
                "dropout",
                self.dropout.to_string(),
                "must be in [0, 1) (the probability of zeroing an element)",
            );
        }
        if self.dropout > 0.0 && self.num_layers == 1 {
            return bad(
                "dropout",
                self.dropout.to_string(),
                "dropout acts between layers only, so it needs num_layers >= 2 (num_layers = 1)",
            );
        }
        let resolved = self.backend.resolve_for(fused_available);
        if resolved == RecurrentBackend::Fused && !fused_available {
            return Err(RecurrentError::Unsupported(format!(
                "{} with backend = \"fused\": the fused kernels run on the CPU backends \
                 (Cpu, CpuAutodiff) and, in a build with the `cuda` or `wgpu` feature, on \
                 burn's CUDA and wgpu backends; use backend = \"scan\" or \"auto\"",
                cell.module_name(),
            )));
        }
        if self.recompute == Recompute::Full && resolved != RecurrentBackend::Fused {
            return Err(RecurrentError::Unsupported(format!(
                "{} with backend = \"{}\" and recompute = \"full\": the pad and scan backends \
                 differentiate through burn's autodiff tape, which saves activations; \
                 use recompute = \"none\" or backend = \"fused\"",
                cell.module_name(),
                self.backend.name(),
            )));
        }
        let precision = self.matmul_precision.resolve();
        if precision != MatmulPrecision::Ieee
            && !(resolved == RecurrentBackend::Fused && fused == FusedKernels::Cube)
        {
            return Err(RecurrentError::Unsupported(format!(
                "{} with matmul_precision = \"{}\" and backend = \"{}\": reduced-precision \
                 products exist in the CubeCL fused kernels only (backend \"fused\" or \"auto\" \
                 on burn's CUDA or wgpu backend); the CPU backends compute in f32, use \
                 matmul_precision = \"ieee\" or \"auto\"",
                cell.module_name(),
                precision.name(),
                self.backend.name(),
            )));
        }
        Ok(())
    }
}

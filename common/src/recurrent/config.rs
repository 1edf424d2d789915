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
    /// Hand-written forward and backward kernels (CPU backends only): the `scan` time loop
    /// with one GEMM and one fused pass per step, and its own backward pass (saved gates, or
    /// recomputed with `recompute = "full"`).
    Fused,
    /// The best backend available: `fused` on the CPU backends, `scan` elsewhere.
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
    /// `fused::available`); concrete backends resolve to themselves.
    pub fn resolve_for(self, fused_available: bool) -> RecurrentBackend {
        match self {
            RecurrentBackend::Auto if fused_available => RecurrentBackend::Fused,
            RecurrentBackend::Auto => RecurrentBackend::Scan,
            concrete => concrete,
        }
    }

    /// The name used in configs and benchmark rows.
    pub fn name(self) -> &'static str {
        match self {
            RecurrentBackend::Pad => "pad",
            RecurrentBackend::Scan => "scan",
            RecurrentBackend::Fused => "fused",
            RecurrentBackend::Auto => "auto",
        }
    }
}

impl std::str::FromStr for RecurrentBackend {
    type Err = RecurrentError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pad" => Ok(RecurrentBackend::Pad),
            "scan" => Ok(RecurrentBackend::Scan),
            "fused" => Ok(RecurrentBackend::Fused),
            "auto" => Ok(RecurrentBackend::Auto),
            other => Err(RecurrentError::Config {
                key: "backend",
                value: format!("{other:?}"),
                expected: "one of \"pad\", \"scan\", \"fused\", \"auto\"".into(),
            }),
        }
    }
}

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

impl Recompute {
    /// The name used in configs and benchmark rows.
    pub fn name(self) -> &'static str {
        match self {
            Recompute::None => "none",
            Recompute::Full => "full",
        }
    }
}

impl std::str::FromStr for Recompute {
    type Err = RecurrentError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Recompute::None),
            "full" => Ok(Recompute::Full),
            other => Err(RecurrentError::Config {
                key: "recompute",
                value: format!("{other:?}"),
                expected: "one of \"none\", \"full\"".into(),
            }),
        }
    }
}

/// Configuration of a recurrent module, with PyTorch's `nn.LSTM`/`nn.GRU` options and
/// TorchRL's recurrent-module options.
///
/// ```
/// use common::backend::{cpu_device, Cpu};
/// use common::recurrent::{RecurrentBackend, RecurrentConfig};
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
    /// The mode used when no [`set_recurrent_mode`](super::set_recurrent_mode) guard is alive.
    #[config(default = "RecurrentMode::Sequential")]
    pub default_recurrent_mode: RecurrentMode,
}

impl RecurrentConfig {
    /// Checks every value and combination; the error names the key and the value.
    /// `fused_available`: whether the tensor backend the module will run on supports the
    /// `fused` backend (`auto` resolves with it).
    pub fn validate(&self, cell: CellKind, fused_available: bool) -> Result<(), RecurrentError> {
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
                 (Cpu, CpuAutodiff) only; use backend = \"scan\" or \"auto\"",
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
        Ok(())
    }
}

//! Building a [`Policy`] from its [`PolicyConfig`]: every value checked (errors name the key
//! and the value), each part sized from the one before it.

use burn::module::{Initializer, Module, Param};
use burn::nn::LinearConfig;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use recur_rnn::{CellKind, RecurrentConfig, RecurrentCore, RecurrentError};

use super::image::{ImageEncoder, ImageSpec};
use super::{ActionSpec, CriticCore, Policy, PolicyConfig, OBS_NORM_ROWS};
use crate::envs::ImagePart;

impl PolicyConfig {
    /// Builds the policy; errors name the key and the value.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<Policy<B>, RecurrentError> {
        if self.obs_dim == 0 && self.images.is_empty() {
            return Err(config_error(
                "obs_dim",
                "0",
                "at least 1 (an observation with neither values nor images)",
            ));
        }
        let cnn = match (&self.cnn, self.images.is_empty()) {
            (None, false) => {
                return Err(config_error(
                    "encoder.cnn",
                    "none",
                    &format!(
                        "a convolutional encoder for the observation's images {}: set \
                         [policy.encoder] cnn = \"nature\" or \"minigrid\", or a table",
                        describe_images(&self.images)
                    ),
                ))
            }
            (Some(_), true) => {
                return Err(config_error(
                    "encoder.cnn",
                    "set",
                    "no cnn: the observation has no image (drop [policy.encoder] cnn)",
                ))
            }
            (None, true) => Vec::new(),
            (Some(config), false) => {
                let mut offset = 0;
                let mut cnn = Vec::new();
                for part in &self.images {
                    let spec = ImageSpec {
                        part: part.clone(),
                        offset,
                        config: config.clone(),
                    };
                    offset += part.bytes();
                    cnn.push(
                        ImageEncoder::new(spec, device)
                            .map_err(|e| config_error("encoder.cnn", &format!("{config:?}"), &e))?,
                    );
                }
                cnn
            }
        };
        if let Some(w) = self.encoder.iter().find(|&&w| w == 0) {
            return Err(config_error(
                "encoder",
                &format!("{:?}", self.encoder),
                &format!("every width must be at least 1, got {w}"),
            ));
        }
        match &self.action {
            ActionSpec::Discrete { n } if *n < 2 => {
                return Err(config_error(
                    "action.n",
                    &n.to_string(),
                    "a discrete action space needs at least 2 actions",
                ))
            }
            ActionSpec::MultiDiscrete { nvec } if nvec.is_empty() || nvec.contains(&0) => {
                return Err(config_error(
                    "action.nvec",
                    &format!("{nvec:?}"),
                    "at least one component, each with at least 1 choice",
                ))
            }
            ActionSpec::Continuous { low, high } => {
                if low.is_empty() || low.len() != high.len() {
                    return Err(config_error(
                        "action.low/high",
                        &format!("{low:?} / {high:?}"),
                        "non-empty and of equal length",
                    ));
                }
                if let Some(i) = (0..low.len())
                    .find(|&i| !(low[i].is_finite() && high[i].is_finite() && low[i] < high[i]))
                {
                    return Err(config_error(
                        "action.low/high",
                        &format!("[{i}]: {} / {}", low[i], high[i]),
                        "finite bounds with low < high",
                    ));
                }
            }
            _ => {}
        }
        let mut encoder = Vec::new();
        let mut width = self.obs_dim;
        if self.obs_dim > 0 {
            for &w in &self.encoder {
                encoder.push(LinearConfig::new(width, w).init(device));
                width = w;
            }
        }
        width += cnn.iter().map(ImageEncoder::features).sum::<usize>();
        let core_config = RecurrentConfig::new(width, self.hidden_size)
            .with_num_layers(self.num_layers)
            .with_backend(self.backend);
        let core = RecurrentCore::new(&core_config, self.cell, device)?;
        let critic_core = match self.critic_core {
            CriticCore::Shared => None,
            CriticCore::Separate => Some(RecurrentCore::new(&core_config, self.cell, device)?),
        };
        // Small initial policy outputs: near-uniform actions at the start (as CleanRL's
        // 0.01-scaled policy head).
        let policy_head = LinearConfig::new(self.hidden_size, self.action.head_size())
            .with_initializer(Initializer::XavierUniform { gain: 0.01 })
            .init(device);
        let value_head = LinearConfig::new(self.hidden_size, 1)
            .with_initializer(Initializer::XavierUniform { gain: 1.0 })
            .init(device);
        let w = super::obs_norm_width(self.obs_dim);
        let identity = [0.0, 1.0, 0.0, f32::MAX].iter().flat_map(|&v| vec![v; w]);
        let obs_norm = Param::from_tensor(Tensor::from_data(
            TensorData::new(identity.collect::<Vec<f32>>(), [OBS_NORM_ROWS, w]),
            device,
        ));
        let policy = Policy {
            obs_norm,
            encoder,
            cnn,
            core,
            critic_core,
            policy_head,
            value_head,
            config: self.clone(),
        };
        self.shift_forget_gates(policy, device)
    }
}

impl PolicyConfig {
    /// `policy` with [`PolicyConfig::forget_bias`] added to every layer's forget-gate bias
    /// (`bias_ih[H..2H]`) of both cores; unchanged when it is 0. The parameters are drawn
    /// first, in module order as [`PolicyConfig::init_seeded`] draws them, so that a seed
    /// gives the same weights with and without the shift.
    fn shift_forget_gates<B: Backend>(
        &self,
        policy: Policy<B>,
        device: &B::Device,
    ) -> Result<Policy<B>, RecurrentError> {
        let f = self.forget_bias;
        if f == 0.0 {
            return Ok(policy);
        }
        if !f.is_finite() || self.cell != CellKind::Lstm {
            return Err(config_error(
                "forget_bias",
                &f.to_string(),
                &format!(
                    "a finite value, and an LSTM (cell = {:?} has no forget gate): 0 or unset \
                     otherwise",
                    self.cell
                ),
            ));
        }
        let mut policy = policy.map(&mut super::Materialize);
        let h = self.hidden_size;
        let shift: Vec<f32> = (0..4 * h)
            .map(|i| if (h..2 * h).contains(&i) { f } else { 0.0 })
            .collect();
        let cores = std::iter::once(&mut policy.core).chain(policy.critic_core.as_mut());
        for layer in cores.flat_map(|c| c.layers.iter_mut()) {
            if let Some(b) = layer.bias_ih.take() {
                let shift =
                    Tensor::<B, 1>::from_data(TensorData::new(shift.clone(), [4 * h]), device);
                layer.bias_ih = Some(b.map(|t| t + shift));
            }
        }
        Ok(policy)
    }
}

/// `image [7, 7, 3], ...` for errors.
pub(super) fn describe_images(images: &[ImagePart]) -> String {
    let parts: Vec<String> = images
        .iter()
        .map(|p| match p.key.as_str() {
            "" => format!("{:?}", p.shape),
            key => format!("{key} {:?}", p.shape),
        })
        .collect();
    parts.join(", ")
}

pub(super) fn config_error(key: &'static str, value: &str, expected: &str) -> RecurrentError {
    RecurrentError::Config {
        key,
        value: value.to_string(),
        expected: expected.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{cpu_device, to_vec, Cpu};

    /// `forget_bias` adds exactly its value to the forget gate's block of `bias_ih` in every
    /// layer of both cores and leaves every other parameter as PyTorch's initialization drew it;
    /// a cell without a forget gate is refused with the key named.
    #[test]
    fn the_forget_bias_shifts_the_forget_gate_alone() {
        let device = cpu_device();
        let (h, layers) = (8, 2);
        let base = PolicyConfig::new(3, ActionSpec::Discrete { n: 2 })
            .with_hidden_size(h)
            .with_num_layers(layers)
            .with_critic_core(CriticCore::Separate);
        let plain = base.init_seeded::<Cpu>(7, &device).unwrap();
        let shifted = base
            .clone()
            .with_forget_bias(1.0)
            .init_seeded::<Cpu>(7, &device)
            .unwrap();
        let cores = |p: &Policy<Cpu>| {
            let critic = p.critic_core.clone().expect("a separate critic core");
            [p.core.clone(), critic]
        };
        for (a, b) in cores(&plain).iter().zip(&cores(&shifted)) {
            for (la, lb) in a.layers.iter().zip(&b.layers) {
                let (ba, bb) = (
                    to_vec(la.bias_ih.as_ref().unwrap().val()),
                    to_vec(lb.bias_ih.as_ref().unwrap().val()),
                );
                for (i, (x, y)) in ba.iter().zip(&bb).enumerate() {
                    let want = if (h..2 * h).contains(&i) { x + 1.0 } else { *x };
                    assert_eq!(*y, want, "bias_ih[{i}]");
                }
                assert_eq!(to_vec(la.weight_ih.val()), to_vec(lb.weight_ih.val()));
                let hh =
                    |l: &recur_rnn::RecurrentLayer<Cpu>| to_vec(l.bias_hh.as_ref().unwrap().val());
                assert_eq!(hh(la), hh(lb));
            }
        }
        let err = base
            .with_cell(CellKind::Gru)
            .with_forget_bias(1.0)
            .init::<Cpu>(&device)
            .expect_err("a GRU has no forget gate")
            .to_string();
        assert!(err.contains("forget_bias") && err.contains("Gru"), "{err}");
    }
}

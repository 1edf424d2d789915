//! Building a [`Policy`] from its [`PolicyConfig`]: every value checked (errors name the key
//! and the value), each part sized from the one before it.

use burn::module::{Initializer, Param};
use burn::nn::LinearConfig;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use recur_rnn::{RecurrentConfig, RecurrentCore, RecurrentError};

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
        let d = self.obs_dim;
        let identity = [0.0, 1.0, 0.0, f32::MAX].iter().flat_map(|&v| vec![v; d]);
        let obs_norm = Param::from_tensor(Tensor::from_data(
            TensorData::new(identity.collect::<Vec<f32>>(), [OBS_NORM_ROWS, d]),
            device,
        ));
        Ok(Policy {
            obs_norm,
            encoder,
            cnn,
            core,
            critic_core,
            policy_head,
            value_head,
            config: self.clone(),
        })
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

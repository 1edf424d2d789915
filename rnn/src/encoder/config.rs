//! The encoder's configuration (`[policy.encoder]`'s layers, scale and width), its presets, and
//! the [`Plan`]: the configuration checked against one input shape, with every layer's output
//! shape worked out.

use serde::{Deserialize, Serialize};

use super::EncoderError;

/// A convolutional encoder: `layers` (convolutions with ReLU, max-pools) over the scaled image,
/// flattened, then a linear layer of `features` units with ReLU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EncoderConfig {
    /// The layers in order; the first is a convolution.
    pub layers: Vec<EncoderLayer>,
    /// The factor of every input byte: 1/255 for pixels, 1 for integer codes (MiniGrid's).
    pub scale: f32,
    /// Width of the linear layer after the flatten: the encoder's output `[N, features]`.
    pub features: usize,
    /// Integer codes one-hot (MiniGrid's object, colour and state): channel `k` of the image
    /// holds codes `0..onehot[k]`, each becoming `onehot[k]` planes of 0 or 1 (a code past the
    /// range sets none), so the first convolution sees `sum(onehot)` channels, channel `k`'s
    /// planes after those of the channels before it. `None`: the bytes times `scale`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub onehot: Option<Vec<usize>>,
}

/// One layer of [`EncoderConfig::layers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum EncoderLayer {
    /// `torch.nn.Conv2d(in, out_channels, kernel, stride, padding)` (square kernel, zero
    /// padding on every side) followed by ReLU.
    Conv {
        out_channels: usize,
        kernel: usize,
        #[serde(default = "one")]
        stride: usize,
        #[serde(default)]
        padding: usize,
    },
    /// `torch.nn.MaxPool2d(kernel)`: stride = kernel, no padding, the output size rounded down.
    Maxpool { kernel: usize },
}

fn one() -> usize {
    1
}

impl EncoderLayer {
    /// A convolution (with ReLU).
    pub fn conv(out_channels: usize, kernel: usize, stride: usize, padding: usize) -> Self {
        EncoderLayer::Conv {
            out_channels,
            kernel,
            stride,
            padding,
        }
    }
}

/// The presets' names, for errors and docs.
pub const PRESETS: [&str; 2] = ["nature", "minigrid"];

impl EncoderConfig {
    /// DQN's Nature CNN for 84x84 frames: conv 32-8/4, 64-4/2, 64-3/1, then 512 features;
    /// `scale` 1/255.
    pub fn nature() -> Self {
        EncoderConfig {
            layers: vec![
                EncoderLayer::conv(32, 8, 4, 0),
                EncoderLayer::conv(64, 4, 2, 0),
                EncoderLayer::conv(64, 3, 1, 0),
            ],
            scale: 1.0 / 255.0,
            features: 512,
            onehot: None,
        }
    }

    /// MiniGrid's small extractor for its 7x7x3 codes: conv 16-2x2, max-pool 2, conv 32-2x2,
    /// conv 64-2x2, then 128 features (the `features_dim` of MiniGrid's SB3 example); `scale` 1.
    pub fn minigrid() -> Self {
        EncoderConfig {
            layers: vec![
                EncoderLayer::conv(16, 2, 1, 0),
                EncoderLayer::Maxpool { kernel: 2 },
                EncoderLayer::conv(32, 2, 1, 0),
                EncoderLayer::conv(64, 2, 1, 0),
            ],
            scale: 1.0,
            features: 128,
            onehot: None,
        }
    }

    /// A preset by name (one of [`PRESETS`]).
    pub fn preset(name: &str) -> Result<Self, EncoderError> {
        match name {
            "nature" => Ok(Self::nature()),
            "minigrid" => Ok(Self::minigrid()),
            other => Err(EncoderError::config(
                "preset",
                format!("{other:?}"),
                format!("one of {PRESETS:?}"),
            )),
        }
    }

    /// Checks the config against frames of `input` and works out every layer's output shape.
    /// An error names the field (`layers[i].kernel`, ...), its value and what was expected.
    pub fn plan(&self, input: ImageShape) -> Result<Plan, EncoderError> {
        for (field, v) in [
            ("input height", input.height),
            ("input width", input.width),
            ("input channels", input.channels),
        ] {
            if v == 0 {
                return Err(EncoderError::config(field, "0", "at least 1"));
            }
        }
        if !(self.scale.is_finite() && self.scale > 0.0) {
            return Err(EncoderError::config(
                "scale",
                self.scale,
                "a finite number above 0 (1/255 for pixels, 1 for codes)",
            ));
        }
        if self.features == 0 {
            return Err(EncoderError::config("features", 0, "at least 1"));
        }
        let planes = match &self.onehot {
            None => input.channels,
            Some(codes) => {
                if codes.len() != input.channels || codes.iter().any(|&n| !(1..=256).contains(&n)) {
                    return Err(EncoderError::config(
                        "onehot",
                        format!("{codes:?}"),
                        format!(
                            "one count of codes (1 to 256) per channel of the image's {}",
                            input.channels
                        ),
                    ));
                }
                if self.scale != 1.0 {
                    return Err(EncoderError::config(
                        "scale",
                        self.scale,
                        "1 with onehot (its planes are 0 or 1)",
                    ));
                }
                codes.iter().sum()
            }
        };
        match self.layers.first() {
            None => return Err(EncoderError::config("layers", "[]", "at least one conv")),
            Some(EncoderLayer::Maxpool { .. }) => {
                return Err(EncoderError::config(
                    "layers[0].type",
                    "\"maxpool\"",
                    "\"conv\": the first layer is a convolution",
                ))
            }
            Some(EncoderLayer::Conv { .. }) => {}
        }
        let mut shape = ImageShape::new(input.height, input.width, planes);
        let mut stages = Vec::with_capacity(self.layers.len());
        for (i, layer) in self.layers.iter().enumerate() {
            let stage = Stage::new(i, *layer, shape)?;
            shape = stage.output;
            stages.push(stage);
        }
        let flat = shape.len();
        if u32::try_from(stages.iter().map(|s| s.input.len()).max().unwrap_or(0)).is_err() {
            return Err(EncoderError::config(
                "input",
                format!("{input:?}"),
                "at most 2^32 values a layer input",
            ));
        }
        let onehot = self.onehot.as_ref().map(|codes| OneHot::new(codes));
        Ok(Plan {
            input,
            stages,
            flat,
            features: self.features,
            scale: self.scale,
            onehot,
        })
    }
}

/// An image's shape, `[H, W, C]` (the layout environments give frames in).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageShape {
    pub height: usize,
    pub width: usize,
    pub channels: usize,
}

impl ImageShape {
    pub fn new(height: usize, width: usize, channels: usize) -> Self {
        ImageShape {
            height,
            width,
            channels,
        }
    }

    /// Values in one image.
    pub fn len(&self) -> usize {
        self.height * self.width * self.channels
    }

    /// Whether the image has no values (never, for a checked [`Plan`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What one layer does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A convolution and ReLU; `index` is the layer's index in `layers` (its parameters are
    /// `convs.{index}.weight` and `convs.{index}.bias`).
    Conv {
        index: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
    },
    /// A max-pool with stride = kernel.
    Maxpool { kernel: usize },
}

/// One layer with its input and output shapes (`[H, W, C]` per frame).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stage {
    pub op: Op,
    pub input: ImageShape,
    pub output: ImageShape,
}

impl Stage {
    fn new(i: usize, layer: EncoderLayer, input: ImageShape) -> Result<Self, EncoderError> {
        let field = |name: &str| format!("layers[{i}].{name}");
        let at_least_one = |name: &str, v: usize| {
            if v == 0 {
                Err(EncoderError::config(field(name), 0, "at least 1"))
            } else {
                Ok(())
            }
        };
        let (h, w) = (input.height, input.width);
        match layer {
            EncoderLayer::Conv {
                out_channels,
                kernel,
                stride,
                padding,
            } => {
                at_least_one("out_channels", out_channels)?;
                at_least_one("kernel", kernel)?;
                at_least_one("stride", stride)?;
                if kernel > h.min(w) + 2 * padding {
                    return Err(EncoderError::config(
                        field("kernel"),
                        kernel,
                        format!(
                            "at most the layer's input {h}x{w} plus twice the padding {padding}"
                        ),
                    ));
                }
                let out = |x: usize| (x + 2 * padding - kernel) / stride + 1;
                Ok(Stage {
                    op: Op::Conv {
                        index: i,
                        kernel,
                        stride,
                        padding,
                    },
                    input,
                    output: ImageShape::new(out(h), out(w), out_channels),
                })
            }
            EncoderLayer::Maxpool { kernel } => {
                at_least_one("kernel", kernel)?;
                if kernel > h.min(w) {
                    return Err(EncoderError::config(
                        field("kernel"),
                        kernel,
                        format!("at most the layer's input {h}x{w} (an output size of 0)"),
                    ));
                }
                Ok(Stage {
                    op: Op::Maxpool { kernel },
                    input,
                    output: ImageShape::new(h / kernel, w / kernel, input.channels),
                })
            }
        }
    }

    /// Multiply-adds of this layer per frame, times two (0 for a max-pool).
    pub fn flops(&self) -> usize {
        match self.op {
            Op::Conv { kernel, .. } => {
                2 * self.output.len() * kernel * kernel * self.input.channels
            }
            Op::Maxpool { .. } => 0,
        }
    }
}

/// An [`EncoderConfig`] checked against an input shape: every layer's shapes.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub input: ImageShape,
    pub stages: Vec<Stage>,
    /// Values per frame after the flatten (the last layer's output).
    pub flat: usize,
    pub features: usize,
    pub scale: f32,
    /// [`EncoderConfig::onehot`]'s planes: the first convolution's input (`stages[0].input`)
    /// has their channels, `input` the frames' own.
    pub onehot: Option<OneHot>,
}

/// The planes of one-hot codes: plane `p` is 1 where the frame's channel `source[p]` holds
/// `code[p]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OneHot {
    /// The frames' channels.
    pub channels: usize,
    pub source: Vec<usize>,
    pub code: Vec<u8>,
}

impl OneHot {
    pub fn new(codes: &[usize]) -> Self {
        let (mut source, mut code) = (Vec::new(), Vec::new());
        for (k, &n) in codes.iter().enumerate() {
            for v in 0..n {
                source.push(k);
                code.push(v as u8);
            }
        }
        OneHot {
            channels: codes.len(),
            source,
            code,
        }
    }

    /// The planes of `pixels` whole pixels of bytes (`[pixels, channels]`) into `dst`
    /// (`[pixels, planes]`).
    pub fn expand(&self, bytes: &[u8], dst: &mut [f32]) {
        let planes = self.source.len();
        for (px, out) in bytes
            .chunks_exact(self.channels)
            .zip(dst.chunks_exact_mut(planes))
        {
            for ((o, &k), &v) in out.iter_mut().zip(&self.source).zip(&self.code) {
                *o = f32::from(u8::from(px[k] == v));
            }
        }
    }
}

impl Plan {
    /// The output shape of `N` frames: `[N, features]`.
    pub fn output_shape(&self, frames: usize) -> [usize; 2] {
        [frames, self.features]
    }

    /// The shape after the last layer, before the flatten (`[H, W, C]`).
    pub fn last_shape(&self) -> ImageShape {
        self.stages.last().map_or(self.input, |s| s.output)
    }

    /// Forward FLOPs per frame (convolutions and the linear layer).
    pub fn flops_per_frame(&self) -> usize {
        self.stages.iter().map(Stage::flops).sum::<usize>() + 2 * self.flat * self.features
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_have_their_shapes() {
        let nature = EncoderConfig::nature()
            .plan(ImageShape::new(84, 84, 1))
            .unwrap();
        let outs: Vec<_> = nature.stages.iter().map(|s| s.output).collect();
        assert_eq!(
            outs,
            [
                ImageShape::new(20, 20, 32),
                ImageShape::new(9, 9, 64),
                ImageShape::new(7, 7, 64)
            ]
        );
        assert_eq!((nature.flat, nature.output_shape(5)), (3136, [5, 512]));
        let minigrid = EncoderConfig::minigrid()
            .plan(ImageShape::new(7, 7, 3))
            .unwrap();
        let outs: Vec<_> = minigrid.stages.iter().map(|s| s.output).collect();
        assert_eq!(
            outs,
            [
                ImageShape::new(6, 6, 16),
                ImageShape::new(3, 3, 16),
                ImageShape::new(2, 2, 32),
                ImageShape::new(1, 1, 64)
            ]
        );
        assert_eq!(minigrid.flat, 64);
        assert_eq!(
            EncoderConfig::preset("minigrid").unwrap(),
            EncoderConfig::minigrid()
        );
        let err = EncoderConfig::preset("atari").unwrap_err().to_string();
        assert!(err.contains("preset") && err.contains("atari") && err.contains("nature"));
    }

    #[test]
    fn errors_name_the_field_and_value() {
        // The Nature CNN on MiniGrid's 7x7: the first kernel (8) is larger than the input.
        let err = EncoderConfig::nature()
            .plan(ImageShape::new(7, 7, 3))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("layers[0].kernel") && err.contains("= 8"),
            "{err}"
        );
        // A max-pool whose output would have size 0.
        let mut c = EncoderConfig::minigrid();
        c.layers[1] = EncoderLayer::Maxpool { kernel: 7 };
        let err = c.plan(ImageShape::new(7, 7, 3)).unwrap_err().to_string();
        assert!(
            err.contains("layers[1].kernel") && err.contains("= 7"),
            "{err}"
        );
        let mut c = EncoderConfig::minigrid();
        c.layers[2] = EncoderLayer::conv(32, 2, 0, 0);
        let err = c.plan(ImageShape::new(7, 7, 3)).unwrap_err().to_string();
        assert!(
            err.contains("layers[2].stride") && err.contains("= 0"),
            "{err}"
        );
        let c = EncoderConfig {
            scale: f32::NAN,
            onehot: None,
            ..EncoderConfig::minigrid()
        };
        assert!(c
            .plan(ImageShape::new(7, 7, 3))
            .unwrap_err()
            .to_string()
            .contains("scale"));
        // One-hot codes: one count per channel, and planes are 0 or 1 (scale 1).
        let c = EncoderConfig {
            onehot: Some(vec![11, 6]),
            ..EncoderConfig::minigrid()
        };
        let err = c.plan(ImageShape::new(7, 7, 3)).unwrap_err().to_string();
        assert!(err.contains("onehot") && err.contains("[11, 6]"), "{err}");
        let c = EncoderConfig {
            onehot: Some(vec![11, 6, 3]),
            scale: 0.5,
            ..EncoderConfig::minigrid()
        };
        let err = c.plan(ImageShape::new(7, 7, 3)).unwrap_err().to_string();
        assert!(err.contains("scale") && err.contains("onehot"), "{err}");
        let c = EncoderConfig {
            onehot: Some(vec![11, 6, 3]),
            ..EncoderConfig::minigrid()
        };
        let plan = c.plan(ImageShape::new(7, 7, 3)).unwrap();
        assert_eq!(plan.input, ImageShape::new(7, 7, 3));
        assert_eq!(plan.stages[0].input, ImageShape::new(7, 7, 20));
        let c = EncoderConfig {
            layers: vec![EncoderLayer::Maxpool { kernel: 2 }],
            ..EncoderConfig::minigrid()
        };
        assert!(c
            .plan(ImageShape::new(7, 7, 3))
            .unwrap_err()
            .to_string()
            .contains("layers[0].type"));
        let err = EncoderConfig::minigrid()
            .plan(ImageShape::new(7, 0, 3))
            .unwrap_err()
            .to_string();
        assert!(err.contains("input width"), "{err}");
        // Padding lets a kernel exceed the unpadded input.
        let c = EncoderConfig {
            layers: vec![EncoderLayer::conv(4, 3, 1, 1)],
            scale: 1.0,
            features: 2,
            onehot: None,
        };
        let plan = c.plan(ImageShape::new(2, 2, 1)).unwrap();
        assert_eq!(plan.stages[0].output, ImageShape::new(2, 2, 4));
    }

    #[test]
    fn serde_reads_layers_by_type() {
        let c: EncoderConfig = serde_json::from_str(
            r#"{"layers": [{"type": "conv", "out_channels": 16, "kernel": 2},
                           {"type": "maxpool", "kernel": 2}], "scale": 1.0, "features": 8}"#,
        )
        .unwrap();
        assert_eq!(
            c.layers,
            [
                EncoderLayer::conv(16, 2, 1, 0),
                EncoderLayer::Maxpool { kernel: 2 }
            ]
        );
        let typo = serde_json::from_str::<EncoderConfig>(
            r#"{"layers": [{"type": "conv", "out_channels": 16, "kernal": 2}], "scale": 1.0, "features": 8}"#,
        );
        assert!(typo.is_err());
        let back: EncoderConfig =
            serde_json::from_str(&serde_json::to_string(&EncoderConfig::nature()).unwrap())
                .unwrap();
        assert_eq!(back, EncoderConfig::nature());
    }
}

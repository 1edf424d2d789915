//! `policy.encoder`: the MLP over the observation's values and, for observations with images,
//! the convolutional encoder of each image.
//!
//! ```toml
//! [policy]
//! encoder = [64]          # the MLP's widths alone (no images): as before
//!
//! [policy.encoder]        # or a table
//! mlp = [64]              # the MLP over the values (default [64])
//! cnn = "minigrid"        # a preset ("nature", "minigrid"), or a table:
//!
//! [policy.encoder.cnn]
//! preset = "nature"       # optional: start from a preset, then change any field below
//! channels = [32, 64, 64] # output channels of each convolution (ReLU after each)
//! kernels = [8, 4, 3]     # square kernels
//! strides = [4, 2, 1]     # default 1 each
//! padding = [0, 0, 0]     # zero padding on every side, default 0 each
//! pool = [0, 0, 0]        # a max-pool of this kernel after each convolution (0: none)
//! scale = 0.00392156862   # the factor of each byte: 1/255 for pixels, 1 for codes
//! features = 512          # the linear layer's width after the flatten (ReLU)
//! onehot = [11, 6, 3]     # optional: integer codes one-hot, the count of codes of each of
//!                         # the image's channels (MiniGrid: object, colour, state); the
//!                         # first convolution sees sum(onehot) planes of 0 or 1
//! ```

use recur_rnn::encoder::{EncoderConfig, EncoderLayer, PRESETS};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

/// `policy.encoder`: a list of widths (the MLP alone) or a table.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum EncoderSection {
    Mlp(Vec<usize>),
    Table(EncoderTable),
}

/// `[policy.encoder]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EncoderTable {
    #[serde(default = "default_mlp")]
    pub mlp: Vec<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cnn: Option<CnnSection>,
}

/// `policy.encoder.cnn`: a preset's name or a table.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum CnnSection {
    Preset(String),
    Table(CnnTable),
}

/// `[policy.encoder.cnn]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CnnTable {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<Vec<usize>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernels: Option<Vec<usize>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strides: Option<Vec<usize>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub padding: Option<Vec<usize>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<Vec<usize>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub onehot: Option<Vec<usize>>,
}

pub fn default_mlp() -> Vec<usize> {
    vec![64]
}

impl Default for EncoderSection {
    fn default() -> Self {
        EncoderSection::Mlp(default_mlp())
    }
}

impl<'de> Deserialize<'de> for EncoderSection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match toml::Value::deserialize(d)? {
            v @ toml::Value::Array(_) => v
                .try_into()
                .map(EncoderSection::Mlp)
                .map_err(|e| D::Error::custom(format!("a list of MLP widths (integers): {e}"))),
            v @ toml::Value::Table(_) => v
                .try_into()
                .map(EncoderSection::Table)
                .map_err(|e| D::Error::custom(format!("[policy.encoder]: {e}"))),
            other => Err(D::Error::custom(format!(
                "{other} is neither a list of MLP widths ([64]) nor a table (mlp = [64], cnn = \
                 \"nature\")"
            ))),
        }
    }
}

impl<'de> Deserialize<'de> for CnnSection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match toml::Value::deserialize(d)? {
            toml::Value::String(name) => Ok(CnnSection::Preset(name)),
            v @ toml::Value::Table(_) => v
                .try_into()
                .map(CnnSection::Table)
                .map_err(|e| D::Error::custom(format!("[policy.encoder.cnn]: {e}"))),
            other => Err(D::Error::custom(format!(
                "cnn = {other}: expected a preset's name (one of {PRESETS:?}) or a table"
            ))),
        }
    }
}

/// A bad value: `(key, value, what was expected)`.
pub type Invalid = (String, String, String);

fn invalid(key: &str, value: impl std::fmt::Debug, expected: impl Into<String>) -> Invalid {
    (
        format!("policy.encoder.{key}"),
        format!("{value:?}"),
        expected.into(),
    )
}

impl EncoderSection {
    /// The MLP's widths.
    pub fn mlp(&self) -> &[usize] {
        match self {
            EncoderSection::Mlp(w) => w,
            EncoderSection::Table(t) => &t.mlp,
        }
    }

    /// The convolutional encoder, checked (each list as long as `channels`, every value in
    /// range); `None` when none is set.
    pub fn cnn(&self) -> Result<Option<EncoderConfig>, Invalid> {
        let cnn = match self {
            EncoderSection::Table(EncoderTable { cnn: Some(c), .. }) => c,
            _ => return Ok(None),
        };
        let table = match cnn {
            CnnSection::Preset(name) => CnnTable {
                preset: Some(name.clone()),
                ..CnnTable::default()
            },
            CnnSection::Table(t) => t.clone(),
        };
        table.resolve().map(Some)
    }
}

/// A config's layers as the table's lists: `(channels, kernels, strides, padding, pool)`.
type Lists = (Vec<usize>, Vec<usize>, Vec<usize>, Vec<usize>, Vec<usize>);

fn lists(c: &EncoderConfig) -> Lists {
    let mut l: Lists = Default::default();
    for layer in &c.layers {
        match *layer {
            EncoderLayer::Conv {
                out_channels,
                kernel,
                stride,
                padding,
            } => {
                l.0.push(out_channels);
                l.1.push(kernel);
                l.2.push(stride);
                l.3.push(padding);
                l.4.push(0);
            }
            EncoderLayer::Maxpool { kernel } => {
                if let Some(last) = l.4.last_mut() {
                    *last = kernel;
                }
            }
        }
    }
    l
}

impl CnnTable {
    fn resolve(&self) -> Result<EncoderConfig, Invalid> {
        let base = match &self.preset {
            None => None,
            Some(name) => Some(
                EncoderConfig::preset(name)
                    .map_err(|_| invalid("cnn.preset", name, format!("one of {PRESETS:?}")))?,
            ),
        };
        let (b_ch, b_k, b_s, b_p, b_pool) = base.as_ref().map(lists).unwrap_or_default();
        let channels = match (&self.channels, base.is_some()) {
            (Some(c), _) => c.clone(),
            (None, true) => b_ch,
            (None, false) => {
                return Err(invalid(
                    "cnn.channels",
                    "none",
                    "each convolution's output channels (or a `preset`)",
                ))
            }
        };
        let n = channels.len();
        if n == 0 || channels.contains(&0) {
            return Err(invalid(
                "cnn.channels",
                &channels,
                "at least one, each >= 1",
            ));
        }
        // A list of the convolutions' length: given, the preset's (when as long), or `fill`.
        let list =
            |key: &str, given: &Option<Vec<usize>>, preset: Vec<usize>, fill: Option<usize>| {
                let v = match given {
                    Some(v) => v.clone(),
                    None if preset.len() == n => preset,
                    None => match fill {
                        Some(f) => vec![f; n],
                        None => {
                            return Err(invalid(
                                &format!("cnn.{key}"),
                                "none",
                                format!("{n} values, one per convolution"),
                            ))
                        }
                    },
                };
                if v.len() != n {
                    return Err(invalid(
                        &format!("cnn.{key}"),
                        &v,
                        format!("{n} values, one per entry of `channels` {channels:?}"),
                    ));
                }
                Ok(v)
            };
        let kernels = list("kernels", &self.kernels, b_k, None)?;
        let strides = list("strides", &self.strides, b_s, Some(1))?;
        let padding = list("padding", &self.padding, b_p, Some(0))?;
        let pool = list("pool", &self.pool, b_pool, Some(0))?;
        for (key, v) in [("kernels", &kernels), ("strides", &strides)] {
            if v.contains(&0) {
                return Err(invalid(&format!("cnn.{key}"), v, "each >= 1"));
            }
        }
        if pool.contains(&1) {
            return Err(invalid("cnn.pool", &pool, "0 (none) or a kernel >= 2"));
        }
        let scale = match (self.scale, &base) {
            (Some(s), _) => s,
            (None, Some(b)) => b.scale,
            (None, None) => {
                return Err(invalid(
                    "cnn.scale",
                    "none",
                    "the factor of each byte: 1/255 for pixels, 1 for integer codes",
                ))
            }
        };
        if !(scale.is_finite() && scale > 0.0) {
            return Err(invalid("cnn.scale", scale, "a finite number above 0"));
        }
        let features = match (self.features, &base) {
            (Some(f), _) => f,
            (None, Some(b)) => b.features,
            (None, None) => {
                return Err(invalid(
                    "cnn.features",
                    "none",
                    "the width after the flatten (512 in `nature`)",
                ))
            }
        };
        if features == 0 {
            return Err(invalid("cnn.features", 0, "at least 1"));
        }
        let onehot = self.onehot.clone();
        if let Some(codes) = &onehot {
            if codes.is_empty() || codes.iter().any(|&c| !(1..=256).contains(&c)) {
                return Err(invalid(
                    "cnn.onehot",
                    codes,
                    "the number of codes (1 to 256) of each of the image's channels",
                ));
            }
            if scale != 1.0 {
                return Err(invalid(
                    "cnn.scale",
                    scale,
                    "1 with onehot (its planes are 0 or 1)",
                ));
            }
        }
        let mut layers = Vec::new();
        for i in 0..n {
            layers.push(EncoderLayer::conv(
                channels[i],
                kernels[i],
                strides[i],
                padding[i],
            ));
            if pool[i] > 0 {
                layers.push(EncoderLayer::Maxpool { kernel: pool[i] });
            }
        }
        Ok(EncoderConfig {
            layers,
            scale,
            features,
            onehot,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<EncoderSection, String> {
        #[derive(Deserialize)]
        struct P {
            encoder: EncoderSection,
        }
        toml::from_str::<P>(text)
            .map(|p| p.encoder)
            .map_err(|e| e.to_string())
    }

    /// A list is the MLP; presets by name or as a table's base; every table field is used.
    #[test]
    fn forms_resolve_to_the_presets_and_layers() {
        let list = parse("encoder = [32, 16]").unwrap();
        assert_eq!((list.mlp(), list.cnn().unwrap()), (&[32, 16][..], None));
        let by_name = parse("encoder = { cnn = \"minigrid\" }").unwrap();
        assert_eq!(by_name.mlp(), &[64]);
        assert_eq!(by_name.cnn().unwrap(), Some(EncoderConfig::minigrid()));
        let table = parse(
            "[encoder]\nmlp = []\n[encoder.cnn]\nchannels = [16, 32, 64]\nkernels = [2, 2, 2]\n\
             pool = [2, 0, 0]\nscale = 1.0\nfeatures = 128\n",
        )
        .unwrap();
        assert_eq!(table.mlp(), &[] as &[usize]);
        assert_eq!(table.cnn().unwrap(), Some(EncoderConfig::minigrid()));
        let changed = parse("[encoder.cnn]\npreset = \"nature\"\nfeatures = 256\n").unwrap();
        let want = EncoderConfig {
            features: 256,
            onehot: None,
            ..EncoderConfig::nature()
        };
        assert_eq!(changed.cnn().unwrap(), Some(want));
        let codes = parse("[encoder.cnn]\npreset = \"minigrid\"\nonehot = [11, 6, 3]\n").unwrap();
        let want = EncoderConfig {
            onehot: Some(vec![11, 6, 3]),
            ..EncoderConfig::minigrid()
        };
        assert_eq!(codes.cnn().unwrap(), Some(want));
        // Written out and read back, the same section.
        for s in [list, by_name, table, changed, codes] {
            #[derive(Serialize)]
            struct P<'a> {
                encoder: &'a EncoderSection,
            }
            let text = toml::to_string(&P { encoder: &s }).unwrap();
            assert_eq!(parse(&text).unwrap(), s, "{text}");
        }
    }

    /// Each bad value is refused naming its key and value.
    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            ("cnn = \"atari\"", "policy.encoder.cnn.preset"),
            ("cnn = { channels = [8] }", "policy.encoder.cnn.kernels"),
            (
                "cnn = { channels = [8, 8], kernels = [3], scale = 1.0, features = 4 }",
                "policy.encoder.cnn.kernels",
            ),
            (
                "cnn = { channels = [8], kernels = [3], features = 4 }",
                "policy.encoder.cnn.scale",
            ),
            (
                "cnn = { preset = \"nature\", scale = -1.0 }",
                "policy.encoder.cnn.scale",
            ),
            (
                "cnn = { preset = \"nature\", pool = [1, 0, 0] }",
                "policy.encoder.cnn.pool",
            ),
            (
                "cnn = { preset = \"nature\", features = 0 }",
                "policy.encoder.cnn.features",
            ),
            ("cnn = { channels = [] }", "policy.encoder.cnn.channels"),
            (
                "cnn = { preset = \"minigrid\", onehot = [11, 0, 3] }",
                "policy.encoder.cnn.onehot",
            ),
            (
                "cnn = { preset = \"nature\", onehot = [256] }",
                "policy.encoder.cnn.scale",
            ),
        ];
        for (text, key) in cases {
            let s = parse(&format!("encoder = {{ {text} }}")).unwrap();
            let (k, v, _) = s.cnn().unwrap_err();
            assert_eq!(k, key, "{text}: {v}");
        }
        for (text, needle) in [
            (
                "encoder = { cnn = \"nature\", width = 3 }",
                "unknown field `width`",
            ),
            (
                "encoder = { cnn = { kernel = [3] } }",
                "unknown field `kernel`",
            ),
            ("encoder = 64", "neither a list"),
            ("encoder = { cnn = 3 }", "preset's name"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}

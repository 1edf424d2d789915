//! Observation and action spaces, after gymnasium's `Box`, `Discrete`, `MultiDiscrete` and
//! `Dict`.
//!
//! An observation travels in two lanes, each in its own element type: the **values** (`f32`:
//! every [`Space::Box`], a [`Space::Discrete`] index, a [`Space::MultiDiscrete`]'s indices) and
//! the **pixels** (`u8`: every [`Space::Image`], one byte a pixel). A [`Space::Dict`] puts each
//! part in its lane, parts in key order; [`Space::dim`] and [`Space::pixels`] are the lanes'
//! lengths. Chunks, rings, TCP frames and datasets store the lanes as the columns
//! `observation` and `pixels` (docs/images.md).

/// The set of valid observations or actions of an environment.
///
/// A 1-D box of `f32`, a discrete range, and (actions only) several discrete ranges.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Space {
    /// `dim` real values, value `i` in `[low[i], high[i]]` (`low.len() == high.len() == dim`).
    Box {
        /// Lower bounds, one per component.
        low: Vec<f32>,
        /// Upper bounds, one per component.
        high: Vec<f32>,
    },
    /// One integer in `0..n`.
    Discrete {
        /// Number of choices.
        n: usize,
    },
    /// `nvec.len()` integers, integer `j` in `0..nvec[j]` (gymnasium's `MultiDiscrete`; the
    /// policy's head is a factorized categorical, one per component).
    MultiDiscrete {
        /// Choices per component.
        nvec: Vec<usize>,
    },
    /// An image of `u8` pixels, `[H, W, C]` row-major (gymnasium's
    /// `Box(0, 255, (H, W, C), uint8)`; a grayscale image has `C = 1`). Observations only.
    Image {
        /// `[H, W, C]`.
        shape: [usize; 3],
    },
    /// Named parts (gymnasium's `Dict`), in key order; observations only, and no part is itself
    /// a `Dict`.
    Dict {
        /// `(key, space)` pairs, sorted by key.
        parts: Vec<(String, Space)>,
    },
}

/// One image of an observation's pixels lane: its key in a [`Space::Dict`] (`""` for a bare
/// [`Space::Image`]) and its shape `[H, W, C]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ImagePart {
    pub key: String,
    pub shape: [usize; 3],
}

impl ImagePart {
    /// Its bytes, `H * W * C`.
    pub fn bytes(&self) -> usize {
        self.shape.iter().product()
    }
}

/// One action handed to [`super::Env::step`], borrowed from the caller's buffer.
#[derive(Clone, Copy, Debug)]
pub enum ActionRef<'a> {
    /// An index into a [`Space::Discrete`] (`0..n`; `i64` as the policy's samples are).
    Discrete(i64),
    /// A point of a [`Space::Box`]: `dim` values.
    Continuous(&'a [f32]),
    /// One index per component of a [`Space::MultiDiscrete`].
    MultiDiscrete(&'a [i64]),
}

impl Space {
    /// `Box(-high, high)`.
    pub fn symmetric(high: &[f32]) -> Space {
        Space::Box {
            low: high.iter().map(|h| -h).collect(),
            high: high.to_vec(),
        }
    }

    /// `Box([0; n], [1; n])`: `n` values in `[0, 1]`, e.g. a one-hot encoding.
    pub fn unit_box(n: usize) -> Space {
        Space::Box {
            low: vec![0.0; n],
            high: vec![1.0; n],
        }
    }

    /// Number of `f32` values one element occupies in the values lane: the box's length, 1 for
    /// a discrete space (one index), 0 for an image, the sum over a dict's parts.
    pub fn dim(&self) -> usize {
        match self {
            Space::Box { low, .. } => low.len(),
            Space::Discrete { .. } => 1,
            Space::MultiDiscrete { nvec } => nvec.len(),
            Space::Image { .. } => 0,
            Space::Dict { parts } => parts.iter().map(|(_, s)| s.dim()).sum(),
        }
    }

    /// Whether actions can lie in this space (a [`Space::Image`] or [`Space::Dict`] cannot).
    pub fn is_action_space(&self) -> bool {
        matches!(
            self,
            Space::Box { .. } | Space::Discrete { .. } | Space::MultiDiscrete { .. }
        )
    }

    /// Number of bytes one element occupies in the pixels lane: `H * W * C` for an image, the
    /// sum over a dict's parts, 0 for every other space.
    pub fn pixels(&self) -> usize {
        match self {
            Space::Image { shape } => shape.iter().product(),
            Space::Dict { parts } => parts.iter().map(|(_, s)| s.pixels()).sum(),
            _ => 0,
        }
    }

    /// The images of the pixels lane in order, with their keys (`""` for a bare image).
    pub fn images(&self) -> Vec<ImagePart> {
        let part = |key: &str, shape: &[usize; 3]| ImagePart {
            key: key.to_owned(),
            shape: *shape,
        };
        match self {
            Space::Image { shape } => vec![part("", shape)],
            Space::Dict { parts } => parts
                .iter()
                .filter_map(|(k, s)| match s {
                    Space::Image { shape } => Some(part(k, shape)),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Whether this space is valid as an observation space: no dict inside a dict, no empty
    /// image or dict, dict keys unique and sorted. The error names the part.
    pub fn check_observation(&self) -> Result<(), String> {
        match self {
            Space::Image { shape } if shape.contains(&0) => {
                Err(format!("image of shape {shape:?} has no pixels"))
            }
            Space::Dict { parts } if parts.is_empty() => Err("a Dict with no keys".into()),
            Space::Dict { parts } => {
                for w in parts.windows(2) {
                    if w[0].0 >= w[1].0 {
                        return Err(format!(
                            "Dict keys must be unique and sorted: {:?} before {:?}",
                            w[0].0, w[1].0
                        ));
                    }
                }
                for (k, s) in parts {
                    if matches!(s, Space::Dict { .. }) {
                        return Err(format!("key {k:?}: a Dict inside a Dict is not supported"));
                    }
                    s.check_observation()
                        .map_err(|e| format!("key {k:?}: {e}"))?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Whether `x` (the values lane) is an element of this space: for a box, `dim` values each
    /// within its bounds (NaN never is); for a discrete space, one value that is an integer in
    /// `0..n`; for an image, no values; for a dict, each part's slice in turn. Pixels are
    /// always valid.
    pub fn contains_obs(&self, x: &[f32]) -> bool {
        match self {
            Space::Image { .. } => x.is_empty(),
            Space::Dict { parts } => {
                if x.len() != self.dim() {
                    return false;
                }
                let mut at = 0;
                parts.iter().all(|(_, s)| {
                    let d = s.dim();
                    at += d;
                    s.contains_obs(&x[at - d..at])
                })
            }
            Space::Box { low, high } => {
                x.len() == low.len()
                    && x.iter()
                        .zip(low.iter().zip(high))
                        .all(|(v, (lo, hi))| *lo <= *v && *v <= *hi)
            }
            Space::Discrete { n } => {
                x.len() == 1 && x[0].fract() == 0.0 && x[0] >= 0.0 && (x[0] as f64) < *n as f64
            }
            Space::MultiDiscrete { nvec } => {
                x.len() == nvec.len()
                    && x.iter()
                        .zip(nvec)
                        .all(|(v, n)| v.fract() == 0.0 && *v >= 0.0 && (*v as f64) < *n as f64)
            }
        }
    }

    /// Whether `a` is a valid action of this space: a discrete index in `0..n`, or a continuous
    /// vector of length `dim` with every component within its bounds. A mismatch of kinds (a
    /// discrete action for a box, or the reverse) is not contained.
    pub fn contains_action(&self, a: ActionRef<'_>) -> bool {
        match (self, a) {
            (Space::Discrete { n }, ActionRef::Discrete(i)) => {
                i >= 0 && usize::try_from(i).is_ok_and(|i| i < *n)
            }
            (Space::Box { .. }, ActionRef::Continuous(x)) => self.contains_obs(x),
            (Space::MultiDiscrete { nvec }, ActionRef::MultiDiscrete(a)) => {
                a.len() == nvec.len()
                    && a.iter()
                        .zip(nvec)
                        .all(|(&i, n)| i >= 0 && usize::try_from(i).is_ok_and(|i| i < *n))
            }
            _ => false,
        }
    }

    /// A one-line description for logs and error messages, e.g. `Discrete(2)` or
    /// `Box(low=[-2], high=[2], shape=(1,))`.
    pub fn describe(&self) -> String {
        match self {
            Space::Discrete { n } => format!("Discrete({n})"),
            Space::MultiDiscrete { nvec } => format!("MultiDiscrete({nvec:?})"),
            Space::Image { shape } => {
                format!(
                    "Box(0, 255, ({}, {}, {}), uint8)",
                    shape[0], shape[1], shape[2]
                )
            }
            Space::Dict { parts } => {
                let parts: Vec<String> = parts
                    .iter()
                    .map(|(k, s)| format!("{k:?}: {}", s.describe()))
                    .collect();
                format!("Dict({{{}}})", parts.join(", "))
            }
            Space::Box { low, high } => format!(
                "Box(low={}, high={}, shape=({},))",
                bounds(low),
                bounds(high),
                low.len()
            ),
        }
    }
}

/// `[a, b, ...]`, huge bounds (like `f32::MAX`) in exponent notation.
fn bounds(values: &[f32]) -> String {
    let values: Vec<String> = values
        .iter()
        .map(|v| {
            if v.abs() >= 1e6 {
                format!("{v:e}")
            } else {
                format!("{v}")
            }
        })
        .collect();
    format!("[{}]", values.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit_box() -> Space {
        Space::Box {
            low: vec![-1.0, 0.0],
            high: vec![1.0, f32::MAX],
        }
    }

    #[test]
    fn dims() {
        assert_eq!(unit_box().dim(), 2);
        assert_eq!(Space::Discrete { n: 7 }.dim(), 1);
    }

    #[test]
    fn box_membership() {
        let s = unit_box();
        assert!(s.contains_obs(&[0.5, 3.0]));
        assert!(s.contains_obs(&[-1.0, 0.0]));
        assert!(!s.contains_obs(&[1.5, 3.0]));
        assert!(!s.contains_obs(&[0.0, -1.0]));
        assert!(!s.contains_obs(&[f32::NAN, 0.0]));
        assert!(!s.contains_obs(&[0.0]));
        assert!(s.contains_action(ActionRef::Continuous(&[0.0, 1.0])));
        assert!(!s.contains_action(ActionRef::Discrete(0)));
    }

    #[test]
    fn discrete_membership() {
        let s = Space::Discrete { n: 2 };
        assert!(s.contains_action(ActionRef::Discrete(0)));
        assert!(s.contains_action(ActionRef::Discrete(1)));
        assert!(!s.contains_action(ActionRef::Discrete(2)));
        assert!(!s.contains_action(ActionRef::Discrete(-1)));
        assert!(!s.contains_action(ActionRef::Continuous(&[0.0])));
        assert!(s.contains_obs(&[1.0]));
        assert!(!s.contains_obs(&[0.5]));
        assert!(!s.contains_obs(&[2.0]));
    }

    #[test]
    fn multi_discrete_membership() {
        let s = Space::MultiDiscrete { nvec: vec![2, 3] };
        assert_eq!(s.dim(), 2);
        assert!(s.contains_action(ActionRef::MultiDiscrete(&[1, 2])));
        assert!(!s.contains_action(ActionRef::MultiDiscrete(&[2, 0])));
        assert!(!s.contains_action(ActionRef::MultiDiscrete(&[0])));
        assert!(!s.contains_action(ActionRef::Discrete(0)));
        assert_eq!(s.describe(), "MultiDiscrete([2, 3])");
    }

    #[test]
    fn dict_lanes_and_membership() {
        let s = Space::Dict {
            parts: vec![
                ("direction".into(), Space::Discrete { n: 4 }),
                ("image".into(), Space::Image { shape: [7, 7, 3] }),
                ("pos".into(), unit_box()),
            ],
        };
        assert_eq!((s.dim(), s.pixels()), (3, 147));
        let image = ImagePart {
            key: "image".into(),
            shape: [7, 7, 3],
        };
        assert_eq!(s.images(), vec![image]);
        assert!(s.check_observation().is_ok());
        assert!(s.contains_obs(&[3.0, 0.5, 1.0]));
        assert!(!s.contains_obs(&[4.0, 0.5, 1.0]), "direction out of range");
        assert!(!s.contains_obs(&[3.0, 1.5, 1.0]), "pos out of bounds");
        assert!(!s.contains_obs(&[3.0, 0.5]));
        assert_eq!(
            s.describe(),
            "Dict({\"direction\": Discrete(4), \"image\": Box(0, 255, (7, 7, 3), uint8), \
             \"pos\": Box(low=[-1, 0], high=[1, 3.4028235e38], shape=(2,))})"
        );
        let unsorted = Space::Dict {
            parts: vec![("b".into(), unit_box()), ("a".into(), unit_box())],
        };
        assert!(unsorted.check_observation().unwrap_err().contains("\"a\""));
        let empty = Space::Image { shape: [0, 4, 1] };
        assert!(empty.check_observation().unwrap_err().contains("no pixels"));
    }

    #[test]
    fn descriptions() {
        assert_eq!(Space::Discrete { n: 2 }.describe(), "Discrete(2)");
        assert_eq!(
            unit_box().describe(),
            "Box(low=[-1, 0], high=[1, 3.4028235e38], shape=(2,))"
        );
    }
}

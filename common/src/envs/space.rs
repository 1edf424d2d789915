//! Observation and action spaces, after gymnasium's `Box` and `Discrete`.

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

    /// Number of `f32` values one element occupies in a flat buffer: the box's length, or 1 for
    /// a discrete space (one index).
    pub fn dim(&self) -> usize {
        match self {
            Space::Box { low, .. } => low.len(),
            Space::Discrete { .. } => 1,
            Space::MultiDiscrete { nvec } => nvec.len(),
        }
    }

    /// Whether `x` is an element of this space: for a box, `dim` values each within its bounds
    /// (NaN never is); for a discrete space, one value that is an integer in `0..n`.
    pub fn contains_obs(&self, x: &[f32]) -> bool {
        match self {
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
    fn descriptions() {
        assert_eq!(Space::Discrete { n: 2 }.describe(), "Discrete(2)");
        assert_eq!(
            unit_box().describe(),
            "Box(low=[-1, 0], high=[1, 3.4028235e38], shape=(2,))"
        );
    }
}

//! The device the learner trains on, and the tensor backends recur runs on.
//!
//! Actors run inference on [`Cpu`]; the learner trains on [`CpuAutodiff`] or, in a build with
//! the `cuda` feature, on [`CudaAutodiff`] (burn's CUDA backend, `device = "cuda:N"` in the
//! learner's config). Whatever the training device, what leaves the learner (weight blobs for
//! the actors, checkpoints) is host data. The backends themselves (and [`to_vec`],
//! [`cpu_device`]) live in recur-rnn's [`burn_backend`](recur_rnn::burn_backend), re-exported
//! here; this module adds the learner's choice among them, [`TrainDevice`].
//!
//! ```
//! use common::backend::TrainDevice;
//! assert_eq!("cpu".parse::<TrainDevice>().unwrap(), TrainDevice::Cpu);
//! assert_eq!("cuda".parse::<TrainDevice>().unwrap(), TrainDevice::Cuda(0));
//! assert_eq!("cuda:1".parse::<TrainDevice>().unwrap().to_string(), "cuda:1");
//! assert!("gpu".parse::<TrainDevice>().is_err());
//! ```

use std::fmt;
use std::str::FromStr;

pub use recur_rnn::burn_backend::*;

/// Whether this build can train on CUDA (the `cuda` feature).
pub const CUDA_BUILT: bool = cfg!(feature = "cuda");

/// The device the learner trains on: `"cpu"` (the default), `"cuda"` (= `"cuda:0"`) or
/// `"cuda:N"`. Serialised as that string.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum TrainDevice {
    #[default]
    Cpu,
    /// The CUDA GPU of this ordinal.
    Cuda(usize),
}

/// A training device that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("device {value:?}: expected \"cpu\", \"cuda\" or \"cuda:N\" (N = the GPU's ordinal)")]
    Parse { value: String },
    #[error(
        "device \"{device}\": this binary was built without CUDA support; rebuild with \
         `cargo build --release --features cuda` or use device = \"cpu\""
    )]
    NotBuilt { device: TrainDevice },
    #[error("device \"{device}\" is not usable: {reason}")]
    Unavailable { device: TrainDevice, reason: String },
}

impl TrainDevice {
    /// Whether this build can train on the device (CUDA needs the `cuda` feature); says
    /// nothing about the machine (see `cuda_device` in a `cuda` build).
    pub fn check_built(self) -> Result<(), DeviceError> {
        if matches!(self, TrainDevice::Cuda(_)) && !CUDA_BUILT {
            return Err(DeviceError::NotBuilt { device: self });
        }
        Ok(())
    }
}

impl FromStr for TrainDevice {
    type Err = DeviceError;

    fn from_str(s: &str) -> Result<Self, DeviceError> {
        let parse = || DeviceError::Parse {
            value: s.to_string(),
        };
        match s {
            "cpu" => Ok(TrainDevice::Cpu),
            "cuda" => Ok(TrainDevice::Cuda(0)),
            _ => {
                let index = s.strip_prefix("cuda:").ok_or_else(parse)?;
                // Plain decimal digits only ("+1" and " 1" are typos, not ordinals).
                if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(parse());
                }
                index.parse().map(TrainDevice::Cuda).map_err(|_| parse())
            }
        }
    }
}

impl fmt::Display for TrainDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrainDevice::Cpu => f.write_str("cpu"),
            TrainDevice::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl TryFrom<String> for TrainDevice {
    type Error = DeviceError;
    fn try_from(s: String) -> Result<Self, DeviceError> {
        s.parse()
    }
}

impl From<TrainDevice> for String {
    fn from(d: TrainDevice) -> String {
        d.to_string()
    }
}

/// The CUDA device of ordinal `index`, checked by a small computation on it.
///
/// burn's CUDA backend loads the driver (`libcuda`) at run time and panics when the library,
/// a GPU or the ordinal is missing; the panic is caught here and returned as
/// [`DeviceError::Unavailable`] with its message (the panic hook has already printed it to
/// stderr by then).
#[cfg(feature = "cuda")]
pub fn cuda_device(index: usize) -> Result<burn::backend::cuda::CudaDevice, DeviceError> {
    use burn::tensor::Tensor;
    let device = burn::backend::cuda::CudaDevice::new(index);
    let probe = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        to_vec(Tensor::<Cuda, 1>::from_floats([1.0, 2.0], &device) * 2.0)
    }));
    let unavailable = |reason: String| DeviceError::Unavailable {
        device: TrainDevice::Cuda(index),
        reason,
    };
    match probe {
        Ok(v) if v == [2.0, 4.0] => Ok(device),
        Ok(v) => Err(unavailable(format!(
            "a test computation gave {v:?} instead of [2.0, 4.0]"
        ))),
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("the CUDA backend panicked");
            Err(unavailable(format!(
                "no usable CUDA driver or GPU ({message})"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_and_print_back() {
        for (text, device, printed) in [
            ("cpu", TrainDevice::Cpu, "cpu"),
            ("cuda", TrainDevice::Cuda(0), "cuda:0"),
            ("cuda:0", TrainDevice::Cuda(0), "cuda:0"),
            ("cuda:3", TrainDevice::Cuda(3), "cuda:3"),
        ] {
            assert_eq!(text.parse::<TrainDevice>().unwrap(), device, "{text}");
            assert_eq!(device.to_string(), printed);
            assert_eq!(printed.parse::<TrainDevice>().unwrap(), device);
        }
        for bad in [
            "", "gpu", "CPU", "cuda:", "cuda:x", "cuda:+1", "cuda: 1", "cuda0", "cuda:-1",
        ] {
            let err = bad.parse::<TrainDevice>().unwrap_err().to_string();
            assert!(
                err.contains(&format!("{bad:?}")) && err.contains("\"cuda:N\""),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn cuda_needs_the_feature() {
        assert!(TrainDevice::Cpu.check_built().is_ok());
        let cuda = TrainDevice::Cuda(0).check_built();
        if CUDA_BUILT {
            assert!(cuda.is_ok());
        } else {
            let err = cuda.unwrap_err().to_string();
            assert!(
                err.contains("\"cuda:0\"") && err.contains("--features cuda"),
                "{err}"
            );
        }
    }

    /// With the `cuda` feature: on a machine without a GPU (or driver) the probe is a clear
    /// error, not a panic; on one with a GPU it returns the device.
    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_device_is_usable_or_a_clear_error() {
        match cuda_device(0) {
            Ok(device) => assert_eq!(device.index, 0),
            Err(e) => {
                let err = e.to_string();
                assert!(
                    err.contains("\"cuda:0\"") && err.contains("not usable"),
                    "{err}"
                );
                eprintln!("no CUDA GPU here: checked the error only ({err})");
            }
        }
    }
}

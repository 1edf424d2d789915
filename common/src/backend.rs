//! The tensor backends recur runs on, and the device the learner trains on.
//!
//! Actors run inference on [`Cpu`]; the learner trains on [`CpuAutodiff`] or, in a build with
//! the `cuda` feature, on [`CudaAutodiff`] (burn's CUDA backend, `device = "cuda:N"` in the
//! learner's config). Whatever the training device, what leaves the learner (weight blobs for
//! the actors, checkpoints) is host data.
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

/// CPU backend for inference (no autodiff): burn's ndarray backend in `f32`.
pub type Cpu = burn::backend::NdArray<f32>;

/// CPU backend with reverse-mode autodiff, for training.
pub type CpuAutodiff = burn::backend::Autodiff<Cpu>;

/// burn's CUDA backend (CubeCL kernels, `f32`), without autodiff.
#[cfg(feature = "cuda")]
pub type Cuda = burn::backend::Cuda<f32>;

/// burn's CUDA backend with reverse-mode autodiff, for training on a GPU.
#[cfg(feature = "cuda")]
pub type CudaAutodiff = burn::backend::Autodiff<Cuda>;

/// burn's wgpu backend (CubeCL kernels over Vulkan/Metal/DX12, `f32`), without autodiff. recur
/// uses it to test the CubeCL fused recurrent kernels on a CPU Vulkan driver (Mesa's lavapipe).
#[cfg(feature = "wgpu")]
pub type Wgpu = burn::backend::Wgpu<f32, i32, u32>;

/// burn's wgpu backend with reverse-mode autodiff.
#[cfg(feature = "wgpu")]
pub type WgpuAutodiff = burn::backend::Autodiff<Wgpu>;

/// Whether this build can train on CUDA (the `cuda` feature).
pub const CUDA_BUILT: bool = cfg!(feature = "cuda");

/// A tensor's values on the host, as `f32`, row-major.
pub fn to_vec<B: burn::tensor::backend::Backend, const D: usize>(
    t: burn::tensor::Tensor<B, D>,
) -> Vec<f32> {
    match cpu_values(&t) {
        Some(values) => values,
        None => t
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .expect("f32 data"),
    }
}

/// The values of a [`Cpu`] or [`CpuAutodiff`] f32 tensor stored in standard layout, copied
/// straight from its storage, or of a transposed view of such a matrix (`w.transpose()`),
/// transposed back here. burn's `into_data` gathers element by element over dynamic
/// dimensions: about 1 ms for a small policy's weights, every update (and on every weight
/// adoption in the actors, which read `W^T`).
fn cpu_values<B: burn::tensor::backend::Backend, const D: usize>(
    t: &burn::tensor::Tensor<B, D>,
) -> Option<Vec<f32>> {
    use burn::backend::ndarray::NdArrayTensor;
    let any: &dyn std::any::Any = t;
    let primitive: NdArrayTensor =
        if let Some(t) = any.downcast_ref::<burn::tensor::Tensor<Cpu, D>>() {
            t.clone().into_primitive().tensor()
        } else if let Some(t) = any.downcast_ref::<burn::tensor::Tensor<CpuAutodiff, D>>() {
            t.clone().inner().into_primitive().tensor()
        } else {
            return None;
        };
    match primitive {
        NdArrayTensor::F32(storage) => {
            let view = storage.view();
            if let Some(values) = view.as_slice() {
                return Some(values.to_vec());
            }
            // A transposed standard-layout matrix: its transpose is contiguous.
            let [rows, cols] = view.shape().try_into().ok()?;
            let source = view.t().to_slice()?;
            let mut out = vec![0.0f32; rows * cols];
            for (c, column) in source.chunks_exact(rows.max(1)).enumerate() {
                for (r, &x) in column.iter().enumerate() {
                    out[r * cols + c] = x;
                }
            }
            Some(out)
        }
        _ => None,
    }
}

/// The CPU device (there is only one).
pub fn cpu_device() -> burn::backend::ndarray::NdArrayDevice {
    burn::backend::ndarray::NdArrayDevice::Cpu
}

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

    /// The copy paths of `to_vec` (standard layout, a transposed matrix, both backends) give
    /// burn's own `into_data` values, and a 3-D permuted view falls back to it.
    #[test]
    fn to_vec_matches_burns_into_data_on_plain_and_transposed_tensors() {
        use burn::tensor::{Tensor, TensorData};
        let burns = |data: TensorData| data.convert::<f32>().to_vec::<f32>().unwrap();
        let m = Tensor::<Cpu, 2>::from_data(
            TensorData::new((0..12).map(|i| i as f32 * 0.5 - 2.0).collect(), [3, 4]),
            &cpu_device(),
        );
        for t in [
            m.clone(),
            m.clone().transpose(),
            m.clone().transpose().transpose(),
        ] {
            assert_eq!(to_vec(t.clone()), burns(t.into_data()));
        }
        let a = Tensor::<CpuAutodiff, 2>::from_inner(m.clone()).transpose();
        assert_eq!(to_vec(a.clone()), burns(a.into_data()));
        assert_eq!(
            to_vec(m.clone().transpose()),
            [-2.0, 0.0, 2.0, -1.5, 0.5, 2.5, -1.0, 1.0, 3.0, -0.5, 1.5, 3.5]
        );
        let cube = m.reshape([2, 3, 2]).permute([2, 0, 1]);
        assert_eq!(to_vec(cube.clone()), burns(cube.into_data()));
    }

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

//! The tensor backends recur runs on.
//!
//! Actors run inference on [`Cpu`]; the learner trains on [`CpuAutodiff`] (or, with the `cuda`
//! feature, on burn's CUDA backend).

/// CPU backend for inference (no autodiff): burn's ndarray backend in `f32`.
pub type Cpu = burn::backend::NdArray<f32>;

/// CPU backend with reverse-mode autodiff, for training.
pub type CpuAutodiff = burn::backend::Autodiff<Cpu>;

/// A tensor's values on the host, as `f32`, row-major.
pub fn to_vec<B: burn::tensor::backend::Backend, const D: usize>(
    t: burn::tensor::Tensor<B, D>,
) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .expect("f32 data")
}

/// The CPU device (there is only one).
pub fn cpu_device() -> burn::backend::ndarray::NdArrayDevice {
    burn::backend::ndarray::NdArrayDevice::Cpu
}

//! The burn tensor backends the recurrent modules run on, and reading a tensor back to the host.
//!
//! [`Cpu`] (burn's ndarray backend, `f32`) for inference and [`CpuAutodiff`] for training: the
//! fused backend's CPU kernels run on these two. In a build with the `cuda` feature, burn's
//! CUDA backend (`Cuda`, `CudaAutodiff`); with `wgpu`, its wgpu backend (`Wgpu`,
//! `WgpuAutodiff`): the CubeCL fused kernels run on those.

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

/// A tensor's values on the host, as `f32`, row-major.
pub fn to_vec<B: burn::tensor::backend::Backend, const D: usize>(
    t: burn::tensor::Tensor<B, D>,
) -> Vec<f32> {
    // Nothing to read, and CubeCL's readers refuse a tensor without elements.
    if t.shape().num_elements() == 0 {
        return Vec::new();
    }
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
}

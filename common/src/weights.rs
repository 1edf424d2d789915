//! Weight blobs: a policy's parameters as one flat little-endian buffer, what the learner
//! broadcasts to actors (through [`crate::shm::WeightPublisher`]) and what checkpoints hold.
//!
//! ```text
//! offset  size  what
//! 0       8     b"RECURWB1"
//! 8       8     layout hash (u64 LE): FNV-1a over every parameter's shape, in module order
//! 16      8     policy version (u64 LE)
//! 24      8     parameter count N (u64 LE, f32 values)
//! 32      4N    the values (f32 LE), parameters in module order, each row-major
//! ```
//!
//! A blob is only loaded into a policy whose layout hash matches; otherwise the error names
//! both layouts' shapes.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

use crate::hash::fnv1a;

pub const BLOB_MAGIC: [u8; 8] = *b"RECURWB1";
const HEADER: usize = 32;

/// Why a blob cannot be loaded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WeightError {
    #[error("weights: {0}")]
    Format(String),
    #[error("weights: layout {got:#018x} ({got_count} values) does not fit this policy's layout {expected:#018x} ({expected_count} values; parameter shapes {shapes:?})")]
    Layout {
        got: u64,
        got_count: u64,
        expected: u64,
        expected_count: u64,
        shapes: Vec<Vec<usize>>,
    },
    #[error("weights: parameter {index} holds {value}; weights must be finite")]
    NonFinite { index: usize, value: f32 },
}

/// Every float parameter's shape, in module order.
pub fn layout<B: Backend, M: Module<B>>(module: &M) -> Vec<Vec<usize>> {
    struct Shapes(Vec<Vec<usize>>);
    impl<B: Backend> ModuleVisitor<B> for Shapes {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0.push(param.val().dims().to_vec());
        }
    }
    let mut v = Shapes(Vec::new());
    module.visit(&mut v);
    v.0
}

/// FNV-1a over the shapes.
pub fn layout_hash(shapes: &[Vec<usize>]) -> u64 {
    fnv1a(
        shapes
            .iter()
            .flat_map(|shape| shape.iter().chain([&usize::MAX]))
            .flat_map(|&d| (d as u64).to_le_bytes()),
    )
}

/// Encodes `module`'s parameters with `version`.
pub fn to_blob<B: Backend, M: Module<B>>(module: &M, version: u64) -> Vec<u8> {
    struct Values(Vec<u8>, u64);
    impl<B: Backend> ModuleVisitor<B> for Values {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let values = crate::backend::to_vec(param.val());
            self.1 += values.len() as u64;
            self.0.extend(values.iter().flat_map(|x| x.to_le_bytes()));
        }
    }
    let shapes = layout(module);
    let mut v = Values(Vec::new(), 0);
    module.visit(&mut v);
    let mut out = Vec::with_capacity(HEADER + v.0.len());
    out.extend_from_slice(&BLOB_MAGIC);
    out.extend_from_slice(&layout_hash(&shapes).to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&v.1.to_le_bytes());
    out.extend_from_slice(&v.0);
    out
}

/// The version stamped into a blob.
pub fn blob_version(blob: &[u8]) -> Result<u64, WeightError> {
    header(blob).map(|h| h.version)
}

struct Header {
    layout: u64,
    version: u64,
    count: u64,
}

fn header(blob: &[u8]) -> Result<Header, WeightError> {
    if blob.len() < HEADER || blob[0..8] != BLOB_MAGIC {
        return Err(WeightError::Format(format!(
            "{} bytes without the RECURWB1 header",
            blob.len()
        )));
    }
    let word = |i: usize| u64::from_le_bytes(blob[i..i + 8].try_into().expect("8 bytes"));
    let h = Header {
        layout: word(8),
        version: word(16),
        count: word(24),
    };
    let expected = h
        .count
        .checked_mul(4)
        .and_then(|n| n.checked_add(HEADER as u64));
    if expected != Some(blob.len() as u64) {
        return Err(WeightError::Format(format!(
            "header says {} values but the blob holds {} bytes",
            h.count,
            blob.len()
        )));
    }
    Ok(h)
}

/// Checks that every value of a blob is finite (a NaN or infinite weight is never published or
/// saved); the error names the parameter value's index.
pub fn check_finite(blob: &[u8]) -> Result<(), WeightError> {
    header(blob)?;
    match values(blob).enumerate().find(|(_, x)| !x.is_finite()) {
        Some((index, value)) => Err(WeightError::NonFinite { index, value }),
        None => Ok(()),
    }
}

/// The values of a blob whose header was checked.
fn values(blob: &[u8]) -> impl Iterator<Item = f32> + '_ {
    blob[HEADER..]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
}

/// Loads a blob into `module` (same architecture); returns the module and the blob's version.
pub fn from_blob<B: Backend, M: Module<B>>(
    module: M,
    blob: &[u8],
) -> Result<(M, u64), WeightError> {
    let h = header(blob)?;
    let shapes = layout(&module);
    let expected_count: u64 = shapes
        .iter()
        .map(|s| s.iter().product::<usize>() as u64)
        .sum();
    if h.layout != layout_hash(&shapes) || h.count != expected_count {
        return Err(WeightError::Layout {
            got: h.layout,
            got_count: h.count,
            expected: layout_hash(&shapes),
            expected_count,
            shapes,
        });
    }
    check_finite(blob)?;
    struct Load {
        values: Vec<f32>,
        at: usize,
    }
    impl<B: Backend> ModuleMapper<B> for Load {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            let (id, tensor, mapper) = param.consume();
            let shape = tensor.dims();
            let n: usize = shape.iter().product();
            let data = TensorData::new(self.values[self.at..self.at + n].to_vec(), shape);
            self.at += n;
            // Keep the parameter's autodiff tracking as it was.
            let loaded = Tensor::from_data(data, &tensor.device())
                .set_require_grad(tensor.is_require_grad());
            Param::from_mapped_value(id, loaded, mapper)
        }
    }
    let mut load = Load {
        values: values(blob).collect(),
        at: 0,
    };
    let module = module.map(&mut load);
    Ok((module, h.version))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{cpu_device, Cpu, CpuAutodiff};
    use crate::policy::{ActionSpec, PolicyConfig};
    use recur_rnn::CellKind;

    #[test]
    fn round_trip_and_layout_checks() {
        let device = cpu_device();
        let config = PolicyConfig::new(4, ActionSpec::Discrete { n: 2 }).with_hidden_size(8);
        let a = config.init_seeded::<Cpu>(1, &device).unwrap();
        let b = config.init_seeded::<Cpu>(2, &device).unwrap();
        let blob = to_blob(&a, 7);
        assert_eq!(blob_version(&blob).unwrap(), 7);
        let (loaded, version) = from_blob(b, &blob).unwrap();
        assert_eq!(version, 7);
        assert_eq!(to_blob(&loaded, 7), blob);

        // Into an autodiff policy (the learner's), too.
        let c = config.init_seeded::<CpuAutodiff>(3, &device).unwrap();
        let (c, _) = from_blob(c, &blob).unwrap();
        assert_eq!(to_blob(&c, 7), blob);

        // Another architecture is refused, naming the shapes.
        let other = config
            .clone()
            .with_cell(CellKind::Gru)
            .init_seeded::<Cpu>(1, &device)
            .unwrap();
        let err = from_blob(other, &blob).unwrap_err().to_string();
        assert!(
            err.contains("does not fit") && err.contains("[24, 8]"),
            "{err}"
        );

        // Truncated, wrong magic, non-finite.
        let err = from_blob(a.clone(), &blob[..blob.len() - 4])
            .unwrap_err()
            .to_string();
        assert!(err.contains("header says"), "{err}");
        let mut bad = blob.clone();
        bad[0] = b'X';
        assert!(matches!(
            from_blob(a.clone(), &bad),
            Err(WeightError::Format(_))
        ));
        let mut bad = blob.clone();
        bad[HEADER + 8..HEADER + 12].copy_from_slice(&f32::NAN.to_le_bytes());
        assert!(matches!(
            from_blob(a, &bad),
            Err(WeightError::NonFinite { index: 2, .. })
        ));
    }
}

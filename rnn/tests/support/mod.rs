//! Helpers shared by the recurrent-module tests: reference loading and comparisons.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use burn::tensor::{Bool, Tensor, TensorData};
use recur_rnn::burn_backend::{cpu_device, CpuAutodiff};
use serde_json::Value;

pub type B = CpuAutodiff;

/// The reference directory: `RECUR_REFERENCE_DIR` if set, else the repository's own
/// `tests/reference`. Both are found from this crate's manifest directory, not the working
/// directory: a relative `RECUR_REFERENCE_DIR` is taken from the project root (what
/// `common::reference::reference_dir` does for the other crates' tests).
pub fn reference_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("rnn/ sits in the project root");
    match std::env::var_os("RECUR_REFERENCE_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("tests/reference"),
    }
}

/// Reads a reference JSON file; fails (never skips) when it is missing.
pub fn load_json(relative: &str) -> Value {
    let dir = reference_dir();
    let path = dir.join(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "reference file {} cannot be read ({e}); set RECUR_REFERENCE_DIR to the directory \
             holding rnn/ and envs/ (default tests/reference in the repository)",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: invalid JSON: {e}", path.display()))
}

/// `{"shape": [...], "data": [...]}` as floats (JSON decimals round-trip to f32).
pub fn floats(v: &Value) -> (Vec<usize>, Vec<f32>) {
    let shape = shape_of(v);
    let data = v["data"]
        .as_array()
        .expect("tensor data")
        .iter()
        .map(|x| x.as_f64().expect("a number") as f32)
        .collect();
    (shape, data)
}

pub fn bools(v: &Value) -> (Vec<usize>, Vec<bool>) {
    let shape = shape_of(v);
    let data = v["data"]
        .as_array()
        .expect("tensor data")
        .iter()
        .map(|x| x.as_bool().expect("a bool"))
        .collect();
    (shape, data)
}

fn shape_of(v: &Value) -> Vec<usize> {
    v["shape"]
        .as_array()
        .unwrap_or_else(|| panic!("not a tensor: {v}"))
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect()
}

pub fn tensor<const D: usize>(v: &Value) -> Tensor<B, D> {
    let (shape, data) = floats(v);
    Tensor::from_data(TensorData::new(data, shape), &cpu_device())
}

/// A boolean tensor with the trailing singleton axis of the reference files dropped.
pub fn flags<const D: usize>(v: &Value) -> Tensor<B, D, Bool> {
    let (mut shape, data) = bools(v);
    assert_eq!(
        shape.pop(),
        Some(1),
        "is_init has a trailing singleton axis"
    );
    Tensor::from_data(TensorData::new(data, shape), &cpu_device())
}

/// All the module's parameters from a reference file, by PyTorch name.
pub fn params(file: &Value) -> Vec<(String, TensorData)> {
    file["params"]
        .as_object()
        .expect("params")
        .iter()
        .map(|(name, v)| {
            let (shape, data) = floats(v);
            (name.clone(), TensorData::new(data, shape))
        })
        .collect()
}

pub fn values(data: TensorData) -> Vec<f32> {
    data.convert::<f32>().to_vec::<f32>().unwrap()
}

/// Element-wise `|got - want| <= abs` or `|got - want| <= rel * |want|`.
pub fn assert_close(what: &str, got: &[f32], want: &[f32], abs: f32, rel: f32) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {} values, expected {}",
        got.len(),
        want.len()
    );
    let mut worst = (0.0f32, 0usize);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = (g - w).abs();
        if !(d <= abs || d <= rel * w.abs()) && d > worst.0 {
            worst = (d, i);
        }
        assert!(g.is_finite(), "{what}[{i}] = {g} is not finite");
    }
    let (d, i) = worst;
    assert!(
        d == 0.0,
        "{what}: element {i} is {} but the reference says {} (|diff| = {d:e}, tolerance {abs:e} abs / {rel:e} rel)",
        got[i],
        want[i]
    );
}

pub fn reference_path_exists(relative: &str) -> bool {
    Path::new(&reference_dir()).join(relative).exists()
}

/// The expected `("next", rs_h)` `[B, T, L, H]`: the file's `next_rs_h` (LSTM/GRU), or, for
/// the minGRU files, their state after every step (`next_rs_h_every_step`) kept at the last
/// step of each segment (before an `is_init` or at the row's end) and zero elsewhere.
pub fn expected_next_h(rp: &Value) -> Vec<f32> {
    if let Some(next) = rp.get("next_rs_h") {
        return floats(next).1;
    }
    let (shape, every) = floats(&rp["next_rs_h_every_step"]);
    let (_, init) = bools(&rp["is_init"]);
    let (t_len, lh) = (shape[1], shape[2] * shape[3]);
    let mut want = every;
    for (pos, chunk) in want.chunks_exact_mut(lh).enumerate() {
        let last = (pos + 1) % t_len == 0 || init[pos + 1];
        if !last {
            chunk.fill(0.0);
        }
    }
    want
}

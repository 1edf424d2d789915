//! Where the reference data from PyTorch/TorchRL and gymnasium lives.

use std::path::PathBuf;

/// The reference directory: `RECUR_REFERENCE_DIR` if set, else `../shared/reference` beside the
/// project root. A relative `RECUR_REFERENCE_DIR` is taken from the project root, so the same
/// value works whichever crate's tests run.
pub fn reference_dir() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("common/ sits in the project root")
        .to_path_buf();
    match std::env::var_os("RECUR_REFERENCE_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("../shared/reference"),
    }
}

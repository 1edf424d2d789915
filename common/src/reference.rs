//! Where the reference data from PyTorch/TorchRL and gymnasium lives.
//!
//! The repository ships its own copy in `tests/reference/` (kept equal to the project's shared
//! reference folder by `scripts/sync_reference.sh`; CI fails when the two differ), so a clone
//! with nothing beside it passes its own tests.

use std::path::PathBuf;

/// The reference directory: `RECUR_REFERENCE_DIR` if set, else the repository's own
/// `tests/reference`. Both are found from this crate's manifest directory, not the working
/// directory: a relative `RECUR_REFERENCE_DIR` is taken from the project root, so the same value
/// works whichever crate's tests run.
pub fn reference_dir() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("common/ sits in the project root")
        .to_path_buf();
    match std::env::var_os("RECUR_REFERENCE_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("tests/reference"),
    }
}

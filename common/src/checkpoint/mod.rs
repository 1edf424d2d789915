//! The checkpoint directory: what `recur-learner train` and `replay` write and what a resumed
//! run and `recur-actor --checkpoint` read. One crash-safe format:
//!
//! ```text
//! checkpoint/
//!   model.bin       the model record (burn, full precision)
//!   optim.bin       the optimizer state
//!   weights.bin     the policy's weight blob (crate::weights), with its version
//!   policy.json     the PolicyConfig (the architecture)
//!   state.json      the run's counters
//!   resume.bin      what an exact resume needs besides them (bincode [`ResumeState`]: the
//!                   algorithm's host state, each actor's saved state, open episode returns)
//!   manifest.json   format, algorithm, architecture, weight layout hash, and every file's
//!                   length and CRC-32
//! checkpoint.old/   the previous checkpoint, kept (the fallback)
//! ```
//!
//! **Writing** ([`save_checkpoint`]): every file goes into `checkpoint.tmp/` and is fsynced, the
//! manifest last; then `checkpoint.old/` is replaced by the current `checkpoint/`, and
//! `checkpoint.tmp/` is renamed to `checkpoint/`; the directory is fsynced. A crash at any
//! instant leaves a complete `checkpoint/` or a complete `checkpoint.old/` (or both). Weights
//! that are not finite are never saved.
//!
//! **Loading** ([`load_checkpoint`]): the manifest's algorithm and architecture are checked
//! against what the run is configured for before anything loads (a mismatch is an error, not a
//! fallback); every file is checked against its length and CRC-32; then the state loads. A
//! missing, truncated or corrupted `checkpoint/` falls back to `checkpoint.old/`, saying so.
//! Errors name the file and what is wrong; nothing is written while loading.
//!
//! **Fault injection**: `RECUR_FAULT_CHECKPOINT=<save>:<step>[:term]` makes the process kill
//! itself (SIGKILL; with `:term`, raise SIGTERM and go on) right after filesystem step `<step>`
//! (1..=[`CHECKPOINT_STEPS`]) of its `<save>`-th checkpoint write, so tests can crash a write
//! between any two steps without relying on timing.
//!
//! **Where each part lives**: `format.rs` the files and formats of the directory (file names,
//! `resume.bin`, `manifest.json`, the previous checkpoint's path); `durable.rs` the crash-safe
//! writes of a file and a directory ([`write_atomic`], [`sync_dir`]); `save.rs` the checkpoint
//! write with its fault-injection points ([`save_checkpoint`], [`save_policy`]); `load.rs` the
//! verified load with its fallback ([`load_checkpoint`], [`load_checkpoint_policy`]). This file
//! holds what a learner implements to be saved ([`Checkpointed`]).

use burn::tensor::backend::Backend;

use crate::policy::Policy;

mod durable;
mod format;
mod load;
mod save;

pub use durable::{sync_dir, write_atomic};
pub use format::{
    decode_resume, previous, FileEntry, Manifest, ResumeState, CHECKPOINT_FORMAT,
    CHECKPOINT_MANIFEST, CHECKPOINT_POLICY, CHECKPOINT_WEIGHTS,
};
pub use load::{
    load_checkpoint, load_checkpoint_policy, read_manifest, read_verified, CheckpointError, Loaded,
};
pub use save::{save_checkpoint, save_policy, CHECKPOINT_STEPS};

/// What a checkpoint saves of a learner: the policy it trains and its model and optimizer
/// state as bytes.
pub trait Checkpointed<B: Backend> {
    /// The policy under training.
    fn model(&self) -> &Policy<B>;
    /// The model record and the optimizer state.
    fn save_state(&self) -> anyhow::Result<(Vec<u8>, Vec<u8>)>;
    /// Restores what [`save_state`](Self::save_state) wrote.
    fn load_state(&mut self, model: Vec<u8>, optim: Vec<u8>) -> anyhow::Result<()>;
    /// The rest of the algorithm's state a resumed run needs to go on exactly (a sampler's
    /// position, running statistics), as bytes; empty (the default) when there is none.
    fn host_state(&self) -> Vec<u8> {
        Vec::new()
    }
    /// Restores what [`host_state`](Self::host_state) wrote (empty: nothing was saved, e.g. a
    /// checkpoint of an older recur; the state starts fresh).
    fn load_host_state(&mut self, state: &[u8]) -> anyhow::Result<()> {
        let _ = state;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    /// A fresh directory for test `tag` in the system's temporary directory.
    pub(super) fn temp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("recur-ckpt-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}

//! The files and formats of a checkpoint directory: the file names, `resume.bin`
//! ([`ResumeState`]), `manifest.json` ([`Manifest`]) and the path of the previous checkpoint
//! kept beside it. The layout is drawn in the [module docs](super).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::durable::sibling;
use crate::policy::PolicyConfig;

/// The files of a checkpoint directory an actor can run from.
pub const CHECKPOINT_POLICY: &str = "policy.json";
pub const CHECKPOINT_WEIGHTS: &str = "weights.bin";
pub const CHECKPOINT_MANIFEST: &str = "manifest.json";
pub(super) const MODEL: &str = "model.bin";
pub(super) const OPTIM: &str = "optim.bin";
pub(super) const STATE: &str = "state.json";
pub(super) const RESUME: &str = "resume.bin";
/// The manifest format this build writes and reads.
pub const CHECKPOINT_FORMAT: u32 = 2;

/// `resume.bin`: what an exact resume needs besides the model, the optimizer and the counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResumeState {
    /// [`Checkpointed::host_state`](super::Checkpointed::host_state) (filled in by
    /// [`save_checkpoint`](super::save_checkpoint)).
    pub algo: Vec<u8>,
    /// `(actor id, state)`: each actor's state right after the last chunk of it that an update
    /// used (`rollout::Actor::save_state`; sync runs), which a resumed actor continues from.
    pub actors: Vec<(u32, Vec<u8>)>,
    /// `(trajectory id, return so far)` of the episodes running at the checkpoint.
    pub open_returns: Vec<(i64, f64)>,
}

/// Decodes `resume.bin` (all of it: bytes left over are an error).
pub fn decode_resume(bytes: &[u8]) -> Result<ResumeState, String> {
    match bincode::serde::decode_from_slice(bytes, bincode::config::standard()) {
        Ok((resume, used)) if used == bytes.len() => Ok(resume),
        Ok(_) => Err("bytes left over".to_string()),
        Err(e) => Err(format!("does not decode: {e}")),
    }
}

/// `manifest.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    /// The algorithm whose model and optimizer state the checkpoint holds (`ppo`, `dqn`, `bc`).
    pub algo: String,
    /// The architecture (read as actors read it, so that manifests written before a field
    /// existed load with its default).
    #[serde(with = "crate::actor_args::PolicyConfigDef")]
    pub policy: PolicyConfig,
    /// The weight layout hash (crate::weights).
    pub layout_hash: u64,
    pub files: Vec<FileEntry>,
}

/// One file of a checkpoint: its length and CRC-32.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    pub bytes: u64,
    pub crc32: u32,
}

/// The previous checkpoint kept beside `dir`.
pub fn previous(dir: &Path) -> PathBuf {
    sibling(dir, ".old")
}

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

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use burn::tensor::backend::Backend;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::backend::Cpu;
use crate::policy::{init_policy, Policy, PolicyConfig};
use crate::weights::{check_finite, from_blob, layout, layout_hash, to_blob};

/// The files of a checkpoint directory an actor can run from.
pub const CHECKPOINT_POLICY: &str = "policy.json";
pub const CHECKPOINT_WEIGHTS: &str = "weights.bin";
pub const CHECKPOINT_MANIFEST: &str = "manifest.json";
const MODEL: &str = "model.bin";
const OPTIM: &str = "optim.bin";
const STATE: &str = "state.json";
const RESUME: &str = "resume.bin";
/// The manifest format this build writes and reads.
pub const CHECKPOINT_FORMAT: u32 = 2;
/// Filesystem steps of one checkpoint write (the fault-injection points):
/// 1 `checkpoint.tmp/` created; 2-8 model.bin, optim.bin, weights.bin, policy.json,
/// state.json, resume.bin, manifest.json written and fsynced; 9 `checkpoint.tmp/` fsynced;
/// 10 `checkpoint.old/` removed; 11 `checkpoint/` renamed to `checkpoint.old/`;
/// 12 `checkpoint.tmp/` renamed to `checkpoint/`; 13 the parent directory fsynced.
/// Steps 10 and 11 happen only when a `checkpoint/` exists.
pub const CHECKPOINT_STEPS: u32 = 13;

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

/// `resume.bin`: what an exact resume needs besides the model, the optimizer and the counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResumeState {
    /// [`Checkpointed::host_state`] (filled in by [`save_checkpoint`]).
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
    /// The architecture.
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

/// Why a checkpoint cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The checkpoint is unreadable (missing, truncated, corrupted): a fallback may help.
    #[error("{path}: {problem}")]
    Damaged { path: PathBuf, problem: String },
    /// The checkpoint is sound but was written for another algorithm or architecture.
    #[error("{path}: {problem}")]
    Mismatch { path: PathBuf, problem: String },
}

fn damaged(path: &Path, problem: impl Into<String>) -> CheckpointError {
    CheckpointError::Damaged {
        path: path.to_path_buf(),
        problem: problem.into(),
    }
}

/// `dir` with `.tmp` / `.old` appended to its last component.
fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    dir.with_file_name(name)
}

/// The previous checkpoint kept beside `dir`.
pub fn previous(dir: &Path) -> PathBuf {
    sibling(dir, ".old")
}

static SAVES: AtomicU64 = AtomicU64::new(0);

/// The fault-injection point after step `step` of save number `save` (see the module docs).
fn fault_point(save: u64, step: u32) {
    let Ok(spec) = std::env::var("RECUR_FAULT_CHECKPOINT") else {
        return;
    };
    let mut parts = spec.split(':');
    let (Some(Ok(at_save)), Some(Ok(at_step))) = (
        parts.next().map(str::parse::<u64>),
        parts.next().map(str::parse::<u32>),
    ) else {
        return;
    };
    if (at_save, at_step) != (save, step) {
        return;
    }
    use nix::sys::signal::{raise, Signal};
    let signal = match parts.next() {
        Some("term") => Signal::SIGTERM,
        _ => Signal::SIGKILL,
    };
    eprintln!("RECUR_FAULT_CHECKPOINT: {signal} after step {step} of checkpoint write {save}");
    let _ = raise(signal);
}

/// Writes `bytes` to a new file `path` (mode 0600 whatever the umask) and fsyncs it; errors
/// name the path.
fn write_synced(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("setting the mode of {}", path.display()))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {} ({} bytes)", path.display(), bytes.len()))
}

/// Fsyncs directory `dir` (so that the renames and creations in it are durable).
pub fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing directory {}", dir.display()))
}

fn parent_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Writes `bytes` to `path` atomically: a temporary file beside it (mode 0600), fsynced,
/// renamed over `path`, the directory fsynced. A crash leaves the old file or the new one,
/// never a torn or empty one. Errors name the path.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = sibling(path, ".tmp");
    if let Err(e) = write_synced(&tmp, bytes) {
        // A failed write (a full disk) leaves no temporary file behind, and its space back.
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    sync_dir(parent_of(path))
}

/// Writes the checkpoint directory `dir` crash-safely (see the module docs). `algo` names the
/// algorithm whose state it holds. Refuses weights that are not finite (nothing is written).
pub fn save_checkpoint<B: Backend, S: Serialize>(
    dir: &Path,
    learner: &(impl Checkpointed<B> + ?Sized),
    algo: &str,
    state: &S,
    resume: ResumeState,
    version: u64,
) -> anyhow::Result<()> {
    let [weights, policy] = policy_files(dir, learner.model(), version)?;
    let (model, optim) = learner.save_state()?;
    let resume = ResumeState {
        algo: learner.host_state(),
        ..resume
    };
    let resume = bincode::serde::encode_to_vec(&resume, bincode::config::standard())
        .context("encoding resume.bin")?;
    let files: [(&str, Vec<u8>); 6] = [
        (MODEL, model),
        (OPTIM, optim),
        weights,
        policy,
        (STATE, pretty_json(state)?),
        (RESUME, resume),
    ];
    let save = SAVES.fetch_add(1, Ordering::SeqCst) + 1;
    replace_dir(dir, &files, algo, learner.model(), &|step| {
        fault_point(save, step)
    })
}

/// `weights.bin` and `policy.json` of `policy` at version `version`, for directory `dir`;
/// refuses weights that are not finite.
fn policy_files<B: Backend>(
    dir: &Path,
    policy: &Policy<B>,
    version: u64,
) -> anyhow::Result<[(&'static str, Vec<u8>); 2]> {
    let weights = to_blob(policy, version);
    check_finite(&weights)
        .with_context(|| format!("not writing {}: the weights are not finite", dir.display()))?;
    let config = pretty_json(policy.config())?;
    Ok([(CHECKPOINT_WEIGHTS, weights), (CHECKPOINT_POLICY, config)])
}

/// `value` as pretty-printed JSON and a newline.
fn pretty_json(value: &impl Serialize) -> serde_json::Result<Vec<u8>> {
    Ok((serde_json::to_string_pretty(value)? + "\n").into_bytes())
}

/// Keeps the weights of `policy` (policy version `version`) in directory `dir`, with
/// `extra` files beside them: a checkpoint directory of the policy only (`policy.json`,
/// `weights.bin`, `manifest.json` for `algo`), which `recur-actor --checkpoint`,
/// `recur-learner eval` and `export` read, written as crash-safely as [`save_checkpoint`]
/// writes (the one before is kept in `dir.old`). Refuses weights that are not finite.
pub fn save_policy<B: Backend>(
    dir: &Path,
    policy: &Policy<B>,
    algo: &str,
    version: u64,
    extra: &[(&str, Vec<u8>)],
) -> anyhow::Result<()> {
    let mut files = policy_files(dir, policy, version)?.to_vec();
    files.extend(extra.iter().cloned());
    replace_dir(dir, &files, algo, policy, &|_| {})
}

/// Writes `files` and their manifest (for `algo` and `policy`'s architecture) into
/// `dir.tmp/`, fsynced, then puts it in place of `dir` (which becomes `dir.old`, replacing the
/// one there), calling `at` with the number of each filesystem step it reaches
/// ([`CHECKPOINT_STEPS`]).
fn replace_dir<B: Backend>(
    dir: &Path,
    files: &[(&str, Vec<u8>)],
    algo: &str,
    policy: &Policy<B>,
    at: &dyn Fn(u32),
) -> anyhow::Result<()> {
    let mut step = 0;
    let mut done = |steps: u32, reached: bool| {
        step += steps;
        if reached {
            at(step);
        }
    };
    let tmp = sibling(dir, ".tmp");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)
            .with_context(|| format!("removing the unfinished {}", tmp.display()))?;
    }
    // The new directory in `tmp`, complete and durable; nothing else is touched yet.
    let mut write_tmp = || -> anyhow::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        done(1, true);
        let mut entries = Vec::new();
        for (name, bytes) in files {
            write_synced(&tmp.join(name), bytes)?;
            entries.push(FileEntry {
                name: name.to_string(),
                bytes: bytes.len() as u64,
                crc32: crc32fast::hash(bytes),
            });
            done(1, true);
        }
        let manifest = Manifest {
            format: CHECKPOINT_FORMAT,
            algo: algo.to_string(),
            policy: policy.config().clone(),
            layout_hash: layout_hash(&layout(policy)),
            files: entries,
        };
        write_synced(&tmp.join(CHECKPOINT_MANIFEST), &pretty_json(&manifest)?)?;
        done(1, true);
        sync_dir(&tmp)?;
        done(1, true);
        Ok(())
    };
    if let Err(e) = write_tmp() {
        // A failed write (a full disk) gives its space back; the directories in place stay.
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e.context(format!(
            "{} not written ({} and {} are unchanged)",
            dir.display(),
            dir.display(),
            previous(dir).display()
        )));
    }
    let old = previous(dir);
    if dir.exists() {
        // The current directory becomes the previous one. (Without a current one, e.g. after
        // a crash between the two renames, the previous one stays until the new one is in
        // place.)
        if old.exists() {
            std::fs::remove_dir_all(&old).with_context(|| format!("removing {}", old.display()))?;
        }
        done(1, true);
        std::fs::rename(dir, &old)
            .with_context(|| format!("renaming {} to {}", dir.display(), old.display()))?;
        done(1, true);
    } else {
        // Steps 10 and 11 (nothing to move aside) are not reached.
        done(2, false);
    }
    std::fs::rename(&tmp, dir)
        .with_context(|| format!("renaming {} to {}", tmp.display(), dir.display()))?;
    done(1, true);
    sync_dir(parent_of(dir))?;
    done(1, true);
    Ok(())
}

/// What a loaded checkpoint was.
#[derive(Debug)]
pub struct Loaded<S> {
    /// The run's counters.
    pub state: S,
    /// The directory it came from (`checkpoint/`, or `checkpoint.old/` after a fallback).
    pub from: PathBuf,
    /// Why `checkpoint/` itself was not used (a fallback happened).
    pub fell_back: Option<String>,
    /// `resume.bin` (its `algo` already loaded into the learner); empty for a checkpoint
    /// written before it existed.
    pub resume: ResumeState,
}

/// Loads the checkpoint `dir` (falling back to `dir.old`, see the module docs) into `learner`,
/// after checking that it was written for `algo` and `policy` (the backend may differ).
/// `Ok(None)`: neither exists (the run was stopped before its first checkpoint).
pub fn load_checkpoint<B: Backend, S: DeserializeOwned>(
    dir: &Path,
    learner: &mut (impl Checkpointed<B> + ?Sized),
    algo: &str,
    policy: &PolicyConfig,
) -> anyhow::Result<Option<Loaded<S>>> {
    let old = previous(dir);
    if !dir.exists() && !old.exists() {
        return Ok(None);
    }
    let first = if dir.exists() {
        match load_one(dir, learner, algo, policy) {
            Ok(loaded) => return Ok(Some(loaded)),
            Err(e @ CheckpointError::Mismatch { .. }) => return Err(e.into()),
            Err(e) => e.to_string(),
        }
    } else {
        format!(
            "{} is missing (the run was stopped while replacing it)",
            dir.display()
        )
    };
    if !old.exists() {
        anyhow::bail!("{first}; there is no previous checkpoint {}", old.display());
    }
    match load_one(&old, learner, algo, policy) {
        Ok(loaded) => Ok(Some(Loaded {
            fell_back: Some(first),
            ..loaded
        })),
        Err(e) => anyhow::bail!("{first}; the previous checkpoint is unusable too: {e}"),
    }
}

/// Reads and checks the manifest of checkpoint `dir`.
pub fn read_manifest(dir: &Path) -> Result<Manifest, CheckpointError> {
    let path = dir.join(CHECKPOINT_MANIFEST);
    let text = std::fs::read(&path).map_err(|e| {
        damaged(
            &path,
            if e.kind() == std::io::ErrorKind::NotFound {
                "missing (an unfinished write, or a checkpoint of a recur before checkpoint \
                 format 2, which cannot be resumed)"
                    .to_string()
            } else {
                format!("unreadable: {e}")
            },
        )
    })?;
    let manifest: Manifest = serde_json::from_slice(&text)
        .map_err(|e| damaged(&path, format!("not a checkpoint manifest: {e}")))?;
    if manifest.format != CHECKPOINT_FORMAT {
        return Err(CheckpointError::Mismatch {
            path,
            problem: format!(
                "checkpoint format {} (this build reads format {CHECKPOINT_FORMAT})",
                manifest.format
            ),
        });
    }
    Ok(manifest)
}

/// Reads file `name` of checkpoint `dir` and checks it against the manifest.
pub fn read_verified(
    dir: &Path,
    manifest: &Manifest,
    name: &str,
) -> Result<Vec<u8>, CheckpointError> {
    let path = dir.join(name);
    let entry = manifest
        .files
        .iter()
        .find(|f| f.name == name)
        .ok_or_else(|| damaged(&path, "not listed in the manifest"))?;
    let bytes = std::fs::read(&path).map_err(|e| damaged(&path, format!("unreadable: {e}")))?;
    if bytes.len() as u64 != entry.bytes {
        return Err(damaged(
            &path,
            format!(
                "{} bytes where the manifest says {} (truncated or overwritten)",
                bytes.len(),
                entry.bytes
            ),
        ));
    }
    let crc = crc32fast::hash(&bytes);
    if crc != entry.crc32 {
        return Err(damaged(
            &path,
            format!(
                "CRC-32 {crc:#010x} where the manifest says {:#010x} (the file is corrupted)",
                entry.crc32
            ),
        ));
    }
    Ok(bytes)
}

/// The fields in which two architectures differ (the backend is not architecture).
fn architecture_diff(saved: &PolicyConfig, wanted: &PolicyConfig) -> Vec<String> {
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) =
        (serde_json::to_value(saved), serde_json::to_value(wanted))
    else {
        return vec!["the policy configs do not serialise".into()];
    };
    a.iter()
        .filter(|(k, v)| k.as_str() != "backend" && b.get(k.as_str()) != Some(v))
        .map(|(k, v)| {
            format!(
                "{k} = {v} (the config asks for {})",
                b.get(k.as_str()).cloned().unwrap_or_default()
            )
        })
        .collect()
}

fn load_one<B: Backend, S: DeserializeOwned>(
    dir: &Path,
    learner: &mut (impl Checkpointed<B> + ?Sized),
    algo: &str,
    policy: &PolicyConfig,
) -> Result<Loaded<S>, CheckpointError> {
    let manifest = read_manifest(dir)?;
    let mismatch = |problem: String| CheckpointError::Mismatch {
        path: dir.to_path_buf(),
        problem,
    };
    if manifest.algo != algo {
        return Err(mismatch(format!(
            "written by algorithm {:?}, the config trains {algo:?}",
            manifest.algo
        )));
    }
    let diff = architecture_diff(&manifest.policy, policy);
    if !diff.is_empty() {
        return Err(mismatch(format!(
            "written for another architecture: {}; resume with the run's own config.toml, or \
             start a new run",
            diff.join(", ")
        )));
    }
    let files: Vec<Vec<u8>> = [STATE, CHECKPOINT_WEIGHTS, MODEL, OPTIM]
        .iter()
        .map(|name| read_verified(dir, &manifest, name))
        .collect::<Result<_, _>>()?;
    let [state, weights, model, optim]: [Vec<u8>; 4] =
        files.try_into().expect("four files were read");
    let state: S = serde_json::from_slice(&state)
        .map_err(|e| damaged(&dir.join(STATE), format!("does not parse: {e}")))?;
    // Checkpoints written before resume.bin existed resume without it (not exactly).
    let resume = if manifest.files.iter().any(|f| f.name == RESUME) {
        let bytes = read_verified(dir, &manifest, RESUME)?;
        decode_resume(&bytes).map_err(|e| damaged(&dir.join(RESUME), e))?
    } else {
        ResumeState::default()
    };
    check_finite(&weights).map_err(|e| damaged(&dir.join(CHECKPOINT_WEIGHTS), e.to_string()))?;
    let expected = layout_hash(&layout(learner.model()));
    if manifest.layout_hash != expected {
        return Err(mismatch(format!(
            "weight layout {:#018x}, the configured policy has {expected:#018x}",
            manifest.layout_hash
        )));
    }
    // burn's recorder panics on some malformed records: a panic here is a damaged file too.
    let loaded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        learner.load_state(model, optim)
    }));
    let failed = match loaded {
        Ok(loaded) => loaded.err().map(|e| format!(": {e:#}")),
        Err(_) => Some(" (the reader panicked)".to_string()),
    };
    if let Some(why) = failed {
        return Err(damaged(
            &dir.join(MODEL),
            format!("model or optimizer state ({OPTIM}) does not load{why}"),
        ));
    }
    // The restored model must be the one whose weights the checkpoint published.
    let restored = to_blob(learner.model(), 0);
    if restored[32..] != weights[32..] {
        return Err(damaged(
            &dir.join(MODEL),
            format!("does not hold the weights of {CHECKPOINT_WEIGHTS}"),
        ));
    }
    learner
        .load_host_state(&resume.algo)
        .map_err(|e| damaged(&dir.join(RESUME), format!("does not load: {e:#}")))?;
    Ok(Loaded {
        state,
        from: dir.to_path_buf(),
        fell_back: None,
        resume,
    })
}

/// Loads the policy of a checkpoint: `dir` is a checkpoint directory (`policy.json` and
/// `weights.bin`, as written by `recur-learner train` and `replay`) or a run directory holding
/// `checkpoint/` (or, after a crash, only `checkpoint.old/`). A manifest, when present, is
/// checked. Returns the policy and the weights' version.
pub fn load_checkpoint_policy(dir: &Path) -> anyhow::Result<(Policy<Cpu>, u64)> {
    let dir = [dir.join("checkpoint"), previous(&dir.join("checkpoint"))]
        .into_iter()
        .find(|d| d.join(CHECKPOINT_WEIGHTS).exists())
        .unwrap_or_else(|| dir.to_path_buf());
    let manifest = dir
        .join(CHECKPOINT_MANIFEST)
        .exists()
        .then(|| read_manifest(&dir))
        .transpose()?;
    let read = |name: &str| -> anyhow::Result<Vec<u8>> {
        match &manifest {
            Some(m) => Ok(read_verified(&dir, m, name)?),
            None => std::fs::read(dir.join(name)).with_context(|| {
                format!(
                    "reading {} (a checkpoint directory holds {CHECKPOINT_POLICY} and {CHECKPOINT_WEIGHTS})",
                    dir.join(name).display()
                )
            }),
        }
    };
    let config: PolicyConfig = serde_json::from_slice(&read(CHECKPOINT_POLICY)?)
        .with_context(|| format!("parsing {}", dir.join(CHECKPOINT_POLICY).display()))?;
    let blob = read(CHECKPOINT_WEIGHTS)?;
    from_blob(init_policy(&config, 0)?, &blob)
        .with_context(|| format!("loading {}", dir.join(CHECKPOINT_WEIGHTS).display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("recur-ckpt-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn atomic_writes_replace_whole_files_and_name_the_path_on_a_full_disk() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp("atomic");
        let path = dir.join("config.toml");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert!(!dir.join("config.toml.tmp").exists());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // A full disk (the temporary file is /dev/full): the error names it, and the old
        // file is untouched.
        std::os::unix::fs::symlink("/dev/full", dir.join("config.toml.tmp")).unwrap();
        let err = format!("{:#}", write_atomic(&path, b"three").unwrap_err());
        assert!(
            err.contains("config.toml.tmp") && err.contains("No space left on device"),
            "{err}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn verified_reads_name_the_file_and_the_problem() {
        let dir = temp("verify");
        let bytes = b"0123456789".to_vec();
        std::fs::write(dir.join("a.bin"), &bytes).unwrap();
        let manifest = Manifest {
            format: CHECKPOINT_FORMAT,
            algo: "ppo".into(),
            policy: PolicyConfig::new(2, crate::policy::ActionSpec::Discrete { n: 2 }),
            layout_hash: 0,
            files: vec![FileEntry {
                name: "a.bin".into(),
                bytes: 10,
                crc32: crc32fast::hash(&bytes),
            }],
        };
        assert_eq!(read_verified(&dir, &manifest, "a.bin").unwrap(), bytes);
        std::fs::write(dir.join("a.bin"), &bytes[..4]).unwrap();
        let err = read_verified(&dir, &manifest, "a.bin")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("a.bin") && err.contains("4 bytes where the manifest says 10"),
            "{err}"
        );
        let mut flipped = bytes.clone();
        flipped[3] ^= 1;
        std::fs::write(dir.join("a.bin"), &flipped).unwrap();
        let err = read_verified(&dir, &manifest, "a.bin")
            .unwrap_err()
            .to_string();
        assert!(err.contains("a.bin") && err.contains("CRC-32"), "{err}");
        let err = read_verified(&dir, &manifest, "b.bin")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not listed in the manifest"), "{err}");
        let err = read_manifest(&dir).unwrap_err().to_string();
        assert!(
            err.contains("manifest.json") && err.contains("missing"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

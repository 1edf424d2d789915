//! Loading a checkpoint: [`load_checkpoint`] checks the manifest's algorithm and architecture,
//! verifies every file against its length and CRC-32 ([`read_verified`]) and loads the state,
//! falling back to the previous checkpoint when the current one is damaged;
//! [`load_checkpoint_policy`] reads only the policy (for an actor, `eval` and `export`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use burn::tensor::backend::Backend;
use serde::de::DeserializeOwned;

use super::format::{
    decode_resume, previous, Manifest, ResumeState, CHECKPOINT_FORMAT, CHECKPOINT_MANIFEST,
    CHECKPOINT_POLICY, CHECKPOINT_WEIGHTS, MODEL, OPTIM, RESUME, STATE,
};
use super::Checkpointed;
use crate::backend::Cpu;
use crate::policy::{init_policy, Policy, PolicyConfig};
use crate::weights::{check_finite, from_blob, layout, layout_hash, to_blob};

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

/// Loads the checkpoint `dir` (falling back to `dir.old`, see the [module docs](super)) into
/// `learner`, after checking that it was written for `algo` and `policy` (the backend may
/// differ). `Ok(None)`: neither exists (the run was stopped before its first checkpoint).
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
    let config: PolicyConfig = crate::actor_args::policy_from_json(&read(CHECKPOINT_POLICY)?)
        .with_context(|| format!("parsing {}", dir.join(CHECKPOINT_POLICY).display()))?;
    let blob = read(CHECKPOINT_WEIGHTS)?;
    from_blob(init_policy(&config, 0)?, &blob)
        .with_context(|| format!("loading {}", dir.join(CHECKPOINT_WEIGHTS).display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::tests::temp;
    use crate::checkpoint::FileEntry;

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

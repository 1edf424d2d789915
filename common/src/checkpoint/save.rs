//! Writing a checkpoint ([`save_checkpoint`]) or a policy-only checkpoint directory
//! ([`save_policy`]): every file into `<dir>.tmp/`, fsynced, the manifest last, then put in
//! place of `<dir>` (which becomes `<dir>.old`), with the fault-injection point
//! `RECUR_FAULT_CHECKPOINT` after each filesystem step (see the [module docs](super)).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use burn::tensor::backend::Backend;
use serde::Serialize;

use super::durable::{parent_of, sibling, sync_dir, write_synced};
use super::format::{
    previous, FileEntry, Manifest, ResumeState, CHECKPOINT_FORMAT, CHECKPOINT_MANIFEST,
    CHECKPOINT_POLICY, CHECKPOINT_WEIGHTS, MODEL, OPTIM, RESUME, STATE,
};
use super::Checkpointed;
use crate::policy::Policy;
use crate::weights::{check_finite, layout, layout_hash, to_blob};

/// Filesystem steps of one checkpoint write (the fault-injection points):
/// 1 `checkpoint.tmp/` created; 2-8 model.bin, optim.bin, weights.bin, policy.json,
/// state.json, resume.bin, manifest.json written and fsynced; 9 `checkpoint.tmp/` fsynced;
/// 10 `checkpoint.old/` removed; 11 `checkpoint/` renamed to `checkpoint.old/`;
/// 12 `checkpoint.tmp/` renamed to `checkpoint/`; 13 the parent directory fsynced.
/// Steps 10 and 11 happen only when a `checkpoint/` exists.
pub const CHECKPOINT_STEPS: u32 = 13;

static SAVES: AtomicU64 = AtomicU64::new(0);

/// The fault-injection point after step `step` of save number `save` (see the
/// [module docs](super)).
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

/// Writes the checkpoint directory `dir` crash-safely (see the [module docs](super)). `algo`
/// names the algorithm whose state it holds. Refuses weights that are not finite (nothing is
/// written).
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

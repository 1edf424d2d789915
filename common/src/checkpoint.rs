//! The checkpoint directory: what `recur-learner train` and `replay` write (atomically) and
//! what a resumed run and `recur-actor --checkpoint` read.
//!
//! ```text
//! checkpoint/
//!   model.bin     the model record (burn, full precision)
//!   optim.bin     the optimizer state
//!   weights.bin   the policy's weight blob (crate::weights), with its version
//!   policy.json   the PolicyConfig
//!   state.json    the run's counters
//! ```

use std::path::Path;

use anyhow::Context;
use burn::tensor::backend::Backend;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::backend::Cpu;
use crate::policy::{Policy, PolicyConfig};
use crate::rollout::init_policy;
use crate::weights::{from_blob, to_blob};

/// The files of a checkpoint directory an actor can run from.
pub const CHECKPOINT_POLICY: &str = "policy.json";
pub const CHECKPOINT_WEIGHTS: &str = "weights.bin";

/// What a checkpoint saves of a learner: the policy it trains and its model and optimizer
/// state as bytes.
pub trait Checkpointed<B: Backend> {
    /// The policy under training.
    fn model(&self) -> &Policy<B>;
    /// The model record and the optimizer state.
    fn save_state(&self) -> anyhow::Result<(Vec<u8>, Vec<u8>)>;
    /// Restores what [`save_state`](Self::save_state) wrote.
    fn load_state(&mut self, model: Vec<u8>, optim: Vec<u8>) -> anyhow::Result<()>;
}

/// Writes the checkpoint directory atomically (a new directory renamed over the old one).
pub fn save_checkpoint<B: Backend, S: Serialize>(
    dir: &Path,
    learner: &(impl Checkpointed<B> + ?Sized),
    state: &S,
    version: u64,
) -> anyhow::Result<()> {
    let tmp = dir.with_extension("tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    let (model, optim) = learner.save_state()?;
    std::fs::write(tmp.join("model.bin"), model)?;
    std::fs::write(tmp.join("optim.bin"), optim)?;
    std::fs::write(
        tmp.join(CHECKPOINT_WEIGHTS),
        to_blob(learner.model(), version),
    )?;
    std::fs::write(
        tmp.join(CHECKPOINT_POLICY),
        serde_json::to_string_pretty(learner.model().config())? + "\n",
    )?;
    std::fs::write(
        tmp.join("state.json"),
        serde_json::to_string_pretty(state)? + "\n",
    )?;
    let old = dir.with_extension("old");
    let _ = std::fs::remove_dir_all(&old);
    if dir.exists() {
        std::fs::rename(dir, &old)?;
    }
    std::fs::rename(&tmp, dir)?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(())
}

/// Loads a checkpoint into `learner`; returns the counters.
pub fn load_checkpoint<B: Backend, S: DeserializeOwned>(
    dir: &Path,
    learner: &mut (impl Checkpointed<B> + ?Sized),
) -> anyhow::Result<S> {
    let read = |name: &str| {
        std::fs::read(dir.join(name))
            .with_context(|| format!("reading {}", dir.join(name).display()))
    };
    let state: S = serde_json::from_slice(&read("state.json")?)?;
    learner.load_state(read("model.bin")?, read("optim.bin")?)?;
    Ok(state)
}

/// Loads the policy of a checkpoint: `dir` is a checkpoint directory (`policy.json` and
/// `weights.bin`, as written by `recur-learner train` and `replay`) or a run directory holding
/// `checkpoint/`. Returns the policy and the weights' version.
pub fn load_checkpoint_policy(dir: &Path) -> anyhow::Result<(Policy<Cpu>, u64)> {
    let dir = if dir.join("checkpoint").join(CHECKPOINT_WEIGHTS).exists() {
        dir.join("checkpoint")
    } else {
        dir.to_path_buf()
    };
    let config_path = dir.join(CHECKPOINT_POLICY);
    let text = std::fs::read_to_string(&config_path).with_context(|| {
        format!(
            "reading {} (a checkpoint directory holds {CHECKPOINT_POLICY} and {CHECKPOINT_WEIGHTS})",
            config_path.display()
        )
    })?;
    let config: PolicyConfig = serde_json::from_str(&text)
        .with_context(|| format!("parsing {}", config_path.display()))?;
    let policy = init_policy(&config, 0)?;
    let weights_path = dir.join(CHECKPOINT_WEIGHTS);
    let blob = std::fs::read(&weights_path)
        .with_context(|| format!("reading {}", weights_path.display()))?;
    let (policy, version) =
        from_blob(policy, &blob).with_context(|| format!("loading {}", weights_path.display()))?;
    Ok((policy, version))
}

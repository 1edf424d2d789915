//! A training run over several learner ranks ([`crate::ranks`]): what each rank trains, how the
//! ranks start from one state, and how they agree after each update so that they stay one run.
//!
//! **Batch sizes are global**: `run.actors`, `ppo.frames_per_update` and `ppo.num_slices` are
//! the whole group's and each rank takes `1/N` of them (each must divide by N), so one config
//! means the same training at any N: a minibatch of `num_slices` slices is `num_slices / N`
//! on each rank, whose loss divides by the whole minibatch's count of steps (advantages
//! normalised over it too), so that the all-reduce's sum of their gradients is the gradient of
//! the whole minibatch. `run.frames` counts every rank's frames.
//!
//! Rank 0 owns the run directory; the other ranks run in a scratch directory of their own (their
//! shared-memory names, nothing a user reads) and write nothing beside rank 0's.

use anyhow::Context;
use burn::tensor::backend::AutodiffBackend;
use common::hash::fnv1a;

use super::intake::TrainState;
use crate::algo::optim::{decode, encode};
use crate::algo::Learner;
use crate::config::{Algo, TrainConfig};
use crate::ranks::{self, Rank};

/// Every how many updates the ranks compare a hash of their weights.
pub const WEIGHT_CHECK_EVERY: u64 = 10;

/// The config rank `rank` trains with: `config` itself for one rank; for several, its share of
/// the global batch sizes and a seed of its own (its actors' environments and its sampler
/// differ from every other rank's). An error names the key that cannot be split.
pub fn rank_config(config: &TrainConfig, rank: Rank) -> anyhow::Result<TrainConfig> {
    let n = rank.size;
    let mut local = config.clone();
    if n == 1 {
        return Ok(local);
    }
    anyhow::ensure!(
        config.run.algo == Algo::Ppo,
        "run.algo = {:?}: only PPO trains on several learner ranks ({n} were started)",
        config.run.algo.name()
    );
    if let Some(listen) = &config.run.listen {
        anyhow::bail!(
            "run.listen = {listen:?} on {n} learner ranks: in this version a group of ranks runs \
             local actors only (each rank its share of run.actors); start one learner to take \
             remote actors"
        );
    }
    let split = |key: &str, value: usize| -> anyhow::Result<usize> {
        anyhow::ensure!(
            value.is_multiple_of(n),
            "{key} = {value} does not divide over {n} learner ranks: it is the whole group's \
             (each rank takes 1/{n}); make it a multiple of {n}"
        );
        Ok(value / n)
    };
    let actors = config
        .run
        .actors
        .unwrap_or_else(crate::actors::supervisor::default_actor_count);
    local.run.actors = Some(split("run.actors", actors as usize)? as u32);
    if let Some(ppo) = local.ppo.as_mut() {
        ppo.frames_per_update = split("ppo.frames_per_update", ppo.frames_per_update)?;
        ppo.num_slices = split("ppo.num_slices", ppo.num_slices)?;
    }
    local.run.seed = config.run.seed.wrapping_add((rank.rank as u64) << 40);
    if !rank.is_root() {
        local.eval = None;
    }
    Ok(local)
}

/// Starts every rank from rank 0's learner and counters (a new run's initial weights or the
/// resumed checkpoint), after checking that every rank resolved the same config.
pub fn share_start<B: AutodiffBackend>(
    config: &TrainConfig,
    learner: &mut Learner<B>,
    state: &mut TrainState,
) -> anyhow::Result<()> {
    if ranks::world().size == 1 {
        return Ok(());
    }
    ranks::check_same("resolved config", fnv1a(config.to_toml().bytes()))?;
    let mut bytes = Vec::new();
    if ranks::world().is_root() {
        let (model, optim) = learner.save_state()?;
        bytes = encode(&(model, optim, learner.host_state(), &*state));
    }
    ranks::broadcast(&mut bytes);
    if !ranks::world().is_root() {
        let (model, optim, host, root_state): (Vec<u8>, Vec<u8>, Vec<u8>, TrainState) =
            decode(&bytes).context("rank 0's learner state")?;
        learner.load_state(model, optim)?;
        learner.load_host_state(&host)?;
        *state = root_state;
    }
    Ok(())
}

/// What the ranks agree on before each update: the frames every rank took in since the last
/// agreement (summed into the run's count, which the schedules' progress reads) and whether
/// any rank wishes to stop (`wish`: `Some(by_request)`, a signal or operator `true`, the time
/// limit or the target `false`), so that all leave the loop after the same update. Returns the
/// agreed stop, `None` to go on; for one rank, always `None` (its loop stops on its own).
pub fn agree(state: &mut TrainState, agreed: &mut u64, wish: Option<bool>) -> Option<bool> {
    if ranks::world().size == 1 {
        *agreed = state.frames;
        return None;
    }
    let mut sums = [
        state.frames - *agreed,
        u64::from(wish.is_some()),
        u64::from(wish == Some(true)),
    ];
    ranks::all_reduce_sum(&mut sums);
    state.frames = *agreed + sums[0];
    *agreed = state.frames;
    (sums[1] > 0).then_some(sums[2] > 0)
}

/// Logs the weights this rank ends with (the hash of `blob()`, made only then), for several
/// ranks: every rank's line names the same hash (the integration tests compare them).
pub fn log_final(blob: impl FnOnce() -> Vec<u8>) {
    if ranks::world().size > 1 {
        let hash = fnv1a(blob());
        tracing::info!("{}: final weights {hash:016x}", ranks::world());
    }
}

/// Checks, every [`WEIGHT_CHECK_EVERY`] updates, that every rank holds the same weights
/// (`blob`, the published weights); a rank that diverged is an error naming it and the update.
pub fn check_weights(updates: u64, blob: &[u8]) -> anyhow::Result<()> {
    if ranks::world().size == 1 || !updates.is_multiple_of(WEIGHT_CHECK_EVERY) {
        return Ok(());
    }
    ranks::check_same(
        &format!("weights after update {updates}"),
        fnv1a(blob.iter().copied()),
    )
}

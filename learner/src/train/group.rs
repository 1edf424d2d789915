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
use common::checkpoint::ResumeState;
use common::hash::fnv1a;

use super::intake::{ReturnMeans, TrainState};
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
        local.run.listen = Some(rank_listen(listen, rank)?);
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

/// Where rank `rank` listens for remote actors when the run listens on `listen`: the same host,
/// port `PORT + rank` (port 0: a free port each, logged). Rank `k` takes the remote actors whose
/// ids equal `k` modulo the group's size (the TCP server refuses others, naming their rank).
pub fn rank_listen(listen: &str, rank: Rank) -> anyhow::Result<String> {
    let bad = || {
        anyhow::anyhow!(
            "run.listen = {listen:?}: expected \"HOST:PORT\" (each learner rank k listens on \
             PORT + k)"
        )
    };
    let (host, port) = listen.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    if port == 0 {
        return Ok(listen.to_string());
    }
    let mine = u16::try_from(port as usize + rank.rank).map_err(|_| {
        anyhow::anyhow!(
            "run.listen = {listen:?}: learner rank {} of {} would listen on port {port} + {} \
             > 65535; pick a lower port",
            rank.rank,
            rank.size,
            rank.rank
        )
    })?;
    Ok(format!("{host}:{mine}"))
}

/// Rank 0's run token and TLS identity on every rank, so that a remote actor holding the run's
/// token file (`RUN_DIR/token`, with the certificate's fingerprint) can dial any rank: rank 0
/// makes them in the run directory (or keeps a resumed run's) as a single learner does, and the
/// other ranks write them into their scratch directories (`names`), where their transports
/// find them. Nothing for a run that does not listen, or for one rank.
pub fn share_remote_identity(
    config: &TrainConfig,
    names: &crate::run::dir::RunNames,
) -> anyhow::Result<()> {
    let rank = ranks::world();
    let Some(listen) = config.run.listen.as_deref() else {
        return Ok(());
    };
    if rank.size == 1 {
        return Ok(());
    }
    const FILES: [&str; 3] = ["token", "tls-cert.der", "tls-key.der"];
    let mut bytes = Vec::new();
    if rank.is_root() {
        let tls =
            (config.run.tls.resolve(listen)).map_err(|e| anyhow::anyhow!("`run.listen`: {e}"))?;
        let fingerprint = match tls {
            true => Some(common::tls::Fingerprint::of(
                &names.tls_identity()?.cert_der,
            )),
            false => None,
        };
        names.token(fingerprint)?;
        let files: Vec<Option<Vec<u8>>> = (FILES.iter())
            .map(|f| std::fs::read(names.path().join(f)).ok())
            .collect();
        bytes = encode(&files);
    }
    ranks::broadcast(&mut bytes)?;
    if !rank.is_root() {
        let files: Vec<Option<Vec<u8>>> = decode(&bytes).context("rank 0's run token")?;
        for (name, file) in FILES.iter().zip(files) {
            if let Some(file) = file {
                common::checkpoint::write_atomic(&names.path().join(name), &file)?;
            }
        }
    }
    Ok(())
}

/// Starts every rank from rank 0's learner, counters and resume state (a new run's initial
/// weights, or the checkpoint it resumed), after checking that every rank resolved the same
/// config. A resumed checkpoint (`state.world_size` > 0) must have been written by as many
/// ranks as run now (an error naming both, on every rank; `run_dir` is the run's): each rank
/// then continues its own actors' saved states and episodes in flight (`resumed` keeps those of
/// actors `actors`) and its own algorithm host state (`state.rank_hosts`), so that a sync-mode
/// group resumes exactly.
pub fn share_start<B: AutodiffBackend>(
    config: &TrainConfig,
    run_dir: &std::path::Path,
    learner: &mut Learner<B>,
    state: &mut TrainState,
    resumed: &mut ResumeState,
    actors: std::ops::Range<u32>,
) -> anyhow::Result<()> {
    let rank = ranks::world();
    if rank.size > 1 {
        ranks::check_same("resolved config", fnv1a(config.to_toml().bytes()))?;
        let mut bytes = Vec::new();
        if rank.is_root() {
            let (model, optim) = learner.save_state()?;
            bytes = encode(&(model, optim, learner.host_state(), &*state, &*resumed));
        }
        ranks::broadcast(&mut bytes)?;
        if !rank.is_root() {
            type Root = (Vec<u8>, Vec<u8>, Vec<u8>, TrainState, ResumeState);
            let (model, optim, host, root_state, root_resumed): Root =
                decode(&bytes).context("rank 0's learner state")?;
            learner.load_state(model, optim)?;
            // A new run's rank keeps its own (its sampler seeded apart from rank 0's).
            match root_state.rank_hosts.get(rank.rank - 1) {
                Some(own) => learner.load_host_state(own)?,
                None if root_state.updates > 0 => learner.load_host_state(&host)?,
                None => {}
            }
            *state = root_state;
            *resumed = root_resumed;
        }
        let own = |actor: u32| actors.contains(&actor);
        resumed.actors.retain(|(actor, _)| own(*actor));
        resumed
            .open_returns
            .retain(|(traj, _)| own(((*traj as u64 >> 52) & 0x7ff) as u32));
    }
    let saved = state.world_size;
    anyhow::ensure!(
        saved == 0 || saved == rank.size,
        "resuming {}: its checkpoint was written by {saved} learner rank{} (world_size = {saved} \
         in checkpoint/state.json) and {} {} started: resume with as many ranks (`mpirun -n \
         {saved}`, or one process for 1): each rank continues its own actors' and sampler's \
         state, which another number of ranks cannot split",
        run_dir.display(),
        if saved == 1 { "" } else { "s" },
        rank.size,
        if rank.size == 1 { "was" } else { "were" },
    );
    state.world_size = rank.size;
    Ok(())
}

/// Every rank's part of a checkpoint, on rank 0: the group's resume state (every rank's actors'
/// saved states and episodes in flight; actor and trajectory ids are distinct across ranks) and
/// ranks 1.. 's algorithm host states (`host`: this rank's), for [`TrainState::rank_hosts`].
/// `None` on the other ranks; for one rank, `resume` itself. A lost rank is an error naming it.
pub fn gather_resume(
    resume: ResumeState,
    host: Vec<u8>,
) -> anyhow::Result<Option<(ResumeState, Vec<Vec<u8>>)>> {
    let rank = ranks::world();
    if rank.size == 1 {
        return Ok(Some((resume, Vec::new())));
    }
    let host = if rank.is_root() { Vec::new() } else { host };
    let parts = ranks::gather(encode(&(host, resume)))?;
    if !rank.is_root() {
        return Ok(None);
    }
    let (mut all, mut hosts) = (ResumeState::default(), Vec::new());
    for (r, part) in parts.iter().enumerate() {
        let (host, part): (Vec<u8>, ResumeState) =
            decode(part).with_context(|| format!("rank {r}'s resume state"))?;
        all.actors.extend(part.actors);
        all.open_returns.extend(part.open_returns);
        if r > 0 {
            hosts.push(host);
        }
    }
    all.actors.sort_by_key(|a| a.0);
    all.open_returns.sort_by_key(|o| o.0);
    Ok(Some((all, hosts)))
}

/// The run's counts as the ranks last agreed on them ([`agree`]), and this rank's own share.
#[derive(Clone, Copy, Debug, Default)]
pub struct Agreed {
    /// Every rank's frames and finished episodes (the run's `frames` and `episodes`).
    pub frames: u64,
    pub episodes: u64,
    /// This rank's own part of them (taken in by its actors in this process).
    pub own_frames: u64,
    pub own_episodes: u64,
}

impl Agreed {
    /// The counts a run starts from (a resumed run's are the group's).
    pub fn at(state: &TrainState) -> Agreed {
        Agreed {
            frames: state.frames,
            episodes: state.episodes,
            ..Agreed::default()
        }
    }
}

/// What the ranks agree on before each update: the frames and finished episodes every rank took
/// in since the last agreement (summed into the run's counts: the schedules' progress reads the
/// frames, `metrics.csv` shows both) and whether any rank wishes to stop (`wish`:
/// `Some(by_request)`, a signal or operator `true`, the time limit or the target `false`), so
/// that all leave the loop after the same update. Returns the agreed stop, `None` to go on; for
/// one rank, always `None` (its loop stops on its own). A lost rank is an error naming it.
pub fn agree(
    state: &mut TrainState,
    agreed: &mut Agreed,
    wish: Option<bool>,
) -> anyhow::Result<Option<bool>> {
    let own = [
        state.frames - agreed.frames,
        state.episodes - agreed.episodes,
    ];
    agreed.own_frames += own[0];
    agreed.own_episodes += own[1];
    if ranks::world().size == 1 {
        (agreed.frames, agreed.episodes) = (state.frames, state.episodes);
        return Ok(None);
    }
    let mut sums = [
        own[0],
        own[1],
        u64::from(wish.is_some()),
        u64::from(wish == Some(true)),
    ];
    ranks::all_reduce_sum(&mut sums)?;
    state.frames = agreed.frames + sums[0];
    state.episodes = agreed.episodes + sums[1];
    (agreed.frames, agreed.episodes) = (state.frames, state.episodes);
    Ok((sums[2] > 0).then_some(sums[3] > 0))
}

/// What an update's report shows of every rank (one all-reduce; for one rank, its own): the
/// mean returns (`means`: this rank's) averaged over the ranks that have finished episodes,
/// `full` when every rank has a full window; the policy lag averaged over the ranks; the
/// dropped chunks summed. A lost rank is an error naming it.
pub fn report_over_ranks(
    means: ReturnMeans,
    lag: f64,
    dropped: u64,
) -> anyhow::Result<(ReturnMeans, f64, u64)> {
    let n = ranks::world().size;
    if n == 1 {
        return Ok((means, lag, dropped));
    }
    let counted = |x: f64| if x.is_finite() { [x, 1.0] } else { [0.0, 0.0] };
    let [m, has_m] = counted(means.mean);
    let [m100, has_m100] = counted(means.mean_100);
    let mut sums = [
        m,
        has_m,
        m100,
        has_m100,
        f64::from(u8::from(means.full)),
        f64::from(u8::from(means.full_100)),
        lag,
        dropped as f64,
    ];
    ranks::all_reduce_sum(&mut sums)?;
    let mean = |sum: f64, count: f64| if count > 0.0 { sum / count } else { f64::NAN };
    let group = ReturnMeans {
        mean: mean(sums[0], sums[1]),
        mean_100: mean(sums[2], sums[3]),
        full: sums[4] as usize == n,
        full_100: sums[5] as usize == n,
    };
    Ok((group, sums[6] / n as f64, sums[7] as u64))
}

/// Logs the weights this rank ends with (the hash of `blob()`, made only then) and its own
/// share of the run's frames and episodes, for several ranks: every rank's line names the same
/// hash (the integration tests compare them, and sum the shares).
pub fn log_final(agreed: &Agreed, blob: impl FnOnce() -> Vec<u8>) {
    if ranks::world().size > 1 {
        let hash = fnv1a(blob());
        let rank = ranks::world();
        tracing::info!("{rank}: final weights {hash:016x}");
        tracing::info!(
            "{rank}: took {} frames and {} episodes of the run's",
            agreed.own_frames,
            agreed.own_episodes
        );
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actors::transport::tcp::wrong_rank;

    fn rank(rank: usize, size: usize) -> Rank {
        Rank { rank, size }
    }

    #[test]
    fn each_rank_listens_on_its_own_port_and_takes_its_own_ids() {
        assert_eq!(
            rank_listen("0.0.0.0:7070", rank(0, 4)).unwrap(),
            "0.0.0.0:7070"
        );
        assert_eq!(
            rank_listen("0.0.0.0:7070", rank(3, 4)).unwrap(),
            "0.0.0.0:7073"
        );
        assert_eq!(rank_listen("[::1]:0", rank(1, 2)).unwrap(), "[::1]:0");
        let err = rank_listen("host:65535", rank(1, 2))
            .unwrap_err()
            .to_string();
        assert!(err.contains("run.listen") && err.contains("65535"), "{err}");
        let err = rank_listen("no-port", rank(1, 2)).unwrap_err().to_string();
        assert!(err.contains("run.listen = \"no-port\""), "{err}");
        // Ids equal to the rank modulo the group's size; any id on a single learner.
        assert_eq!(wrong_rank(9, Rank::SINGLE), None);
        assert_eq!(wrong_rank(6, rank(2, 4)), None);
        let why = wrong_rank(7, rank(1, 4)).unwrap();
        assert!(why.contains("dial rank 3") && why.contains("+ 2"), "{why}");
        let why = wrong_rank(4, rank(1, 4)).unwrap();
        assert!(why.contains("dial rank 0") && why.contains("- 1"), "{why}");
    }
}

//! `recur-learner replay`: learner-only training from a recorded dataset. No actor processes,
//! no shared memory: the dataset goes into the replay storage, the SliceSampler draws slices,
//! the algorithm's recurrent-mode loss trains the network, and a local actor evaluates the
//! greedy policy in-process every `eval_every` updates. The run directory gets `config.toml`,
//! `metrics.csv` (`frames` = steps trained on, `mean_return` = the latest evaluation),
//! `learning_curve.png`, `checkpoint/` and `summary.json`.
//!
//! **On several learner ranks** (`mpirun -n N recur-learner replay`, PPO and BC): rank `k`
//! reads the dataset's chunks `k, k + N, k + 2N, ...` (its shard, [`shard_chunks`]), trains
//! with its share of the global batch sizes (`ppo.frames_per_update`, `ppo.num_slices`,
//! `bc.num_slices` divided by N, as `train`'s ranks) and its own sampler seed, and every
//! minibatch's gradient is summed over the ranks before clipping and Adam, each rank's loss
//! divided by the group's count of steps (advantages and observation statistics normalised
//! over the group's minibatch too), so that the ranks step to one process's weights on the
//! concatenated minibatch. `--as-ranks N` is that one process (the tests' reference). Rank 0
//! owns the run directory and evaluates; the others run in a scratch directory of their own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;
use common::dataset::{read_dataset, Dataset};
use common::envs::Registry;
use common::hash::fnv1a;
use common::weights::to_blob;
use serde::{Deserialize, Serialize};

use crate::algo::optim::{decode, encode};
use crate::algo::{self, Learner, LearnerSpec};
use crate::config::{fit_policy_spec, Algo, ReplayConfig};
use crate::eval::{env_registry, evaluate, host_policy, Evaluation};
use crate::ranks::{self, Rank};
use crate::run::metrics::{MetricsRow, REPLAY_AXES};
use crate::run::{profile, Run, RunOptions};
use common::policy::PolicyConfig;

#[derive(Clone, Debug)]
pub struct ReplayOptions {
    pub dataset: PathBuf,
    pub config: ReplayConfig,
    pub run_dir: PathBuf,
    pub progress: bool,
    pub max_seconds: Option<f64>,
    /// Train in one process on the minibatches this many learner ranks would take together
    /// (`--as-ranks N`; a developer and test option: the reference a group is held to).
    pub as_ranks: Option<usize>,
}

/// The outcome of a replay run (`summary.json`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ReplaySummary {
    pub env: String,
    pub algo: String,
    pub dataset: String,
    pub dataset_frames: u64,
    pub dataset_chunks: usize,
    /// Bytes after the dataset's last complete chunk (a recording cut short).
    pub ignored_tail_bytes: usize,
    pub updates: u64,
    /// Steps the losses were computed on (padding included).
    pub trained_frames: u64,
    pub seconds: f64,
    /// Training seconds, evaluations excluded.
    pub train_seconds: f64,
    pub updates_per_s: f64,
    pub trained_frames_per_s: f64,
    /// `(updates, mean greedy return)` of every evaluation.
    pub evaluations: Vec<(u64, f64)>,
    pub final_eval_return: f64,
    pub best_eval_return: f64,
    pub target_return: Option<f64>,
    pub updates_to_target: Option<u64>,
    pub seconds_to_target: Option<f64>,
    /// Learner ranks that trained the run (1: one process).
    #[serde(default = "one")]
    pub world_size: usize,
    /// `--as-ranks N`: the ranks one process trained as (1 without it).
    #[serde(default = "one")]
    pub as_ranks: usize,
    /// Trainable parameters (a gradient all-reduce sums as many `f32`s).
    #[serde(default)]
    pub parameters: usize,
    /// Rank 0's seconds per phase (the training profile: `minibatch`, `ranks.all_reduce`,
    /// ...), evaluations excluded.
    #[serde(default)]
    pub profile: BTreeMap<String, f64>,
}

fn one() -> usize {
    1
}

/// The chunks (dataset indices, in recording order) of each of `n` shards: shard `k` takes
/// chunks `k, k + n, k + 2n, ...` (round-robin), so that the shards differ by at most one
/// chunk. An error where a shard would be empty.
pub fn shard_chunks(chunks: usize, n: usize) -> anyhow::Result<Vec<Vec<usize>>> {
    anyhow::ensure!(
        chunks >= n,
        "the dataset holds {chunks} chunks, fewer than the {n} learner ranks: each rank reads a \
         shard of at least one chunk"
    );
    Ok((0..n).map(|k| (k..chunks).step_by(n).collect()).collect())
}

/// The config rank `rank` of `n` trains with (`config` itself for one): its share of the
/// global batch sizes and its own seed; an error names the setting that keeps the run from
/// `n` ranks. `chunk_frames`: the dataset's frames per chunk.
pub fn rank_config(
    config: &ReplayConfig,
    rank: Rank,
    chunk_frames: usize,
) -> anyhow::Result<ReplayConfig> {
    let n = rank.size;
    let mut local = config.clone();
    if n == 1 {
        return Ok(local);
    }
    let split = |key: &str, value: usize| -> anyhow::Result<usize> {
        anyhow::ensure!(
            value.is_multiple_of(n),
            "{key} = {value} does not divide over {n} learner ranks: it is the whole group's \
             (each rank takes 1/{n}); make it a multiple of {n}"
        );
        Ok(value / n)
    };
    match config.replay.algo {
        Algo::Ppo => {
            let ppo = local.ppo.as_mut().expect("a validated [ppo] section");
            ppo.frames_per_update = split("ppo.frames_per_update", ppo.frames_per_update)?;
            ppo.num_slices = split("ppo.num_slices", ppo.num_slices)?;
            anyhow::ensure!(
                ppo.frames_per_update.is_multiple_of(chunk_frames),
                "ppo.frames_per_update = {}: each of {n} learner ranks takes {} frames per \
                 update, not a whole number of the dataset's chunks ({chunk_frames} frames); \
                 make it a multiple of {}",
                config.ppo.as_ref().map_or(0, |p| p.frames_per_update),
                ppo.frames_per_update,
                n * chunk_frames
            );
        }
        Algo::Bc => {
            let bc = local.bc.as_mut().expect("a validated [bc] section");
            bc.num_slices = split("bc.num_slices", bc.num_slices)?;
        }
        other => anyhow::bail!(
            "replay.algo = {:?} on {n} learner ranks: only PPO and BC replay on several ranks; \
             start one process",
            other.name()
        ),
    }
    local.replay.seed = ranks::rank_seed(config.replay.seed, rank.rank);
    Ok(local)
}

/// Runs a learner-only replay training on `replay.device`.
pub fn replay(opts: &ReplayOptions) -> anyhow::Result<ReplaySummary> {
    on_train_device!(
        ranks::rank_device(opts.config.replay.device),
        replay_on(opts)
    )
}

/// A replay training with the learner on `device`.
fn replay_on<B: AutodiffBackend>(
    opts: &ReplayOptions,
    device: &B::Device,
) -> anyhow::Result<ReplaySummary> {
    // Setup: the run (signals: a stop ends it cleanly with a final evaluation and checkpoint;
    // several ranks: rank 0's, the others' in a scratch directory), the dataset and this
    // process's shards of it, the environment exactly as recorded (gymnasium: the dataset's
    // imports and kwargs) for the policy's sizes and the evaluations, the learner (several
    // ranks: rank 0's weights on every rank).
    let (config, r) = (&opts.config, &opts.config.replay);
    let rank = ranks::world();
    let sim = opts.as_ranks.unwrap_or(1);
    anyhow::ensure!(
        sim >= 1 && (sim == 1 || rank.size == 1),
        "--as-ranks {sim}: one process trains as N >= 1 ranks, and not under mpirun ({rank})"
    );
    let scratch = (!rank.is_root()).then(tempfile::tempdir).transpose()?;
    let run_dir = scratch
        .as_ref()
        .map_or(opts.run_dir.clone(), |d| d.path().into());
    let mut run = Run::open(RunOptions {
        path: &run_dir,
        resume: false,
        progress: opts.progress && rank.is_root(),
        total: r.updates,
        unit: "updates",
        max_seconds: opts.max_seconds,
        checkpoint_every: r.checkpoint_every,
    })?;
    let mut data = load_dataset(&opts.dataset)?;
    let mut summary = ReplaySummary::new(opts, &data);
    let schema = &data.meta.schema;
    let chunk_frames = schema.envs * schema.steps;
    let n = rank.size.max(sim);
    let mut shards = shard_chunks(data.chunks.len(), n)?;
    // The shards this process trains on: every one, in rank order (one process, --as-ranks),
    // or its own alone (a rank keeps only its shard's chunks).
    if rank.size > 1 {
        let mine = std::mem::take(&mut shards[rank.rank]);
        let all = std::mem::take(&mut data.chunks);
        data.chunks = (all.into_iter().enumerate())
            .filter(|(i, _)| mine.binary_search(i).is_ok())
            .map(|(_, c)| c)
            .collect();
        shards = vec![(0..data.chunks.len()).collect()];
    }
    let held: Vec<&Vec<usize>> = shards.iter().collect();
    let local = rank_config(config, rank, chunk_frames)?;
    if sim > 1 {
        rank_config(config, Rank { rank: 0, size: sim }, chunk_frames)?;
    }
    let registry = env_registry(
        &data.meta.env_imports,
        data.meta.env_kwargs.clone(),
        data.meta.env_keys.clone(),
    );
    let held_frames: Vec<usize> = held.iter().map(|s| s.len() * chunk_frames).collect();
    let (mut learner, pc) =
        replay_learner::<B>(&local, &data, &registry, held_frames.iter().sum(), device)?;
    if sim > 1 {
        learner.as_ranks(sim, &held_frames)?;
    }
    if r.algo != Algo::Ppo {
        // Off-policy storage: the whole shard (--as-ranks: shard after shard) now.
        for shard in &held {
            shard
                .iter()
                .for_each(|&c| learner.add_chunk(&data.chunks[c]));
        }
    }
    share_start(config, &mut learner)?;
    run.write_config(&config.to_toml())?;
    run.start_metrics(None, r.tensorboard, &config.to_toml())?;
    summary.world_size = rank.size;
    summary.as_ranks = sim;
    summary.parameters = burn::module::Module::num_params(learner.model());
    // PPO: each held shard's next chunk, cycling through its shard in recording order; with
    // --as-ranks, each shard gives its rank's share of an update's frames.
    let mut next = vec![0usize; held.len()];
    let per_shard = config
        .ppo
        .as_ref()
        .map(|p| p.frames_per_update / sim / chunk_frames);
    let profile_at_start = profile::snapshot();
    let (mut train_s, mut reached) = (0.0f64, false);
    let (mut eval_return, mut eval_episodes) = (f64::NAN, 0u64);
    loop {
        // Several ranks leave together, after an update they agree on.
        let wish = summary.updates >= r.updates || run.stop_reason().is_some() || reached;
        if group_stops(wish)? {
            break;
        }
        let t0 = Instant::now();
        if r.algo == Algo::Ppo {
            // On-policy updates consume the dataset in recording order, cycling.
            for (k, shard) in held.iter().enumerate() {
                let mut add = |learner: &mut Learner<B>| {
                    learner.add_chunk(&data.chunks[shard[next[k]]]);
                    next[k] = (next[k] + 1) % shard.len();
                };
                match (sim, per_shard) {
                    (2.., Some(per)) => (0..per).for_each(|_| add(&mut learner)),
                    _ => {
                        while !learner.ready() {
                            add(&mut learner);
                        }
                    }
                }
            }
        }
        learner.set_progress(summary.updates as f64 / r.updates as f64);
        let stats = learner.update()?;
        train_s += t0.elapsed().as_secs_f64();
        summary.updates += 1;
        summary.trained_frames += config.algorithm().trained_steps_per_update();
        let u = summary.updates;
        check_weights(&learner, u)?;
        let eval_now = rank.is_root()
            && ((r.eval_every > 0 && u.is_multiple_of(r.eval_every)) || u == r.updates);
        if eval_now {
            let last = greedy_eval(&learner, &registry, config, &mut summary)?;
            (eval_return, eval_episodes) = (last.mean_return, eval_episodes + last.episodes as u64);
            tracing::info!(
                "update {u}: greedy return {:.1} (min {:.0}, max {:.0}) over {} episodes, loss {:.4}",
                last.mean_return, last.min_return, last.max_return, last.episodes, stats.loss
            );
        }
        let now = run.elapsed();
        let row = MetricsRow {
            frames: summary.trained_frames,
            wall_s: now,
            updates: u,
            mean_return: eval_return,
            episodes: eval_episodes,
            frames_per_s: summary.trained_frames as f64 / train_s.max(1e-9),
            mean_return_100: f64::NAN,
            ..MetricsRow::from(&stats)
        };
        let updates_per_s = u as f64 / train_s.max(1e-9);
        let message = format!(
            "loss {:.4}  greedy return {eval_return:.1}  {updates_per_s:.0} updates/s",
            stats.loss
        );
        run.report(&row, u, message)?;
        if run.checkpoint_due(u) && rank.is_root() {
            run.save_checkpoint(&*learner, r.algo.name(), &summary, Default::default(), u)?;
        }
        if let (Some(target), None) = (r.target_return, summary.updates_to_target) {
            if eval_now && eval_return >= target {
                (summary.updates_to_target, summary.seconds_to_target) = (Some(u), Some(now));
                tracing::info!(
                    "greedy return {eval_return:.1} >= {target} after {u} updates, {now:.1} s"
                );
                reached = true;
            }
        }
    }
    summary.profile = profile::snapshot()
        .into_iter()
        .map(|(k, v)| {
            let before = profile_at_start.get(&k).copied().unwrap_or(0.0);
            (k, v - before)
        })
        .collect();

    // Finish: a last evaluation of the final weights, the checkpoint, curve and summary
    // (rank 0; every rank logs the hash of its final weights).
    run.end_progress();
    if ranks::world().size > 1 {
        let hash = fnv1a(to_blob(learner.model(), 0));
        tracing::info!("{rank}: final weights {hash:016x}");
    }
    summary.timed(run.elapsed(), train_s);
    if !rank.is_root() {
        return Ok(summary);
    }
    if summary.evaluations.last().map(|e| e.0) != Some(summary.updates) {
        let last = greedy_eval(&learner, &registry, config, &mut summary)?;
        tracing::info!(
            "final greedy return {:.1} over {} episodes",
            last.mean_return,
            last.episodes
        );
    }
    summary.seconds = run.elapsed();
    let u = summary.updates;
    run.save_checkpoint(&*learner, r.algo.name(), &summary, Default::default(), u)?;
    let title = format!(
        "{} replay ({} {}-{})",
        summary.env,
        r.algo.name().to_uppercase(),
        pc.cell.name(),
        pc.hidden_size
    );
    run.finish(&title, REPLAY_AXES, r.target_return, &summary)?;
    Ok(summary)
}

/// Whether the group stops now: any rank's `wish` (its last update done, a signal, the time
/// limit, rank 0's evaluation at the target) stops every rank after the same update.
fn group_stops(wish: bool) -> Result<bool, ranks::RankLost> {
    let mut wishes = [u64::from(wish)];
    ranks::all_reduce_sum(&mut wishes)?;
    Ok(wishes[0] > 0)
}

/// Several ranks: checks that every rank resolved the same config, then starts every rank
/// from rank 0's weights and optimizer state (the samplers keep their own seeds).
fn share_start<B: AutodiffBackend>(
    config: &ReplayConfig,
    learner: &mut Learner<B>,
) -> anyhow::Result<()> {
    if ranks::world().size == 1 {
        return Ok(());
    }
    ranks::check_same("resolved config", fnv1a(config.to_toml().bytes()))?;
    let mut bytes = Vec::new();
    if ranks::world().is_root() {
        bytes = encode(&learner.save_state()?);
    }
    ranks::broadcast(&mut bytes)?;
    if !ranks::world().is_root() {
        let (model, optim): (Vec<u8>, Vec<u8>) = decode(&bytes).context("rank 0's learner")?;
        learner.load_state(model, optim)?;
    }
    Ok(())
}

/// Several ranks: every [`WEIGHT_CHECK_EVERY`] updates, checks that every rank holds the same
/// weights; a rank that diverged is an error naming it and the update.
fn check_weights<B: AutodiffBackend>(learner: &Learner<B>, updates: u64) -> anyhow::Result<()> {
    if ranks::world().size == 1 || !updates.is_multiple_of(WEIGHT_CHECK_EVERY) {
        return Ok(());
    }
    let hash = fnv1a(to_blob(learner.model(), 0));
    ranks::check_same(&format!("weights after update {updates}"), hash)
}

/// Every how many updates replay's ranks compare a hash of their weights (as `train`'s).
const WEIGHT_CHECK_EVERY: u64 = 10;

/// The learner for `data` with `frames` frames of replay storage (off-policy algorithms: this
/// process's shards of the dataset), and its policy's architecture, fitted to the environment
/// as recorded.
fn replay_learner<B: AutodiffBackend>(
    config: &ReplayConfig,
    data: &Dataset,
    registry: &Registry,
    frames: usize,
    device: &B::Device,
) -> anyhow::Result<(Learner<B>, PolicyConfig)> {
    let (env, schema, r) = (&data.meta.env, &data.meta.schema, &config.replay);
    let spec = registry
        .spec(env)
        .with_context(|| format!("building dataset environment {env}"))?;
    let pc = fit_policy_spec(&spec, &config.policy)?;
    let algo = config.algorithm();
    let spec = LearnerSpec {
        algo: &algo,
        policy: &pc,
        schema,
        capacity: frames,
        seed: r.seed,
    };
    Ok((algo::build::<B>(&spec, device)?, pc))
}

impl ReplaySummary {
    /// A summary before the first update.
    fn new(opts: &ReplayOptions, data: &Dataset) -> Self {
        let (schema, r) = (&data.meta.schema, &opts.config.replay);
        ReplaySummary {
            env: data.meta.env.clone(),
            algo: r.algo.name().into(),
            dataset: opts.dataset.display().to_string(),
            dataset_frames: (schema.envs * schema.steps * data.chunks.len()) as u64,
            dataset_chunks: data.chunks.len(),
            ignored_tail_bytes: data.ignored_tail_bytes,
            target_return: r.target_return,
            best_eval_return: f64::NAN,
            final_eval_return: f64::NAN,
            ..Default::default()
        }
    }

    /// The run took `seconds`, `train_s` of them training.
    fn timed(&mut self, seconds: f64, train_s: f64) {
        self.seconds = seconds;
        self.train_seconds = train_s;
        self.updates_per_s = self.updates as f64 / train_s.max(1e-9);
        self.trained_frames_per_s = self.trained_frames as f64 / train_s.max(1e-9);
    }
}

/// Reads the dataset (warning about a recording cut short); refuses one without a complete
/// chunk.
fn load_dataset(path: &Path) -> anyhow::Result<Dataset> {
    let data = read_dataset(path).with_context(|| format!("reading dataset {}", path.display()))?;
    if data.ignored_tail_bytes > 0 {
        tracing::warn!(
            "dataset {}: ignored {} bytes after the last complete chunk (a recording cut short)",
            path.display(),
            data.ignored_tail_bytes
        );
    }
    if data.unindexed_chunks > 0 || data.index_records_past_data > 0 {
        tracing::warn!(
            "dataset {}: {} complete chunks without an index record, {} index records past the \
             data (a recording cut short); the chunk files were read",
            path.display(),
            data.unindexed_chunks,
            data.index_records_past_data
        );
    }
    anyhow::ensure!(
        !data.chunks.is_empty(),
        "dataset {} holds no complete chunk",
        path.display()
    );
    let schema = &data.meta.schema;
    tracing::info!(
        "dataset {}: {}, {} chunks, {} frames",
        path.display(),
        data.meta.env,
        data.chunks.len(),
        schema.envs * schema.steps * data.chunks.len()
    );
    Ok(data)
}

/// A greedy evaluation of `learner`'s policy in-process after `summary.updates` updates, on
/// the dataset's environment, noted in `summary`.
fn greedy_eval<B: AutodiffBackend>(
    learner: &Learner<B>,
    registry: &Registry,
    config: &ReplayConfig,
    summary: &mut ReplaySummary,
) -> anyhow::Result<Evaluation> {
    let (r, updates) = (&config.replay, summary.updates);
    let policy = host_policy(&learner.model().valid())?;
    let seed = r.seed ^ 0xe7a1 ^ updates;
    let eval = evaluate(policy, registry, &summary.env, r.eval_episodes, seed)?;
    summary.evaluations.push((updates, eval.mean_return));
    summary.final_eval_return = eval.mean_return;
    if summary.best_eval_return.is_nan() || eval.mean_return > summary.best_eval_return {
        summary.best_eval_return = eval.mean_return;
    }
    Ok(eval)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_take_the_chunks_round_robin_and_need_one_chunk_each() {
        assert_eq!(
            shard_chunks(7, 3).unwrap(),
            vec![vec![0, 3, 6], vec![1, 4], vec![2, 5]]
        );
        assert_eq!(shard_chunks(2, 1).unwrap(), vec![vec![0, 1]]);
        let err = shard_chunks(3, 4).unwrap_err().to_string();
        assert!(
            err.contains("3 chunks, fewer than the 4 learner ranks"),
            "{err}"
        );
    }
}

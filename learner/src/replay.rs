//! `recur-learner replay`: learner-only training from a recorded dataset. No actor processes,
//! no shared memory: the dataset goes into the replay storage, the SliceSampler draws slices,
//! the algorithm's recurrent-mode loss trains the network, and a local actor evaluates the
//! greedy policy in-process every `eval_every` updates. The run directory gets `config.toml`,
//! `metrics.csv` (`frames` = steps trained on, `mean_return` = the latest evaluation),
//! `learning_curve.png`, `checkpoint/` and `summary.json`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;
use common::dataset::{read_dataset, Dataset};
use common::envs::Registry;
use serde::{Deserialize, Serialize};

use crate::algo::{self, Learner, LearnerSpec};
use crate::config::{fit_policy_spec, Algo, ReplayConfig};
use crate::eval::{env_registry, evaluate, host_policy, Evaluation};
use crate::run::metrics::{MetricsRow, REPLAY_AXES};
use crate::run::{Run, RunOptions};
use common::policy::PolicyConfig;

#[derive(Clone, Debug)]
pub struct ReplayOptions {
    pub dataset: PathBuf,
    pub config: ReplayConfig,
    pub run_dir: PathBuf,
    pub progress: bool,
    pub max_seconds: Option<f64>,
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
}

/// Runs a learner-only replay training on `replay.device`.
pub fn replay(opts: &ReplayOptions) -> anyhow::Result<ReplaySummary> {
    on_train_device!(opts.config.replay.device, replay_on(opts))
}

/// A replay training with the learner on `device`.
fn replay_on<B: AutodiffBackend>(
    opts: &ReplayOptions,
    device: &B::Device,
) -> anyhow::Result<ReplaySummary> {
    // Setup: the run (signals: a stop ends it cleanly with a final evaluation and checkpoint),
    // the dataset, the environment exactly as recorded (gymnasium: the dataset's imports and
    // kwargs) for the policy's sizes and the evaluations, the learner.
    let (config, r) = (&opts.config, &opts.config.replay);
    let mut run = Run::open(RunOptions {
        path: &opts.run_dir,
        resume: false,
        progress: opts.progress,
        total: r.updates,
        unit: "updates",
        max_seconds: opts.max_seconds,
        checkpoint_every: r.checkpoint_every,
    })?;
    let data = load_dataset(&opts.dataset)?;
    let registry = env_registry(
        &data.meta.env_imports,
        data.meta.env_kwargs.clone(),
        data.meta.env_keys.clone(),
    );
    let (mut learner, pc) = replay_learner::<B>(config, &data, &registry, device)?;
    run.write_config(&config.to_toml())?;
    run.start_metrics(None, r.tensorboard, &config.to_toml())?;
    let mut summary = ReplaySummary::new(opts, &data);
    let (mut train_s, mut next_chunk) = (0.0f64, 0usize);
    let (mut eval_return, mut eval_episodes) = (f64::NAN, 0u64);
    while summary.updates < r.updates && run.stop_reason().is_none() {
        let t0 = Instant::now();
        if r.algo == Algo::Ppo {
            // On-policy updates consume the dataset in recording order, cycling.
            while !learner.ready() {
                learner.add_chunk(&data.chunks[next_chunk]);
                next_chunk = (next_chunk + 1) % data.chunks.len();
            }
        }
        learner.set_progress(summary.updates as f64 / r.updates as f64);
        let stats = learner.update()?;
        train_s += t0.elapsed().as_secs_f64();
        summary.updates += 1;
        summary.trained_frames += config.algorithm().trained_steps_per_update();
        let u = summary.updates;
        let eval_now = (r.eval_every > 0 && u.is_multiple_of(r.eval_every)) || u == r.updates;
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
        if run.checkpoint_due(u) {
            run.save_checkpoint(&*learner, r.algo.name(), &summary, Default::default(), u)?;
        }
        if let (Some(target), None) = (r.target_return, summary.updates_to_target) {
            if eval_now && eval_return >= target {
                (summary.updates_to_target, summary.seconds_to_target) = (Some(u), Some(now));
                tracing::info!(
                    "greedy return {eval_return:.1} >= {target} after {u} updates, {now:.1} s"
                );
                break;
            }
        }
    }

    // Finish: a last evaluation of the final weights, the checkpoint, curve and summary.
    run.end_progress();
    if summary.evaluations.last().map(|e| e.0) != Some(summary.updates) {
        let last = greedy_eval(&learner, &registry, config, &mut summary)?;
        tracing::info!(
            "final greedy return {:.1} over {} episodes",
            last.mean_return,
            last.episodes
        );
    }
    summary.timed(run.elapsed(), train_s);
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

/// The learner for `data` (off-policy algorithms get the whole dataset in their replay
/// storage now; PPO takes it in recording order as it updates), and its policy's
/// architecture, fitted to the environment as recorded.
fn replay_learner<B: AutodiffBackend>(
    config: &ReplayConfig,
    data: &Dataset,
    registry: &Registry,
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
        capacity: schema.envs * schema.steps * data.chunks.len(),
        seed: r.seed,
    };
    let mut learner = algo::build::<B>(&spec, device)?;
    if r.algo != Algo::Ppo {
        data.chunks
            .iter()
            .for_each(|chunk| learner.add_chunk(chunk));
    }
    Ok((learner, pc))
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

//! `recur-learner replay`: learner-only training from a recorded dataset. No actor processes,
//! no shared memory: the dataset goes into the replay storage, the SliceSampler draws slices,
//! the algorithm's recurrent-mode loss trains the network, and a local actor evaluates the
//! greedy policy in-process every `eval_every` updates. The run directory gets `config.toml`,
//! `metrics.csv` (`frames` = steps trained on, `mean_return` = the latest evaluation),
//! `learning_curve.png`, `checkpoint/` and `summary.json`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;
use common::checkpoint::save_checkpoint;
use common::dataset::read_dataset;
use serde::{Deserialize, Serialize};

use crate::algo::{self, LearnerSpec};
use crate::config::{Algo, ReplayConfig};
use crate::eval::{env_registry, evaluate, host_policy};
use crate::metrics::{MetricsRow, MetricsWriter, REPLAY_AXES};
use crate::policy::fit_policy_spec;
use crate::run_dir::{plot_curve, progress_bar, write_config, write_summary, RunDir};
use crate::tensorboard::TensorBoard;

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
    let config = &opts.config;
    let r = &config.replay;
    let started = Instant::now();
    // SIGINT/SIGTERM end the run cleanly (final evaluation and checkpoint); the run directory
    // is locked for the run's life, and one that holds a run is refused.
    let signals = crate::signals::install()?;
    let _run_dir = RunDir::create(&opts.run_dir, false)?;
    let data = read_dataset(&opts.dataset)
        .with_context(|| format!("reading dataset {}", opts.dataset.display()))?;
    if data.ignored_tail_bytes > 0 {
        tracing::warn!(
            "dataset {}: ignored {} bytes after the last complete chunk (a recording cut short)",
            opts.dataset.display(),
            data.ignored_tail_bytes
        );
    }
    if data.unindexed_chunks > 0 || data.index_records_past_data > 0 {
        tracing::warn!(
            "dataset {}: {} complete chunks without an index record, {} index records past the \
             data (a recording cut short); the chunk files were read",
            opts.dataset.display(),
            data.unindexed_chunks,
            data.index_records_past_data
        );
    }
    anyhow::ensure!(
        !data.chunks.is_empty(),
        "dataset {} holds no complete chunk",
        opts.dataset.display()
    );
    let env = data.meta.env.clone();
    let schema = data.meta.schema.clone();
    let chunk_frames = (schema.envs * schema.steps) as u64;
    let dataset_frames = chunk_frames * data.chunks.len() as u64;
    tracing::info!(
        "dataset {}: {env}, {} chunks, {dataset_frames} frames",
        opts.dataset.display(),
        data.chunks.len()
    );
    // The environment exactly as recorded (gymnasium: the dataset's imports and kwargs), for
    // the policy's sizes and the evaluations.
    let registry = env_registry(&data.meta.env_imports, data.meta.env_kwargs.clone());
    let spec = registry
        .spec(&env)
        .with_context(|| format!("building dataset environment {env}"))?;
    let pc = fit_policy_spec(&spec, &config.policy);
    let algo = config.algorithm();
    let mut learner = algo::build::<B>(
        &LearnerSpec {
            algo: &algo,
            policy: &pc,
            schema: &schema,
            capacity: dataset_frames as usize,
            seed: r.seed,
        },
        device,
    )?;
    let frames_per_update = algo.trained_steps_per_update();
    if r.algo != Algo::Ppo {
        for chunk in &data.chunks {
            learner.add_chunk(chunk);
        }
    }
    write_config(&opts.run_dir, &config.to_toml())?;
    let metrics_path = opts.run_dir.join("metrics.csv");
    let _ = std::fs::remove_file(&metrics_path);
    let mut metrics = MetricsWriter::open(&metrics_path)?.with_tensorboard(
        TensorBoard::for_run_if(r.tensorboard, &opts.run_dir, 0, &config.to_toml())?,
    );
    let checkpoint = opts.run_dir.join("checkpoint");
    let bar = progress_bar(opts.progress, r.updates, "{pos:>7}/{len} updates");
    let mut summary = ReplaySummary {
        env: env.clone(),
        algo: r.algo.name().into(),
        dataset: opts.dataset.display().to_string(),
        dataset_frames,
        dataset_chunks: data.chunks.len(),
        ignored_tail_bytes: data.ignored_tail_bytes,
        target_return: r.target_return,
        best_eval_return: f64::NAN,
        final_eval_return: f64::NAN,
        ..Default::default()
    };
    let mut train_s = 0.0f64;
    let mut next_chunk = 0usize;
    let mut eval_return = f64::NAN;
    let mut eval_episodes = 0u64;
    let run_eval = |learner: &algo::Learner<B>, updates: u64, summary: &mut ReplaySummary| {
        let eval = evaluate(
            host_policy(&learner.model().valid())?,
            &registry,
            &env,
            r.eval_episodes,
            r.seed ^ 0xe7a1 ^ updates,
        )?;
        summary.evaluations.push((updates, eval.mean_return));
        summary.final_eval_return = eval.mean_return;
        if summary.best_eval_return.is_nan() || eval.mean_return > summary.best_eval_return {
            summary.best_eval_return = eval.mean_return;
        }
        anyhow::Ok(eval)
    };
    while summary.updates < r.updates {
        if signals.raised() {
            tracing::info!("stopped by a signal");
            break;
        }
        if opts
            .max_seconds
            .is_some_and(|m| started.elapsed().as_secs_f64() >= m)
        {
            tracing::info!("time limit reached");
            break;
        }
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
        summary.trained_frames += frames_per_update;
        let u = summary.updates;
        let eval_now = (r.eval_every > 0 && u.is_multiple_of(r.eval_every)) || u == r.updates;
        if eval_now {
            let last = run_eval(&learner, u, &mut summary)?;
            (eval_return, eval_episodes) = (last.mean_return, eval_episodes + last.episodes as u64);
            tracing::info!(
                "update {u}: greedy return {:.1} (min {:.0}, max {:.0}) over {} episodes, loss {:.4}",
                last.mean_return,
                last.min_return,
                last.max_return,
                last.episodes,
                stats.loss
            );
        }
        let now = started.elapsed().as_secs_f64();
        metrics.write(&MetricsRow {
            frames: summary.trained_frames,
            wall_s: now,
            updates: u,
            mean_return: eval_return,
            policy_lag: 0.0,
            episodes: eval_episodes,
            frames_per_s: summary.trained_frames as f64 / train_s.max(1e-9),
            dropped_chunks: 0,
            ..MetricsRow::from(&stats)
        })?;
        bar.set_position(u);
        bar.set_message(format!(
            "loss {:.4}  greedy return {:.1}  {:.0} updates/s",
            stats.loss,
            eval_return,
            u as f64 / train_s.max(1e-9)
        ));
        if r.checkpoint_every > 0 && u.is_multiple_of(r.checkpoint_every) {
            save_checkpoint(
                &checkpoint,
                &*learner,
                r.algo.name(),
                &summary,
                Default::default(),
                u,
            )?;
        }
        if let (Some(target), None) = (r.target_return, summary.updates_to_target) {
            if eval_now && eval_return >= target {
                summary.updates_to_target = Some(u);
                summary.seconds_to_target = Some(now);
                tracing::info!(
                    "greedy return {eval_return:.1} >= {target} after {u} updates, {now:.1} s"
                );
                break;
            }
        }
    }
    bar.finish_and_clear();
    if summary.evaluations.last().map(|e| e.0) != Some(summary.updates) {
        let last = run_eval(&learner, summary.updates, &mut summary)?;
        tracing::info!(
            "final greedy return {:.1} over {} episodes",
            last.mean_return,
            last.episodes
        );
    }
    summary.seconds = started.elapsed().as_secs_f64();
    summary.train_seconds = train_s;
    summary.updates_per_s = summary.updates as f64 / train_s.max(1e-9);
    summary.trained_frames_per_s = summary.trained_frames as f64 / train_s.max(1e-9);
    save_checkpoint(
        &checkpoint,
        &*learner,
        r.algo.name(),
        &summary,
        Default::default(),
        summary.updates,
    )?;
    let title = format!(
        "{env} replay ({} {}-{})",
        r.algo.name().to_uppercase(),
        pc.cell.name(),
        pc.hidden_size
    );
    plot_curve(&opts.run_dir, &title, REPLAY_AXES, r.target_return)?;
    write_summary(&opts.run_dir, &summary)?;
    Ok(summary)
}

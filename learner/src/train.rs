//! `recur-learner train`: the whole job. Actors collect through the transport; the learner
//! computes advantages with its recurrent critic, runs PPO updates, broadcasts the new weights,
//! and keeps the run directory: `config.toml` (resolved), `metrics.csv`, `learning_curve.png`,
//! `checkpoint/` (model, optimizer, weights, counters; rewritten atomically), `summary.json`.
//! SIGINT/SIGTERM end the run cleanly with a final checkpoint; `--resume RUN_DIR` continues it.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use burn::tensor::backend::AutodiffBackend;
use common::backend::{cpu_device, CpuAutodiff, TrainDevice};
use common::checkpoint::{load_checkpoint, save_checkpoint};
use common::chunk::Chunk;
use common::policy::{chunk_schema, PolicyConfig};
use common::rollout::EpsilonSchedule;
use common::weights::to_blob;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::algo::{Learner, LearnerSpec};
use crate::collect::{CollectConfig, CollectSummary, Transport};
use crate::config::Algo;
use crate::config::{CollectorMode, TrainConfig};
use crate::metrics::{plot_learning_curve, read_curve, MetricsRow, MetricsWriter, TRAIN_AXES};

/// How a training run is started.
#[derive(Clone, Debug)]
pub struct TrainOptions {
    pub config: TrainConfig,
    pub run_dir: PathBuf,
    /// Continue from `run_dir/checkpoint`.
    pub resume: bool,
    pub actor_program: PathBuf,
    /// Show a progress bar (on a terminal).
    pub progress: bool,
    /// End the run after this wall time.
    pub max_seconds: Option<f64>,
    /// Also record every received chunk into this (new) dataset directory.
    pub save_replay: Option<PathBuf>,
}

/// The outcome of a run (`summary.json`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct TrainSummary {
    pub env: String,
    pub frames: u64,
    pub updates: u64,
    pub seconds: f64,
    pub episodes: u64,
    /// Mean return of the last 20 episodes at the end.
    pub final_mean_return: f64,
    /// Best mean return after any update (`None` before the first finished episodes).
    pub best_mean_return: Option<f64>,
    pub target_return: Option<f64>,
    pub frames_to_target: Option<u64>,
    pub seconds_to_target: Option<f64>,
    pub dropped_chunks: u64,
    pub stopped_by_request: bool,
    pub transport: CollectSummary,
}

/// What a checkpoint holds besides the model and optimizer.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TrainState {
    pub updates: u64,
    pub frames: u64,
    pub policy_version: u64,
    pub wall_s: f64,
    pub episodes: u64,
    pub recent_returns: Vec<f64>,
    pub best_mean_return: Option<f64>,
    pub frames_to_target: Option<u64>,
    pub seconds_to_target: Option<f64>,
}

const RECENT: usize = 20;

/// The policy architecture a config describes, fitted to its environment.
pub fn policy_config(config: &TrainConfig) -> anyhow::Result<PolicyConfig> {
    crate::offline::fit_policy(&config.run.env, &config.policy)
}

/// Runs (or resumes) a training run on `run.device`.
pub fn train(opts: &TrainOptions) -> anyhow::Result<TrainSummary> {
    match opts.config.run.device {
        TrainDevice::Cpu => train_on::<CpuAutodiff>(opts, &cpu_device()),
        #[cfg(feature = "cuda")]
        TrainDevice::Cuda(i) => {
            let device = common::backend::cuda_device(i)?;
            train_on::<common::backend::CudaAutodiff>(opts, &device)
        }
        #[cfg(not(feature = "cuda"))]
        device @ TrainDevice::Cuda(_) => {
            Err(common::backend::DeviceError::NotBuilt { device }.into())
        }
    }
}

/// A training run with the learner on `device`.
fn train_on<B: AutodiffBackend>(
    opts: &TrainOptions,
    device: &B::Device,
) -> anyhow::Result<TrainSummary> {
    let config = &opts.config;
    std::fs::create_dir_all(&opts.run_dir)
        .with_context(|| format!("creating {}", opts.run_dir.display()))?;
    std::fs::write(opts.run_dir.join("config.toml"), config.to_toml())?;
    let actors = config
        .run
        .actors
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32));
    let c = &config.collector;
    let chunk_frames = (c.envs_per_actor * c.steps) as u64;
    let per_update = match (c.mode, &config.ppo) {
        (CollectorMode::Sync, _) => actors as usize * chunk_frames as usize,
        (CollectorMode::Async, Some(ppo)) => ppo.frames_per_update,
        (CollectorMode::Async, None) => chunk_frames as usize,
    };
    let pc = policy_config(config)?;
    let schema = chunk_schema(&pc, c.envs_per_actor, c.steps);
    let ppo_section = config.ppo.clone().map(|mut p| {
        p.frames_per_update = per_update;
        p
    });
    let mut learner = Learner::<B>::on_device(
        &LearnerSpec {
            algo: config.run.algo,
            policy: &pc,
            schema: &schema,
            ppo: ppo_section.as_ref(),
            dqn: config.dqn.as_ref(),
            bc: None,
            capacity: config.dqn.as_ref().map_or(0, |d| d.buffer_size),
            seed: config.run.seed,
        },
        device,
    )?;
    let steps_per_update = config.dqn.as_ref().map_or(1, |d| d.updates_per_chunk);
    let mut state = TrainState::default();
    let checkpoint = opts.run_dir.join("checkpoint");
    if opts.resume {
        state = load_checkpoint(&checkpoint, &mut learner)
            .with_context(|| format!("resuming from {}", checkpoint.display()))?;
        tracing::info!(
            "resumed at update {} ({} frames)",
            state.updates,
            state.frames
        );
    }
    let collect = CollectConfig {
        env: config.run.env.clone(),
        actors,
        envs: c.envs_per_actor,
        steps: c.steps,
        cell: pc.cell,
        hidden: pc.hidden_size,
        layers: pc.num_layers,
        encoder: pc.encoder.clone(),
        seed: config.run.seed.wrapping_add(state.updates),
        frames: u64::MAX,
        run_dir: opts.run_dir.clone(),
        actor_program: opts.actor_program.clone(),
        slots: c.ring_slots,
        publish_every: 0,
        max_restarts: 5,
        save_replay: opts.save_replay.clone(),
        actor_args: exploration_args(config, chunk_frames),
    };
    let mut version = state.policy_version.max(1);
    let mut transport =
        Transport::start(&collect, schema.clone(), &to_blob(learner.model(), version))?;
    if version > 1 {
        transport.publish(version, &to_blob(learner.model(), version))?;
    }
    let mut metrics = MetricsWriter::open(&opts.run_dir.join("metrics.csv"))?;
    let bar = progress_bar(opts.progress, config.run.frames, state.frames);
    let started = Instant::now();
    let wall = |state: &TrainState| state.wall_s + started.elapsed().as_secs_f64();
    let mut returns: HashMap<i64, f64> = HashMap::new();
    let mut recent: VecDeque<f64> = state.recent_returns.iter().copied().collect();
    let (mut lag_sum, mut lag_n, mut dropped) = (0u64, 0u64, 0u64);
    let mut sync_taken: Vec<u32> = Vec::new();
    let mut last_frames = (state.frames, wall(&state));
    let mut stopped_by_request = false;

    let mut pending: VecDeque<Chunk> = VecDeque::new();
    'run: while state.frames < config.run.frames {
        if transport.stop_requested() {
            stopped_by_request = true;
            break;
        }
        if opts
            .max_seconds
            .is_some_and(|m| started.elapsed().as_secs_f64() >= m)
        {
            tracing::info!("time limit reached");
            break;
        }
        pending.extend(transport.poll()?);
        if pending.is_empty() {
            std::thread::sleep(Duration::from_micros(300));
            continue;
        }
        while let Some(chunk) = pending.pop_front() {
            track_returns(&chunk, &mut returns, &mut recent);
            state.episodes += chunk.next_done.iter().filter(|&&d| d == 1).count() as u64;
            let lag = version.saturating_sub(chunk.meta.policy_version);
            let accept = match c.mode {
                CollectorMode::Async => learner.off_policy() || lag <= c.max_policy_lag,
                CollectorMode::Sync => lag == 0 && !sync_taken.contains(&chunk.meta.actor_id),
            };
            if !accept {
                dropped += 1;
                continue;
            }
            if c.mode == CollectorMode::Sync {
                sync_taken.push(chunk.meta.actor_id);
            }
            lag_sum += lag;
            lag_n += 1;
            learner.add_chunk(&chunk);
            state.frames += chunk_frames;
            if !learner.ready(per_update) {
                continue;
            }
            let stats = learner.update(steps_per_update)?;
            state.updates += 1;
            version += 1;
            transport.publish(version, &to_blob(learner.model(), version))?;
            state.policy_version = version;
            sync_taken.clear();
            let mean_return = mean(&recent);
            state.recent_returns = recent.iter().copied().collect();
            if mean_return.is_finite() {
                state.best_mean_return = Some(
                    state
                        .best_mean_return
                        .map_or(mean_return, |b| b.max(mean_return)),
                );
            }
            let now = wall(&state);
            if let (Some(target), None) = (config.run.target_return, state.frames_to_target) {
                if recent.len() >= RECENT && mean_return >= target {
                    state.frames_to_target = Some(state.frames);
                    state.seconds_to_target = Some(now);
                    tracing::info!(
                        "mean return {mean_return:.2} >= {target} after {} frames, {now:.1} s",
                        state.frames
                    );
                }
            }
            let fps = (state.frames - last_frames.0) as f64 / (now - last_frames.1).max(1e-9);
            last_frames = (state.frames, now);
            let row = MetricsRow {
                frames: state.frames,
                wall_s: now,
                updates: state.updates,
                mean_return,
                policy_lag: lag_sum as f64 / lag_n.max(1) as f64,
                episodes: state.episodes,
                update: stats.clone(),
                frames_per_s: fps,
                dropped_chunks: dropped,
            };
            metrics.write(&row)?;
            (lag_sum, lag_n) = (0, 0);
            bar.set_position(state.frames.min(config.run.frames));
            bar.set_message(format!(
                "{fps:>7.0} frames/s  return {mean_return:>7.2}  lag {:.2}  loss {:.4}  update {}",
                row.policy_lag, stats.loss, state.updates
            ));
            if state.updates % 10 == 0 || bar.is_hidden() && state.updates % 25 == 0 {
                tracing::info!(
                    "update {}: {} frames, {:.1} s, {fps:.0} frames/s, mean return {mean_return:.2}, lag {:.2}, loss {:.4}",
                    state.updates, state.frames, now, row.policy_lag, stats.loss
                );
            }
            if config.run.checkpoint_every > 0 && state.updates % config.run.checkpoint_every == 0 {
                let snapshot = TrainState {
                    wall_s: now,
                    ..state.clone()
                };
                save_checkpoint(&checkpoint, &learner, &snapshot, version)?;
            }
            if config.run.stop_at_target && state.frames_to_target.is_some() {
                break 'run;
            }
            if state.frames >= config.run.frames {
                break 'run;
            }
        }
    }
    bar.finish_and_clear();
    state.wall_s = wall(&state);
    state.recent_returns = recent.iter().copied().collect();
    save_checkpoint(&checkpoint, &learner, &state, version)?;
    let (transport_summary, _tail) = transport.finish(stopped_by_request)?;
    let curve = read_curve(&opts.run_dir.join("metrics.csv"))?;
    let title = format!(
        "{} ({} {}-{})",
        config.run.env,
        config.run.algo.name().to_uppercase(),
        pc.cell.name(),
        pc.hidden_size
    );
    if let Some(note) = plot_learning_curve(
        &curve,
        &title,
        TRAIN_AXES,
        config.run.target_return,
        &opts.run_dir.join("learning_curve.png"),
    )? {
        tracing::warn!("{note}");
    }
    let summary = TrainSummary {
        env: config.run.env.clone(),
        frames: state.frames,
        updates: state.updates,
        seconds: state.wall_s,
        episodes: state.episodes,
        final_mean_return: mean(&recent),
        best_mean_return: state.best_mean_return,
        target_return: config.run.target_return,
        frames_to_target: state.frames_to_target,
        seconds_to_target: state.seconds_to_target,
        dropped_chunks: dropped,
        stopped_by_request,
        transport: transport_summary,
    };
    std::fs::write(
        opts.run_dir.join("summary.json"),
        serde_json::to_string_pretty(&summary)? + "\n",
    )?;
    Ok(summary)
}

/// The actors' action selection: PPO samples from its policy; DQN actors are epsilon-greedy
/// with the schedule counted in policy versions (one per update, one update per chunk).
fn exploration_args(config: &TrainConfig, chunk_frames: u64) -> Vec<String> {
    match (config.run.algo, &config.dqn) {
        (Algo::Dqn, Some(d)) => {
            let schedule = EpsilonSchedule {
                start: d.epsilon_start,
                end: d.epsilon_end,
                decay_versions: d.epsilon_decay_frames / chunk_frames.max(1),
            };
            vec![
                "--exploration".into(),
                "greedy".into(),
                "--epsilon".into(),
                schedule.to_string(),
            ]
        }
        _ => Vec::new(),
    }
}

/// Accumulates rewards per trajectory; a `done` closes the episode into `recent`.
fn track_returns(chunk: &Chunk, returns: &mut HashMap<i64, f64>, recent: &mut VecDeque<f64>) {
    for p in 0..chunk.traj_ids.len() {
        let r = returns.entry(chunk.traj_ids[p]).or_insert(0.0);
        *r += chunk.next_reward[p] as f64;
        if chunk.next_done[p] == 1 {
            let ret = returns.remove(&chunk.traj_ids[p]).unwrap_or(0.0);
            recent.push_back(ret);
            if recent.len() > RECENT {
                recent.pop_front();
            }
        }
    }
}

fn mean(v: &VecDeque<f64>) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn progress_bar(show: bool, total: u64, at: u64) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} {bar:30} {pos:>8}/{len} frames  {msg}")
            .expect("a valid template"),
    );
    bar.set_position(at);
    bar
}

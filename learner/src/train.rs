//! `recur-learner train`: the whole job. Actors collect through the transport; the learner
//! computes advantages with its recurrent critic, runs PPO updates, broadcasts the new weights,
//! and keeps the run directory: `config.toml` (resolved), `metrics.csv`, `learning_curve.png`,
//! `checkpoint/` (model, optimizer, weights, counters; rewritten atomically), `summary.json`,
//! and with `[eval]` `eval.csv` (greedy evaluations beside training, [`crate::eval`]).
//! SIGINT/SIGTERM end the run cleanly with a final checkpoint; `--resume RUN_DIR` continues it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use burn::tensor::backend::AutodiffBackend;
use common::checkpoint::{load_checkpoint, save_checkpoint, ResumeState};
use common::chunk::Chunk;
use common::policy::{chunk_schema, CriticCore};
use common::rollout::EpsilonSchedule;
use common::weights::{check_finite, to_blob};
use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};

use crate::algo::{self, LearnerSpec};
use crate::config::{Algo, AlgoConfig, CollectorMode, TrainConfig};
use crate::eval::{first_at_target, EvalPlan, EvalWorker};
use crate::metrics::{truncate_metrics, MetricsRow, MetricsWriter, TRAIN_AXES};
use crate::policy::{describe_env, env_args, fit_policy_spec};
use crate::recording::Recording;
use crate::run_dir::{plot_curve, progress_bar, write_config, write_summary, RunDir};
use crate::supervisor::default_actor_count;
use crate::tensorboard::TensorBoard;
use crate::transport::{ActorsGone, CollectSummary, ShmTransport, Transport, TransportConfig};

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
    /// The last greedy evaluation (`[eval]`): mean return and the frames it was taken at.
    pub final_eval_return: Option<f64>,
    pub final_eval_frames: Option<u64>,
    /// The first greedy evaluation reaching `target_return`: frames and training seconds.
    pub eval_frames_to_target: Option<u64>,
    pub eval_seconds_to_target: Option<f64>,
    pub dropped_chunks: u64,
    pub stopped_by_request: bool,
    /// Why the run ended early because its actors were gone for good (the last actor exit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actors_gone: Option<String>,
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

/// Episodes in the running mean return.
const RECENT: usize = 20;

/// Runs (or resumes) a training run on `run.device`.
pub fn train(opts: &TrainOptions) -> anyhow::Result<TrainSummary> {
    on_train_device!(opts.config.run.device, train_on(opts))
}

fn train_on<B: AutodiffBackend>(
    opts: &TrainOptions,
    device: &B::Device,
) -> anyhow::Result<TrainSummary> {
    // Setup: the signal handlers (a signal from here on ends the run cleanly), the run
    // directory (locked; a new run refuses one that holds a run), the pacing, the learner
    // (resumed from its checkpoint, which is checked before anything is written), the
    // transport with its actors.
    crate::signals::install()?;
    let config = &opts.config;
    let run_dir = RunDir::create(&opts.run_dir, opts.resume)?;
    tracing::info!("run directory {} (locked)", opts.run_dir.display());
    let c = &config.collector;
    let actors = config.run.actors.unwrap_or_else(default_actor_count);
    let chunk_frames = (c.envs_per_actor * c.steps) as u64;
    let frames_per_update = match (c.mode, &config.ppo) {
        (CollectorMode::Sync, _) => actors as usize * chunk_frames as usize,
        (CollectorMode::Async, Some(ppo)) => ppo.frames_per_update,
        (CollectorMode::Async, None) => chunk_frames as usize,
    };
    // The actors' own view of the environment: the policy is built for those spaces, and a
    // registering actor that reports others is refused.
    let spec = describe_env(&opts.actor_program, &config.run)?;
    let pc = fit_policy_spec(&spec, &config.policy);
    let schema = chunk_schema(&pc, c.envs_per_actor, c.steps);
    let mut algo = config.algorithm();
    if let AlgoConfig::Ppo(ppo) = &mut algo {
        ppo.frames_per_update = frames_per_update;
    }
    let mut learner = algo::build::<B>(
        &LearnerSpec {
            algo: &algo,
            policy: &pc,
            schema: &schema,
            capacity: config.dqn.as_ref().map_or(0, |d| d.buffer_size),
            seed: config.run.seed,
        },
        device,
    )?;
    let mut state = TrainState::default();
    let mut resumed = ResumeState::default();
    let checkpoint = opts.run_dir.join("checkpoint");
    let algo_name = config.run.algo.name();
    if opts.resume {
        match load_checkpoint::<B, TrainState>(&checkpoint, &mut *learner, algo_name, &pc)
            .with_context(|| format!("resuming {}", opts.run_dir.display()))?
        {
            Some(loaded) => {
                if let Some(why) = &loaded.fell_back {
                    tracing::warn!(
                        "{why}: resuming from the previous checkpoint {}",
                        loaded.from.display()
                    );
                }
                state = loaded.state;
                resumed = loaded.resume;
                tracing::info!(
                    "resumed at update {} ({} frames) from {}",
                    state.updates,
                    state.frames,
                    loaded.from.display()
                );
            }
            None => tracing::warn!(
                "{} holds no checkpoint (the run was stopped before its first one): starting \
                 from update 0 with its config.toml",
                opts.run_dir.display()
            ),
        }
        let dropped = truncate_metrics(&opts.run_dir.join("metrics.csv"), state.updates)?;
        if dropped > 0 {
            tracing::warn!(
                "metrics.csv: dropped {dropped} rows after update {} (written after the checkpoint)",
                state.updates
            );
        }
    }
    write_config(&opts.run_dir, &config.to_toml())?;
    if opts.resume && state.frames >= config.run.frames {
        tracing::info!(
            "the run is complete ({} of {} frames): nothing to train",
            state.frames,
            config.run.frames
        );
        let returns = Returns {
            open: HashMap::new(),
            recent: state.recent_returns.iter().copied().collect(),
        };
        let summary = TrainSummary::counted(config, &state, &returns);
        write_summary(&opts.run_dir, &summary)?;
        return Ok(summary);
    }
    let mut recording = Recording::create_with_source(
        opts.save_replay.as_deref(),
        &config.run.env,
        &schema,
        &common::dataset::EnvSource {
            imports: config.run.env_imports.clone(),
            kwargs: config
                .run
                .env_kwargs
                .as_ref()
                .map(|t| serde_json::to_value(t).expect("a TOML table is JSON")),
            seed: Some(config.run.seed.wrapping_add(state.updates)),
        },
    )?;
    let mut version = state.policy_version.max(1);
    // The actors: the collector section, the learner's policy architecture, the algorithm's
    // exploration (PPO samples from its policy; DQN actors are epsilon-greedy with the schedule
    // counted in policy versions, one per update, one update per chunk); a resumed run seeds
    // them anew.
    let transport_config = TransportConfig {
        env: config.run.env.clone(),
        actors,
        envs: c.envs_per_actor,
        steps: c.steps,
        cell: pc.cell,
        hidden: pc.hidden_size,
        layers: pc.num_layers,
        encoder: pc.encoder.clone(),
        seed: config.run.seed.wrapping_add(state.updates),
        run_dir: opts.run_dir.clone(),
        actor_program: opts.actor_program.clone(),
        slots: c.ring_slots,
        max_restarts: c.max_restarts,
        restart_window: Duration::from_secs_f64(c.restart_window_s),
        restart_backoff: Duration::from_secs_f64(c.restart_backoff_s),
        spec: Some(spec),
        sync: c.mode == CollectorMode::Sync,
        restore: resumed.actors.iter().cloned().collect(),
        listen: config.run.listen.clone(),
        actor_args: env_args(&config.run)
            .into_iter()
            .chain(match (config.run.algo, &config.dqn) {
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
                // The critic core is part of the actors' policy (its state is in every chunk).
                _ if pc.critic_core == CriticCore::Separate => {
                    vec!["--critic-core".into(), "separate".into()]
                }
                _ => Vec::new(),
            })
            .collect(),
    };
    let mut transport = ShmTransport::start_in(
        run_dir,
        &transport_config,
        schema,
        &to_blob(learner.model(), version),
    )?;
    if version > 1 {
        transport.publish(version, &to_blob(learner.model(), version))?;
    }
    let mut returns = Returns {
        open: resumed.open_returns.iter().copied().collect(),
        recent: state.recent_returns.iter().copied().collect(),
    };
    // Sync runs: each actor's state after its chunk of the last update (the checkpoint's).
    let mut actor_states: BTreeMap<u32, Vec<u8>> = resumed.actors.into_iter().collect();
    // Sync runs: the update's chunks, fed to the algorithm in actor order once all are in.
    let mut held: Vec<Chunk> = Vec::new();
    let mut admission = Admission {
        sync: c.mode == CollectorMode::Sync,
        max_policy_lag: c.max_policy_lag,
        off_policy: learner.off_policy(),
        ..Default::default()
    };
    let mut progress = Progress::start(opts, &state)?;
    let mut eval = match &config.eval {
        Some(e) => Some(EvalWorker::start(
            EvalPlan {
                env: config.run.env.clone(),
                registry: crate::eval::env_registry(
                    &config.run.env_imports,
                    config
                        .run
                        .env_kwargs
                        .as_ref()
                        .map(|t| serde_json::to_value(t).expect("a TOML table is JSON")),
                ),
                policy: pc.clone(),
                episodes: e.episodes,
                seed: e
                    .seed
                    .unwrap_or_else(|| config.run.seed.wrapping_add(1_000_000)),
                every_frames: e.every_frames,
                csv: opts.run_dir.join("eval.csv"),
                tensorboard: progress.metrics.tensorboard(),
            },
            state.frames,
        )?),
        None => None,
    };
    let mut last_eval_frames = None;
    let mut stopped_by_request = false;
    let mut pending: VecDeque<Chunk> = VecDeque::new();
    let mut actors_gone: Option<ActorsGone> = None;

    'run: while state.frames < config.run.frames {
        if transport.stop_requested() {
            stopped_by_request = true;
            break;
        }
        if opts
            .max_seconds
            .is_some_and(|m| progress.started.elapsed().as_secs_f64() >= m)
        {
            tracing::info!("time limit reached");
            break;
        }
        // Receive: admit new actors, take their chunks (recorded as they arrive).
        transport.register();
        let chunks = match transport.receive() {
            Ok(chunks) => chunks,
            Err(e) => match e.downcast::<ActorsGone>() {
                // No actor left: end the run (final checkpoint, summary), then report it.
                Ok(gone) => {
                    tracing::error!("{gone}");
                    actors_gone = Some(gone);
                    break;
                }
                Err(e) => return Err(e),
            },
        };
        recording.record(&chunks)?;
        pending.extend(chunks);
        if pending.is_empty() {
            std::thread::sleep(Duration::from_micros(300));
            continue;
        }
        while let Some(chunk) = pending.pop_front() {
            // Add: every chunk's episodes count; the admitted ones go to the algorithm. A sync
            // update takes its chunks in actor order (arrival order depends on timing), with
            // each actor's state after its chunk.
            if !admission.admit(&chunk, version) {
                state.episodes += returns.add(&chunk);
                continue;
            }
            state.frames += chunk_frames;
            if admission.sync {
                let m = &chunk.meta;
                match transport.admit_actor_state(m.actor_id, m.incarnation, m.policy_version) {
                    Some(saved) => actor_states.insert(m.actor_id, saved),
                    None => actor_states.remove(&m.actor_id),
                };
                held.push(chunk);
                if (held.len() * chunk_frames as usize) < frames_per_update {
                    continue;
                }
                held.sort_by_key(|c| c.meta.actor_id);
                for chunk in held.drain(..) {
                    state.episodes += returns.add(&chunk);
                    learner.add_chunk(&chunk);
                }
            } else {
                state.episodes += returns.add(&chunk);
                learner.add_chunk(&chunk);
            }
            if !learner.ready() {
                continue;
            }

            // Update, and publish the new weights to the actors (and to the evaluation).
            learner.set_progress(state.frames as f64 / config.run.frames as f64);
            let stats = learner.update()?;
            state.updates += 1;
            version += 1;
            let blob = to_blob(learner.model(), version);
            check_finite(&blob).with_context(|| {
                format!(
                    "update {} produced weights that are not finite: not published, not \
                     checkpointed (the last checkpoint is kept)",
                    state.updates
                )
            })?;
            transport.publish(version, &blob)?;
            if let Some(eval) = eval.as_mut().filter(|e| e.due(state.frames)) {
                eval.submit(state.frames, progress.wall(), blob);
                last_eval_frames = Some(state.frames);
            }
            state.policy_version = version;
            admission.taken.clear(); // sync mode: every actor's next chunk is wanted

            // Report: metrics.csv, the progress bar, the log.
            let now = progress.wall();
            let mean_return = state.note_returns(&returns, config.run.target_return, now);
            let fps = (state.frames - progress.last.0) as f64 / (now - progress.last.1).max(1e-9);
            progress.last = (state.frames, now);
            let row = MetricsRow {
                frames: state.frames,
                wall_s: now,
                updates: state.updates,
                mean_return,
                policy_lag: admission.take_mean_lag(),
                episodes: state.episodes,
                frames_per_s: fps,
                dropped_chunks: admission.dropped,
                ..MetricsRow::from(&stats)
            };
            progress.report(&row, stats.loss)?;

            // Checkpoint, and stop once the run is done.
            if config.run.checkpoint_every > 0 && state.updates % config.run.checkpoint_every == 0 {
                let snapshot = TrainState {
                    wall_s: now,
                    ..state.clone()
                };
                let resume = resume_state(&actor_states, &returns);
                save_checkpoint(
                    &checkpoint,
                    &*learner,
                    algo_name,
                    &snapshot,
                    resume,
                    version,
                )?;
            }
            if config.run.stop_at_target && state.frames_to_target.is_some()
                || state.frames >= config.run.frames
            {
                break 'run;
            }
        }
    }

    // Finish: the final checkpoint, the actors stopped, the learning curve, summary.json.
    progress.bar.finish_and_clear();
    state.wall_s = progress.wall();
    state.recent_returns = returns.recent.iter().copied().collect();
    let resume = resume_state(&actor_states, &returns);
    save_checkpoint(&checkpoint, &*learner, algo_name, &state, resume, version)?;
    let (transport_summary, tail) = transport.finish(stopped_by_request)?;
    recording.record(&tail)?;
    let eval_rows = match eval {
        Some(worker) => {
            let last = (last_eval_frames != Some(state.frames)).then(|| {
                (
                    state.frames,
                    state.wall_s,
                    to_blob(learner.model(), version),
                )
            });
            worker.finish(last)?
        }
        None => Vec::new(),
    };
    // A resumed run's earlier evaluations are in eval.csv too.
    let all_rows = crate::eval::read_eval_rows(&opts.run_dir.join("eval.csv"));
    let eval_target = first_at_target(&all_rows, config.run.target_return);
    let title = format!(
        "{} ({} {}-{})",
        config.run.env,
        config.run.algo.name().to_uppercase(),
        pc.cell.name(),
        pc.hidden_size
    );
    plot_curve(&opts.run_dir, &title, TRAIN_AXES, config.run.target_return)?;
    let summary = TrainSummary {
        final_eval_return: eval_rows.last().map(|r| r.eval_return_mean),
        final_eval_frames: eval_rows.last().map(|r| r.frames),
        eval_frames_to_target: eval_target.map(|t| t.0),
        eval_seconds_to_target: eval_target.map(|t| t.1),
        dropped_chunks: admission.dropped,
        stopped_by_request,
        actors_gone: actors_gone.as_ref().map(|g| g.last_exit.clone()),
        transport: transport_summary,
        ..TrainSummary::counted(config, &state, &returns)
    };
    write_summary(&opts.run_dir, &summary)?;
    if let Some(gone) = actors_gone {
        return Err(anyhow::Error::new(gone).context(format!(
            "the run ended early; its final checkpoint and summary are in {}",
            opts.run_dir.display()
        )));
    }
    Ok(summary)
}

/// What `resume.bin` holds besides the algorithm's own state (sorted: the same run writes the
/// same bytes).
fn resume_state(actors: &BTreeMap<u32, Vec<u8>>, returns: &Returns) -> ResumeState {
    let mut open_returns: Vec<(i64, f64)> = returns.open.iter().map(|(&k, &v)| (k, v)).collect();
    open_returns.sort_by_key(|&(k, _)| k);
    ResumeState {
        actors: actors.iter().map(|(&a, s)| (a, s.clone())).collect(),
        open_returns,
        ..Default::default()
    }
}

/// Which chunks the algorithm gets: in async mode those at most `max_policy_lag` versions
/// behind (any, for an off-policy algorithm); in sync mode one chunk per actor per update, all
/// from the current weights. Counts the policy lag of what it admits and what it drops.
#[derive(Default)]
struct Admission {
    sync: bool,
    max_policy_lag: u64,
    off_policy: bool,
    /// Actors whose chunk this update already has (sync mode).
    taken: Vec<u32>,
    lag_sum: u64,
    lag_n: u64,
    dropped: u64,
}

impl Admission {
    /// Whether `chunk` goes to the algorithm while the weights are at `version`.
    fn admit(&mut self, chunk: &Chunk, version: u64) -> bool {
        let lag = version.saturating_sub(chunk.meta.policy_version);
        let accept = if self.sync {
            lag == 0 && !self.taken.contains(&chunk.meta.actor_id)
        } else {
            self.off_policy || lag <= self.max_policy_lag
        };
        if !accept {
            self.dropped += 1;
            return false;
        }
        if self.sync {
            self.taken.push(chunk.meta.actor_id);
        }
        self.lag_sum += lag;
        self.lag_n += 1;
        true
    }

    /// The mean lag of the chunks admitted since the last call.
    fn take_mean_lag(&mut self) -> f64 {
        let mean = self.lag_sum as f64 / self.lag_n.max(1) as f64;
        (self.lag_sum, self.lag_n) = (0, 0);
        mean
    }
}

impl TrainSummary {
    /// The fields the run's counters give (the others are filled in where they are known).
    fn counted(config: &TrainConfig, state: &TrainState, returns: &Returns) -> Self {
        TrainSummary {
            env: config.run.env.clone(),
            frames: state.frames,
            updates: state.updates,
            seconds: state.wall_s,
            episodes: state.episodes,
            final_mean_return: returns.mean(),
            best_mean_return: state.best_mean_return,
            target_return: config.run.target_return,
            frames_to_target: state.frames_to_target,
            seconds_to_target: state.seconds_to_target,
            ..Default::default()
        }
    }
}

/// Episode returns: rewards summed per trajectory until its `done`; the last [`RECENT`]
/// finished episodes kept.
struct Returns {
    open: HashMap<i64, f64>,
    recent: VecDeque<f64>,
}

impl Returns {
    /// Adds a chunk's rewards; returns how many episodes ended in it.
    fn add(&mut self, chunk: &Chunk) -> u64 {
        let mut ended = 0;
        for p in 0..chunk.traj_ids.len() {
            let r = self.open.entry(chunk.traj_ids[p]).or_insert(0.0);
            *r += chunk.next_reward[p] as f64;
            if chunk.next_done[p] == 1 {
                ended += 1;
                let ret = self.open.remove(&chunk.traj_ids[p]).unwrap_or(0.0);
                self.recent.push_back(ret);
                if self.recent.len() > RECENT {
                    self.recent.pop_front();
                }
            }
        }
        ended
    }

    /// The mean of the recent returns (NaN before the first finished episode).
    fn mean(&self) -> f64 {
        if self.recent.is_empty() {
            f64::NAN
        } else {
            self.recent.iter().sum::<f64>() / self.recent.len() as f64
        }
    }
}

impl TrainState {
    /// Takes in the returns after an update at wall time `now`: the recent ones, the best mean,
    /// when the mean first reached `target`. Returns the mean.
    fn note_returns(&mut self, returns: &Returns, target: Option<f64>, now: f64) -> f64 {
        let mean_return = returns.mean();
        self.recent_returns = returns.recent.iter().copied().collect();
        if mean_return.is_finite() {
            self.best_mean_return = Some(
                self.best_mean_return
                    .map_or(mean_return, |b| b.max(mean_return)),
            );
        }
        if let (Some(target), None) = (target, self.frames_to_target) {
            if returns.recent.len() >= RECENT && mean_return >= target {
                self.frames_to_target = Some(self.frames);
                self.seconds_to_target = Some(now);
                tracing::info!(
                    "mean return {mean_return:.2} >= {target} after {} frames, {now:.1} s",
                    self.frames
                );
            }
        }
        mean_return
    }
}

/// `metrics.csv`, the progress bar, the log lines, and the run's clock.
struct Progress {
    metrics: MetricsWriter,
    bar: ProgressBar,
    total: u64,
    started: Instant,
    /// Wall seconds of the run before this process (a resumed run's).
    earlier_s: f64,
    /// Frames and wall seconds at the last report (for frames/s).
    last: (u64, f64),
}

impl Progress {
    fn start(opts: &TrainOptions, state: &TrainState) -> anyhow::Result<Self> {
        let total = opts.config.run.frames;
        let bar = progress_bar(opts.progress, total, "{pos:>8}/{len} frames");
        bar.set_position(state.frames);
        Ok(Progress {
            metrics: MetricsWriter::open(&opts.run_dir.join("metrics.csv"))?.with_tensorboard(
                TensorBoard::for_run_if(
                    opts.config.run.tensorboard,
                    &opts.run_dir,
                    state.frames,
                    &opts.config.to_toml(),
                )?,
            ),
            bar,
            total,
            started: Instant::now(),
            earlier_s: state.wall_s,
            last: (state.frames, state.wall_s),
        })
    }

    /// Wall seconds of the whole run so far.
    fn wall(&self) -> f64 {
        self.earlier_s + self.started.elapsed().as_secs_f64()
    }

    /// Writes an update's row, moves the bar, and logs every 10th update (25th without a bar).
    fn report(&mut self, row: &MetricsRow, loss: f32) -> anyhow::Result<()> {
        self.metrics.write(row)?;
        let (fps, mean_return, updates) = (row.frames_per_s, row.mean_return, row.updates);
        self.bar.set_position(row.frames.min(self.total));
        self.bar.set_message(format!(
            "{fps:>7.0} frames/s  return {mean_return:>7.2}  lag {:.2}  loss {loss:.4}  update {updates}",
            row.policy_lag
        ));
        if updates % 10 == 0 || self.bar.is_hidden() && updates % 25 == 0 {
            tracing::info!(
                "update {updates}: {} frames, {:.1} s, {fps:.0} frames/s, mean return {mean_return:.2}, lag {:.2}, loss {loss:.4}",
                row.frames, row.wall_s, row.policy_lag
            );
        }
        Ok(())
    }
}

//! `recur-learner train`: the whole job. Actors collect through the transport; the learner
//! computes advantages with its recurrent critic, runs PPO updates, broadcasts the new weights,
//! and keeps the run directory: `config.toml` (resolved), `metrics.csv`, `learning_curve.png`,
//! `checkpoint/` (model, optimizer, weights, counters; rewritten atomically), `summary.json`,
//! and with `[eval]` `eval.csv` (greedy evaluations beside training, [`crate::eval`]).
//! SIGINT/SIGTERM end the run cleanly with a final checkpoint; `--resume RUN_DIR` continues it.
//!
//! A write of the run's own files that fails (a full disk: `metrics.csv`, the TensorBoard
//! events, a checkpoint, the `--save-replay` dataset) stops the run cleanly ([`WriteFailed`]):
//! the actors are stopped and drained, a final checkpoint is attempted unless the checkpoint
//! was what failed (a failed one leaves `checkpoint/` and `checkpoint.old/` as they were),
//! `summary.json` says `failed` (when it still fits), and the run exits with the error naming
//! the file. `--resume` continues from the last complete checkpoint once there is room.

mod group;
mod intake;
mod setup;
mod summary;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use burn::tensor::backend::AutodiffBackend;
use common::weights::{check_finite, to_blob};

pub use intake::TrainState;
use intake::{Admission, Intake, ReturnMeans};
use setup::Plan;
pub use summary::TrainSummary;

use crate::actors::transport::Received;
use crate::actors::{Actors, ActorsGone};
use crate::algo::Learner;
use crate::config::{CollectorMode, TrainConfig};
use crate::eval::{best_row, first_at_target, EvalWorker};
use crate::ranks;
use crate::run::metrics::{MetricsRow, UpdateStats, TRAIN_AXES};
use crate::run::profile;
use crate::run::recording::Recording;
use crate::run::{Run, RunOptions, StopReason};

/// A write of the run's own files failed: the run stops cleanly (see the module docs).
#[derive(Debug, thiserror::Error)]
#[error("{what}: {cause:#}")]
pub struct WriteFailed {
    /// What was being written.
    pub what: &'static str,
    /// The error, naming the file (its whole chain is in the message).
    pub cause: anyhow::Error,
}

impl WriteFailed {
    const CHECKPOINT: &'static str = "writing the checkpoint";
    const METRICS: &'static str = "writing the metrics (metrics.csv, tb/)";
    const RECORDING: &'static str = "recording the received chunks (--save-replay)";
    const EVAL: &'static str = "the evaluations (eval.csv)";

    fn new(what: &'static str) -> impl FnOnce(anyhow::Error) -> Self {
        move |cause| WriteFailed { what, cause }
    }
}

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

/// Runs (or resumes) a training run on `run.device`.
pub fn train(opts: &TrainOptions) -> anyhow::Result<TrainSummary> {
    on_train_device!(ranks::rank_device(opts.config.run.device), train_on(opts))
}

fn train_on<B: AutodiffBackend>(
    opts: &TrainOptions,
    device: &B::Device,
) -> anyhow::Result<TrainSummary> {
    // Setup: the run (signals, locked directory), the plan, the learner (resumed from its
    // checkpoint, which is checked before anything is written), the transport with its actors.
    let config = &opts.config;
    // Several learner ranks: this rank's share of the batch sizes; rank 0 owns the run
    // directory, the others run in a scratch directory of their own (group.rs).
    let rank = ranks::world();
    let scratch = (!rank.is_root()).then(tempfile::tempdir).transpose()?;
    let local = TrainOptions {
        config: group::rank_config(config, rank)?,
        run_dir: scratch
            .as_ref()
            .map_or(opts.run_dir.clone(), |d| d.path().into()),
        resume: opts.resume && rank.is_root(),
        progress: opts.progress && rank.is_root(),
        save_replay: opts.save_replay.clone().filter(|_| rank.is_root()),
        ..opts.clone()
    };
    let mut run = Run::open(RunOptions {
        path: &local.run_dir,
        resume: local.resume,
        progress: local.progress,
        total: config.run.frames,
        unit: "frames",
        max_seconds: opts.max_seconds,
        checkpoint_every: config.run.checkpoint_every,
    })?;
    let plan = Plan::new(&local)?;
    let mut learner = plan.learner::<B>(&local.config, device)?;
    let (mut state, mut resumed) = setup::resume(&local, &mut learner, &plan.policy)?;
    let first_actor = rank.rank as u32 * plan.actors;
    group::share_start(
        config,
        &opts.run_dir,
        &mut learner,
        &mut state,
        &mut resumed,
        first_actor..first_actor + plan.actors,
    )?;
    group::share_remote_identity(config, run.dir().names())?;
    run.write_config(&config.to_toml())?;
    let resumed_at = opts
        .resume
        .then_some((state.updates, state.frames, state.wall_s));
    run.start_metrics(resumed_at, config.run.tensorboard, &config.to_toml())?;
    let c = &config.collector;
    let sync = c.mode == CollectorMode::Sync;
    let admission = Admission::new(sync, c.max_policy_lag, learner.off_policy());
    let (chunk_frames, frames_per_update) = (plan.chunk_frames, plan.frames_per_update);
    let intake = Intake::new(admission, &resumed, &state, chunk_frames, frames_per_update);
    if opts.resume && state.frames >= config.run.frames {
        tracing::info!(
            "the run is complete ({} frames): nothing to train",
            state.frames
        );
        let summary = TrainSummary::counted(config, &state, &intake.returns);
        run.write_summary(&summary)?;
        return Ok(summary);
    }
    let version = state.policy_version.max(1);
    let mut actors = Actors::start(
        run.dir().names(),
        &plan.transport_config(&local, &state),
        plan.schema.clone(),
        &to_blob(learner.model(), version),
    )?;
    if version > 1 {
        actors.publish(version, &to_blob(learner.model(), version))?;
    }
    let mut t = Training {
        recording: setup::recording(&local, &plan.schema, &state)?,
        eval: setup::eval_worker(&local, &plan.policy, state.frames, run.tensorboard())?,
        last_eval_frames: None,
        last_report: (state.frames, state.wall_s),
        checkpointed: (opts.resume && state.updates > 0).then_some(state.updates),
        agreed: group::Agreed::at(&state),
        over_ranks: None,
        stopping: None,
        _scratch: scratch,
        run,
        plan,
        learner,
        actors,
        intake,
        state,
        version,
    };
    let (mut stopped_by_request, mut actors_gone, mut failed) = (false, None, None);
    let mut pending: VecDeque<Received> = VecDeque::new();

    'run: while t.frames_done() < config.run.frames {
        // Several ranks leave together, at an update they agree on (Training::update).
        if let Some(by_request) = t.stop().filter(|_| rank.size == 1) {
            stopped_by_request = by_request;
            break;
        }
        // Receive: admit new actors, take their chunks (recorded as they arrive).
        let received = profile::time("receive", || {
            t.actors.register(&t.intake.saved_states);
            t.actors.receive()
        });
        match received {
            Ok(chunks) => {
                let recorded = t.recording.record(chunks.iter().map(|r| &r.chunk));
                pending.extend(chunks);
                if let Err(e) = recorded {
                    failed = Some(WriteFailed::new(WriteFailed::RECORDING)(e));
                    break;
                }
            }
            // No actor left: end the run (final checkpoint, summary), then report it.
            Err(e) => {
                let gone = e.downcast::<ActorsGone>()?;
                tracing::error!("{gone}");
                actors_gone = Some(gone);
                break;
            }
        }
        if pending.is_empty() {
            // Several ranks: a rank gone from this machine is named even before the next
            // collective (which this rank may not reach without chunks).
            ranks::check_peers()?;
            profile::time("idle", || std::thread::sleep(Duration::from_micros(300)));
            continue;
        }
        // Add: every chunk's episodes count; the admitted ones go to the algorithm. Update
        // once it is ready, and stop once the run is done.
        while let Some(received) = pending.pop_front() {
            let version = t.version;
            profile::time("take", || {
                t.intake
                    .take(received, version, &mut t.learner, &mut t.state)
            });
            if !t.learner.ready() {
                continue;
            }
            if let Err(e) = t.update(config) {
                failed = Some(e.downcast::<WriteFailed>()?);
                break 'run;
            }
            if let Some(by_request) = t.stopping {
                stopped_by_request = by_request;
                break 'run;
            }
            let at_target = config.run.stop_at_target && t.state.frames_to_target.is_some();
            if (at_target && rank.size == 1) || t.state.frames >= config.run.frames {
                break 'run;
            }
        }
    }
    t.finish(config, stopped_by_request, actors_gone, failed)
}

/// A training run's loop state once its actors run.
struct Training<B: AutodiffBackend> {
    run: Run,
    plan: Plan,
    learner: Learner<B>,
    actors: Actors,
    intake: Intake,
    state: TrainState,
    /// The weights' version (one per update; 1 before the first).
    version: u64,
    recording: Recording,
    eval: Option<EvalWorker>,
    last_eval_frames: Option<u64>,
    /// Frames and wall seconds at the last report (for frames/s).
    last_report: (u64, f64),
    /// The update the last complete checkpoint holds (`None`: none yet in this run).
    checkpointed: Option<u64>,
    /// The run's frames and episodes at the last update, every rank's ([`group::agree`]).
    agreed: group::Agreed,
    /// Several ranks: the last report's group values (the summary's mean return and dropped
    /// chunks are the group's).
    over_ranks: Option<(ReturnMeans, u64)>,
    /// Several ranks: set by the update at which they stop early, whether a rank was asked to
    /// (a signal, an operator; `false`: the time limit or `run.stop_at_target`).
    stopping: Option<bool>,
    /// A rank other than 0: its scratch run directory, removed at the end.
    _scratch: Option<tempfile::TempDir>,
}

impl<B: AutodiffBackend> Training<B> {
    /// Whether the run must stop before its frames are done: `Some(true)` when asked to (a
    /// signal, or an actor or operator through a transport), `Some(false)` at the time limit.
    /// The frames the loop counts against `run.frames`: all taken in (one rank), or those the
    /// ranks agreed on at the last update (several: a rank's own since then are not yet known
    /// to the others, which must leave the loop at the same update).
    fn frames_done(&self) -> u64 {
        match ranks::world().size {
            1 => self.state.frames,
            _ => self.agreed.frames,
        }
    }

    fn stop(&self) -> Option<bool> {
        match (self.actors.stop_requested(), self.run.stop_reason()) {
            (true, _) | (_, Some(StopReason::Signal)) => Some(true),
            (_, Some(StopReason::TimeLimit)) => Some(false),
            _ => None,
        }
    }

    /// One update: the new weights published to the actors (and to the evaluation), the
    /// report, the checkpoint when one is due. A failed write is a [`WriteFailed`].
    fn update(&mut self, config: &TrainConfig) -> anyhow::Result<()> {
        // Several ranks agree first on the run's frames (the schedules' progress) and on
        // whether they stop after this update (a no-op for one).
        let at_target = config.run.stop_at_target && self.state.frames_to_target.is_some();
        let wish = self.stop().or(at_target.then_some(false));
        self.stopping = group::agree(&mut self.state, &mut self.agreed, wish)?;
        let state = &mut self.state;
        self.learner
            .set_progress(state.frames as f64 / config.run.frames as f64);
        let stats = profile::time("update", || self.learner.update())?;
        state.updates += 1;
        self.version += 1;
        let publish = profile::Phase::start("publish");
        let blob = to_blob(self.learner.model(), self.version);
        check_finite(&blob).with_context(|| {
            format!(
                "update {} produced weights that are not finite: not published, not \
                 checkpointed (the last checkpoint is kept)",
                state.updates
            )
        })?;
        group::check_weights(state.updates, &blob)?;
        self.actors.publish(self.version, &blob)?;
        drop(publish);
        if let Some(eval) = self.eval.as_mut().filter(|e| e.due(state.frames)) {
            eval.submit(state.frames, self.run.wall(), blob);
            self.last_eval_frames = Some(state.frames);
        }
        state.policy_version = self.version;
        let intake = &mut self.intake;
        let over_ranks = group::report_over_ranks(
            intake.returns.means(),
            intake.admission.updated(),
            intake.admission.dropped,
        )?;
        if ranks::world().size > 1 {
            self.over_ranks = Some((over_ranks.0, over_ranks.2));
        }
        profile::time("report", || self.report(&stats, over_ranks, config))
            .map_err(WriteFailed::new(WriteFailed::METRICS))?;
        if self.run.checkpoint_due(self.state.updates) {
            let snapshot = TrainState {
                wall_s: self.run.wall(),
                ..self.state.clone()
            };
            profile::time("checkpoint", || self.checkpoint(config, snapshot))?;
        }
        Ok(())
    }

    /// A checkpoint of `state`, written by rank 0 with every rank's resume state
    /// ([`group::gather_resume`]; every rank calls this at the same update). A failed write is
    /// a [`WriteFailed`]; a rank lost in the gather an error naming it.
    fn checkpoint(&mut self, config: &TrainConfig, mut state: TrainState) -> anyhow::Result<()> {
        let algo = config.run.algo.name();
        let resume = self.intake.resume_state();
        let Some((resume, rank_hosts)) = group::gather_resume(resume, self.learner.host_state())?
        else {
            return Ok(());
        };
        state.rank_hosts = rank_hosts;
        self.run
            .save_checkpoint(&*self.learner, algo, &state, resume, self.version)
            .map_err(WriteFailed::new(WriteFailed::CHECKPOINT))?;
        self.checkpointed = Some(state.updates);
        Ok(())
    }

    /// An update's report: the returns taken in, metrics.csv, the progress bar, and a log
    /// line every 10th update (25th without a bar). `over_ranks`: the mean returns, policy lag
    /// and dropped chunks to show, every rank's ([`group::report_over_ranks`]).
    fn report(
        &mut self,
        stats: &UpdateStats,
        (means, lag, dropped): (ReturnMeans, f64, u64),
        config: &TrainConfig,
    ) -> anyhow::Result<()> {
        let (state, intake) = (&mut self.state, &mut self.intake);
        let now = self.run.wall();
        let target = (config.run.target_return, config.run.target_window);
        let mean_return = state.note_returns(&intake.returns, means, target, now);
        let last = std::mem::replace(&mut self.last_report, (state.frames, now));
        let fps = (state.frames - last.0) as f64 / (now - last.1).max(1e-9);
        let row = MetricsRow {
            frames: state.frames,
            wall_s: now,
            updates: state.updates,
            mean_return,
            policy_lag: lag,
            episodes: state.episodes,
            frames_per_s: fps,
            dropped_chunks: dropped,
            mean_return_100: means.mean_100,
            ..MetricsRow::from(stats)
        };
        let (loss, lag, updates) = (stats.loss, row.policy_lag, state.updates);
        let message = format!(
            "{fps:>7.0} frames/s  return {mean_return:>7.2}  lag {lag:.2}  loss {loss:.4}  \
             update {updates}"
        );
        self.run.report(&row, state.frames, message)?;
        if updates % 10 == 0 || self.run.quiet() && updates % 25 == 0 {
            tracing::info!(
                "update {updates}: {} frames, {now:.1} s, {fps:.0} frames/s, mean return \
                 {mean_return:.2}, lag {lag:.2}, loss {loss:.4}",
                state.frames
            );
        }
        Ok(())
    }

    /// Ends the run: the final checkpoint, the actors stopped (what they still sent recorded),
    /// the last evaluation, the learning curve and `summary.json`. Errs after all that when
    /// the actors were gone for good, or when a write failed (`failed`, or one of these).
    fn finish(
        mut self,
        config: &TrainConfig,
        stopped_by_request: bool,
        actors_gone: Option<ActorsGone>,
        mut failed: Option<WriteFailed>,
    ) -> anyhow::Result<TrainSummary> {
        self.run.end_progress();
        if let Some(f) = &failed {
            tracing::error!("the run stops: {f}");
        }
        self.state.wall_s = self.run.wall();
        self.state.recent_returns = self.intake.returns.recent();
        // After a failed checkpoint no other is attempted: the last complete one stays.
        if failed
            .as_ref()
            .is_none_or(|f| f.what != WriteFailed::CHECKPOINT)
        {
            let state = self.state.clone();
            if let Err(e) = self.checkpoint(config, state) {
                let e = e.downcast::<WriteFailed>()?;
                tracing::error!("the final checkpoint failed: {e}");
                failed.get_or_insert(e);
            }
        }
        group::log_final(&self.agreed, || to_blob(self.learner.model(), self.version));
        let (transport_summary, tail) = self.actors.finish(stopped_by_request)?;
        if failed
            .as_ref()
            .is_none_or(|f| f.what != WriteFailed::RECORDING)
        {
            if let Err(e) = self.recording.record(tail.iter().map(|r| &r.chunk)) {
                failed.get_or_insert(WriteFailed::new(WriteFailed::RECORDING)(e));
            }
        }
        let state = &self.state;
        let eval_rows = match self.eval {
            Some(worker) => {
                let last =
                    (self.last_eval_frames != Some(state.frames) && failed.is_none()).then(|| {
                        let blob = to_blob(self.learner.model(), self.version);
                        (state.frames, state.wall_s, blob)
                    });
                worker.finish(last).unwrap_or_else(|e| {
                    failed.get_or_insert(WriteFailed::new(WriteFailed::EVAL)(e));
                    Vec::new()
                })
            }
            None => Vec::new(),
        };
        // A resumed run's earlier evaluations are in eval.csv too.
        let all_rows = crate::eval::read_eval_rows(&self.run.path().join("eval.csv"));
        let eval_target = first_at_target(&all_rows, config.run.target_return);
        let summary = TrainSummary {
            final_eval_return: eval_rows.last().map(|r| r.eval_return_mean),
            final_eval_frames: eval_rows.last().map(|r| r.frames),
            final_eval_episodes: eval_rows.last().map(|r| r.episodes),
            best_eval_return: best_row(&all_rows).map(|r| r.eval_return_mean),
            best_eval_frames: best_row(&all_rows).map(|r| r.frames),
            eval_frames_to_target: eval_target.map(|t| t.0),
            eval_seconds_to_target: eval_target.map(|t| t.1),
            dropped_chunks: self.intake.admission.dropped,
            stopped_by_request,
            actors_gone: actors_gone.as_ref().map(|g| g.last_exit.clone()),
            failed: failed.as_ref().map(|f| f.to_string()),
            transport: transport_summary,
            profile: profile::snapshot(),
            profile_calls: profile::calls(),
            ..TrainSummary::counted(config, state, &self.intake.returns)
        };
        // Several ranks: the group's mean return and dropped chunks, as metrics.csv shows.
        let summary = match self.over_ranks {
            Some((means, dropped)) => TrainSummary {
                final_mean_return: means.mean,
                dropped_chunks: dropped,
                ..summary
            },
            None => summary,
        };
        let pc = &self.plan.policy;
        let title = format!(
            "{} ({} {}-{})",
            config.run.env,
            config.run.algo.name().to_uppercase(),
            pc.cell.name(),
            pc.hidden_size
        );
        let path = self.run.path().to_path_buf();
        if let Some(failed) = failed {
            // The disk may still be full: the curve and the summary are written if they fit.
            self.run
                .finish_after_failure(&title, TRAIN_AXES, config.run.target_return, &summary);
            let at = match self.checkpointed {
                Some(u) => format!("update {u}, in {}", path.join("checkpoint").display()),
                None => "none: a resumed run starts from update 0".into(),
            };
            return Err(anyhow::Error::new(failed).context(format!(
                "the run stopped because a write failed; the last complete checkpoint: {at} \
                 (make room, then --resume {})",
                path.display()
            )));
        }
        self.run
            .finish(&title, TRAIN_AXES, config.run.target_return, &summary)?;
        match actors_gone {
            Some(gone) => Err(anyhow::Error::new(gone).context(format!(
                "the run ended early; its final checkpoint and summary are in {}",
                path.display()
            ))),
            None => Ok(summary),
        }
    }
}

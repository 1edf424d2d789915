//! A run's own concerns, shared by `train` and `replay`: the locked run directory, the stop
//! signals and the time limit, the resolved `config.toml`, `metrics.csv` with its progress bar
//! and clock, the checkpoint cadence, and, at the end, the learning curve and `summary.json`.
//! The training loops own only what is theirs (actors or a dataset, the algorithm, the
//! counters) and read top to bottom:
//!
//! ```text
//! let mut run = Run::open(RunOptions { .. })?;      // lock, signals, metrics, clock
//! run.write_config(&config.to_toml())?;
//! while let None = run.stop_reason() {               // a signal, the time limit
//!     .. collect, update ..
//!     run.report(&row, message)?;                    // metrics.csv + progress bar
//!     if run.checkpoint_due(updates) { run.save_checkpoint(..)? }
//! }
//! run.finish(&title, axes, target, &summary)?;       // curve + summary.json
//! ```
//!
//! Beside [`Run`], the bookkeeping it and the loops use: [`dir`] (the run directory, its lock
//! and the names of the run's resources), [`signals`] (SIGINT/SIGTERM), [`metrics`]
//! (`metrics.csv`, the learning curve), [`tensorboard`] (event files), [`profile`] (time per
//! phase) and [`recording`] (`--save-replay`).

pub mod dir;
pub mod metrics;
pub mod profile;
pub mod recording;
pub mod signals;
pub mod tensorboard;

use std::path::Path;
use std::time::Instant;

use burn::tensor::backend::Backend;
use common::checkpoint::{save_checkpoint, Checkpointed, ResumeState};
use indicatif::ProgressBar;
use serde::Serialize;

use crate::run::dir::{plot_curve, progress_bar, write_summary, RunDir};
use crate::run::metrics::{truncate_metrics, Axes, MetricsRow, MetricsWriter};
use crate::run::signals::StopFlag;
use crate::run::tensorboard::TensorBoard;

/// How a run is opened.
#[derive(Clone, Debug)]
pub struct RunOptions<'a> {
    pub path: &'a Path,
    /// Continue the run the directory holds (its metrics are kept up to its checkpoint).
    pub resume: bool,
    /// Show a progress bar (on a terminal).
    pub progress: bool,
    /// The progress bar's length and its unit ("frames", "updates").
    pub total: u64,
    pub unit: &'static str,
    /// End the run after this wall time (this process's).
    pub max_seconds: Option<f64>,
    /// Save a checkpoint every this many updates (0: only at the end).
    pub checkpoint_every: u64,
}

/// Why a run loop stops before its budget is spent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// SIGINT/SIGTERM.
    Signal,
    /// `max_seconds` passed.
    TimeLimit,
}

/// An open run: its directory (locked for the run's life), signals, metrics, clock.
pub struct Run {
    dir: RunDir,
    signals: StopFlag,
    metrics: Option<MetricsWriter>,
    bar: ProgressBar,
    total: u64,
    started: Instant,
    /// Wall seconds of the run before this process (a resumed run's).
    earlier_s: f64,
    max_seconds: Option<f64>,
    checkpoint_every: u64,
}

impl Run {
    /// Installs the signal handlers (a signal from here on ends the run cleanly) and takes the
    /// run directory: created with mode 0700 and locked; a new run refuses one that holds a
    /// run. Metrics start with [`start_metrics`](Self::start_metrics), once the caller knows
    /// where a resumed run stands.
    pub fn open(opts: RunOptions<'_>) -> anyhow::Result<Self> {
        let signals = crate::run::signals::install()?;
        let dir = RunDir::create(opts.path, opts.resume)?;
        tracing::info!("run directory {} (locked)", opts.path.display());
        let template = format!("{{pos:>8}}/{{len}} {}", opts.unit);
        Ok(Run {
            dir,
            signals,
            metrics: None,
            bar: progress_bar(opts.progress, opts.total, &template),
            total: opts.total,
            started: Instant::now(),
            earlier_s: 0.0,
            max_seconds: opts.max_seconds,
            checkpoint_every: opts.checkpoint_every,
        })
    }

    pub fn path(&self) -> &Path {
        self.dir.names().path()
    }

    /// The run directory (the shared-memory transport names its segments after it).
    pub fn dir(&self) -> &RunDir {
        &self.dir
    }

    /// Writes the resolved config to `config.toml` (atomically).
    pub fn write_config(&self, toml: &str) -> anyhow::Result<()> {
        common::checkpoint::write_atomic(&self.path().join("config.toml"), toml.as_bytes())
    }

    /// Opens `metrics.csv` at position (`updates`, `frames`, `wall_s`): `Some` continues a
    /// resumed run, dropping the rows written after its checkpoint; `None` starts it anew.
    /// With `tensorboard`, the rows also go to an event file in `tb/` (its first event the
    /// run's config as text; a resumed run's drops what was written after `frames`).
    pub fn start_metrics(
        &mut self,
        resumed: Option<(u64, u64, f64)>,
        tensorboard: bool,
        config_toml: &str,
    ) -> anyhow::Result<()> {
        let path = self.path().join("metrics.csv");
        let frames = resumed.map_or(0, |r| r.1);
        match resumed {
            Some((updates, frames, wall_s)) => {
                let dropped = truncate_metrics(&path, updates)?;
                if dropped > 0 {
                    tracing::warn!(
                        "metrics.csv: dropped {dropped} rows after update {updates} (written \
                         after the checkpoint)"
                    );
                }
                self.earlier_s = wall_s;
                self.bar.set_position(frames.min(self.total));
            }
            None => {
                let _ = std::fs::remove_file(&path);
            }
        }
        let tb = tensorboard
            .then(|| TensorBoard::for_run(self.path(), frames, config_toml))
            .transpose()?;
        self.metrics = Some(MetricsWriter::open(&path, tb)?);
        Ok(())
    }

    /// The run's TensorBoard event file (for the evaluation rows), if it writes one.
    pub fn tensorboard(&self) -> Option<TensorBoard> {
        self.metrics.as_ref().and_then(MetricsWriter::tensorboard)
    }

    /// Wall seconds of the whole run so far (a resumed run's earlier ones included).
    pub fn wall(&self) -> f64 {
        self.earlier_s + self.started.elapsed().as_secs_f64()
    }

    /// Seconds since this process opened the run.
    pub fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Why the run should stop now (`None`: go on). Logged once here.
    pub fn stop_reason(&self) -> Option<StopReason> {
        if self.signals.raised() {
            tracing::info!("stopped by a signal");
            return Some(StopReason::Signal);
        }
        if self.max_seconds.is_some_and(|m| self.elapsed() >= m) {
            tracing::info!("time limit reached");
            return Some(StopReason::TimeLimit);
        }
        None
    }

    /// Appends an update's row to `metrics.csv` and moves the progress bar to `position`.
    pub fn report(
        &mut self,
        row: &MetricsRow,
        position: u64,
        message: String,
    ) -> anyhow::Result<()> {
        self.metrics
            .as_mut()
            .expect("start_metrics before report")
            .write(row)?;
        self.bar.set_position(position.min(self.total));
        self.bar.set_message(message);
        Ok(())
    }

    /// Whether the progress bar is shown (a hidden one logs less often).
    pub fn quiet(&self) -> bool {
        self.bar.is_hidden()
    }

    /// Whether update `updates` ends with a checkpoint.
    pub fn checkpoint_due(&self, updates: u64) -> bool {
        self.checkpoint_every > 0 && updates.is_multiple_of(self.checkpoint_every)
    }

    /// Saves `learner` with `state` and `resume` into `checkpoint/` (atomically, the previous
    /// one kept as `checkpoint.old`).
    pub fn save_checkpoint<B: Backend, S: Serialize>(
        &self,
        learner: &(impl Checkpointed<B> + ?Sized),
        algo: &str,
        state: &S,
        resume: ResumeState,
        version: u64,
    ) -> anyhow::Result<()> {
        let dir = self.path().join("checkpoint");
        save_checkpoint(&dir, learner, algo, state, resume, version)
    }

    /// Clears the progress bar (before the end-of-run work logs).
    pub fn end_progress(&self) {
        self.bar.finish_and_clear();
    }

    /// Writes `summary.json` (atomically).
    pub fn write_summary(&self, summary: &impl Serialize) -> anyhow::Result<()> {
        write_summary(self.path(), summary)
    }

    /// Ends a run stopped by a failed write: the learning curve and `summary.json` are
    /// written if they can be (the disk may be full), a failure logged, never an error.
    pub fn finish_after_failure(
        self,
        title: &str,
        axes: Axes,
        target: Option<f64>,
        summary: &impl Serialize,
    ) {
        self.bar.finish_and_clear();
        // The summary first: it is small and says what happened.
        if let Err(e) = write_summary(self.path(), summary) {
            tracing::error!("summary.json not written: {e:#}");
        }
        if let Err(e) = plot_curve(self.path(), title, axes, target) {
            tracing::warn!("learning_curve.png not drawn: {e:#}");
        }
    }

    /// Ends the run: draws `learning_curve.png` from `metrics.csv` (and `eval.csv`), writes
    /// `summary.json`; the lock is released when the run is dropped.
    pub fn finish(
        self,
        title: &str,
        axes: Axes,
        target: Option<f64>,
        summary: &impl Serialize,
    ) -> anyhow::Result<()> {
        self.bar.finish_and_clear();
        plot_curve(self.path(), title, axes, target)?;
        write_summary(self.path(), summary)
    }
}

//! The run directory and the names a run gives its resources: the directory itself (mode 0700,
//! so only the run's user reaches the control socket inside it), the control socket, and the
//! shared-memory segments (`recur-<run id>-weights`, `recur-<run id>-ring-<actor>-<incarnation>`,
//! unique per run), and the files every run writes there first and last (`config.toml`,
//! `summary.json`). Segments left by a crashed run are reclaimed before a new run creates its own.

use std::path::{Path, PathBuf};

use anyhow::Context;
use common::shm::unique_run_id;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::metrics::{plot_learning_curve, read_curve, Axes};

/// A run's directory and the run-unique id in its segment names.
pub struct RunDir {
    path: PathBuf,
    run_id: String,
}

impl RunDir {
    /// Creates `path` (and its parents) with mode 0700 and draws a fresh run id.
    pub fn create(path: &Path) -> anyhow::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(path)
            .with_context(|| format!("creating run directory {}", path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))?;
        Ok(RunDir {
            path: path.to_path_buf(),
            run_id: unique_run_id(),
        })
    }

    /// The control plane's Unix socket.
    pub fn control_socket(&self) -> PathBuf {
        self.path.join("control.sock")
    }

    /// The shared-memory segment the weights are published in.
    pub fn weights_segment(&self) -> String {
        format!("recur-{}-weights", self.run_id)
    }

    /// The shared-memory ring of one actor incarnation.
    pub fn ring_segment(&self, actor_id: u32, incarnation: u32) -> String {
        format!("recur-{}-ring-{actor_id}-{incarnation}", self.run_id)
    }
}

/// Creates `dir` (and its parents) and writes the run's resolved config to `dir/config.toml`.
pub fn write_config(dir: &Path, toml: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join("config.toml"), toml)?;
    Ok(())
}

/// Writes a run's outcome to `dir/summary.json`.
pub fn write_summary(dir: &Path, summary: &impl Serialize) -> anyhow::Result<()> {
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(summary)? + "\n",
    )?;
    Ok(())
}

/// Draws `dir/learning_curve.png` from `dir/metrics.csv` and `dir/eval.csv` when there is one
/// (a missing font is logged, not an error).
pub fn plot_curve(dir: &Path, title: &str, axes: Axes, target: Option<f64>) -> anyhow::Result<()> {
    let curve = read_curve(&dir.join("metrics.csv"))?;
    let eval: Vec<(f64, f64)> = crate::eval::read_eval_rows(&dir.join("eval.csv"))
        .iter()
        .map(|r| (r.frames as f64, r.eval_return_mean))
        .collect();
    let out = dir.join("learning_curve.png");
    if let Some(note) = plot_learning_curve(&curve, &eval, title, axes, target, &out)? {
        tracing::warn!("{note}");
    }
    Ok(())
}

/// A progress bar of `len` (`count` renders its position), or a hidden one when `!show`.
pub fn progress_bar(show: bool, len: u64, count: &str) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let template = format!("{{elapsed_precise}} {{bar:30}} {count}  {{msg}}");
    let bar = ProgressBar::new(len);
    bar.set_style(ProgressStyle::with_template(&template).expect("a valid template"));
    bar
}

/// The default run directory of a new run: `runs/<name>-<unix time>`.
pub fn default_path(name: &str) -> PathBuf {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    PathBuf::from(format!("runs/{name}-{t}"))
}

//! Run metrics: `metrics.csv` (one row per update) and `learning_curve.png`.

use std::io::Write;
use std::path::Path;

use plotters::prelude::*;

use crate::ppo::UpdateStats;

/// The columns of `metrics.csv`, in order (a contract: `frames`, `wall_s`, `updates`,
/// `mean_return`, `policy_lag` stay first).
pub const COLUMNS: [&str; 16] = [
    "frames",
    "wall_s",
    "updates",
    "mean_return",
    "policy_lag",
    "episodes",
    "loss",
    "policy_loss",
    "value_loss",
    "entropy",
    "approx_kl",
    "clip_frac",
    "grad_norm",
    "frames_per_s",
    "dropped_chunks",
    "q_mean",
];

/// Axis descriptions of a learning curve.
#[derive(Clone, Copy, Debug)]
pub struct Axes {
    pub x: &'static str,
    pub y: &'static str,
}

/// Online training: returns of the actors' episodes over collected frames.
pub const TRAIN_AXES: Axes = Axes {
    x: "environment frames",
    y: "mean return (last 20 episodes)",
};

/// Learner-only replay: greedy evaluation returns over trained steps.
pub const REPLAY_AXES: Axes = Axes {
    x: "trained steps (slices x slice length, summed over updates)",
    y: "greedy evaluation mean return",
};

/// One row.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricsRow {
    pub frames: u64,
    pub wall_s: f64,
    pub updates: u64,
    /// Mean return of the last 20 finished episodes (NaN before the first).
    pub mean_return: f64,
    pub policy_lag: f64,
    pub episodes: u64,
    /// The update's losses and diagnostics.
    pub update: UpdateStats,
    pub frames_per_s: f64,
    pub dropped_chunks: u64,
}

impl MetricsRow {
    fn csv(&self) -> String {
        format!(
            "{},{:.3},{},{:.4},{:.3},{},{:.5},{:.5},{:.5},{:.5},{:.6},{:.4},{:.4},{:.1},{},{:.4}",
            self.frames,
            self.wall_s,
            self.updates,
            self.mean_return,
            self.policy_lag,
            self.episodes,
            self.update.loss,
            self.update.policy_loss,
            self.update.value_loss,
            self.update.entropy,
            self.update.approx_kl,
            self.update.clip_frac,
            self.update.grad_norm,
            self.frames_per_s,
            self.dropped_chunks,
            self.update.q_mean
        )
    }
}

/// Appends rows to `metrics.csv` (header written when the file is new).
pub struct MetricsWriter {
    file: std::fs::File,
}

impl MetricsWriter {
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let new = !path.exists();
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        if new {
            writeln!(file, "{}", COLUMNS.join(","))?;
        }
        Ok(MetricsWriter { file })
    }

    pub fn write(&mut self, row: &MetricsRow) -> std::io::Result<()> {
        writeln!(self.file, "{}", row.csv())?;
        self.file.flush()
    }
}

/// Reads `(frames, mean_return)` from a metrics file (rows without a return are skipped).
pub fn read_curve(path: &Path) -> std::io::Result<Vec<(f64, f64)>> {
    let text = std::fs::read_to_string(path)?;
    Ok(text
        .lines()
        .skip(1)
        .filter_map(|l| {
            let mut f = l.split(',');
            let frames: f64 = f.next()?.parse().ok()?;
            let ret: f64 = f.nth(2)?.parse().ok()?;
            ret.is_finite().then_some((frames, ret))
        })
        .collect())
}

const FONT_FILES: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Draws the learning curve (mean return over frames) into `out` (PNG). Axis labels need a
/// TrueType font (DejaVu Sans from the system); without one the curve is drawn unlabelled and
/// the returned note says so.
pub fn plot_learning_curve(
    curve: &[(f64, f64)],
    title: &str,
    axes: Axes,
    target: Option<f64>,
    out: &Path,
) -> anyhow::Result<Option<String>> {
    let font = FONT_FILES.iter().find_map(|p| std::fs::read(p).ok());
    let mut note = None;
    if let Some(bytes) = font {
        // The font lives for the rest of the process (plotters keeps a reference).
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, bytes);
    } else {
        note = Some(format!(
            "no TrueType font found ({}): {} has no labels",
            FONT_FILES.join(", "),
            out.display()
        ));
    }
    let root = BitMapBackend::new(out, (900, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let max_x = curve.iter().map(|p| p.0).fold(1.0, f64::max);
    let (mut lo, mut hi) = curve
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
            (lo.min(p.1), hi.max(p.1))
        });
    if let Some(t) = target {
        lo = lo.min(t);
        hi = hi.max(t);
    }
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.05).max(1e-3);
    let mut builder = ChartBuilder::on(&root);
    builder.margin(20);
    if note.is_none() {
        builder
            .caption(title, ("sans-serif", 24))
            .x_label_area_size(45)
            .y_label_area_size(60);
    }
    let mut chart = builder.build_cartesian_2d(0.0..max_x, (lo - pad)..(hi + pad))?;
    if note.is_none() {
        chart
            .configure_mesh()
            .x_desc(axes.x)
            .y_desc(axes.y)
            .draw()?;
    }
    if let Some(t) = target {
        chart.draw_series(LineSeries::new(vec![(0.0, t), (max_x, t)], RED.mix(0.5)))?;
    }
    chart.draw_series(LineSeries::new(curve.iter().copied(), BLUE.stroke_width(2)))?;
    root.present()?;
    Ok(note)
}

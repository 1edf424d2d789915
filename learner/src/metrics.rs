//! Run metrics: `metrics.csv` (one row per update, written and read back through serde) and
//! `learning_curve.png`.

use std::path::Path;

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

/// Declares [`UpdateStats`] with the loss columns `$field` of a metrics row, its `mean` and the
/// row holding them (the field list written once).
macro_rules! update_stats {
    ($($field:ident),*) => {
        /// Losses and diagnostics of one update, the loss columns of a metrics row: each
        /// algorithm reports what it measures (its docs say which) and leaves the rest 0.
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct UpdateStats {
            $(pub $field: f32,)*
        }

        impl UpdateStats {
            /// The mean of the statistics of an update's minibatches (or gradient steps).
            pub fn mean(parts: &[UpdateStats]) -> UpdateStats {
                let k = parts.len().max(1) as f32;
                UpdateStats {
                    $($field: parts.iter().fold(0.0, |sum, s| sum + s.$field) / k,)*
                }
            }
        }

        /// A row holding an update's statistics (the other columns left for the caller).
        impl From<&UpdateStats> for MetricsRow {
            fn from(s: &UpdateStats) -> Self {
                MetricsRow {
                    $($field: s.$field,)*
                    ..MetricsRow::default()
                }
            }
        }
    };
}
update_stats! {
    loss, policy_loss, value_loss, entropy, approx_kl, clip_frac, grad_norm, q_mean
}

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

/// One row of `metrics.csv`; the fields are its columns, in order (a contract: `frames`,
/// `wall_s`, `updates`, `mean_return`, `policy_lag` stay first).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricsRow {
    pub frames: u64,
    pub wall_s: f64,
    pub updates: u64,
    /// Mean return of the last 20 finished episodes (NaN before the first).
    pub mean_return: f64,
    pub policy_lag: f64,
    pub episodes: u64,
    pub loss: f32,
    pub policy_loss: f32,
    pub value_loss: f32,
    pub entropy: f32,
    pub approx_kl: f32,
    pub clip_frac: f32,
    pub grad_norm: f32,
    pub frames_per_s: f64,
    pub dropped_chunks: u64,
    pub q_mean: f32,
}

/// Appends rows to `metrics.csv` (header written when the file is new). Errors name the file
/// (a full disk too).
pub struct MetricsWriter {
    csv: csv::Writer<std::fs::File>,
    path: std::path::PathBuf,
}

impl MetricsWriter {
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let new = !path.exists();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| named(path, e))?;
        let csv = csv::WriterBuilder::new().has_headers(new).from_writer(file);
        Ok(MetricsWriter {
            csv,
            path: path.to_path_buf(),
        })
    }

    pub fn write(&mut self, row: &MetricsRow) -> std::io::Result<()> {
        self.csv
            .serialize(row)
            .map_err(std::io::Error::other)
            .and_then(|()| self.csv.flush())
            .map_err(|e| named(&self.path, e))
    }
}

/// `e` with `path` in its message.
fn named(path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Drops the rows of `path` after update `updates` (those a killed run wrote after its last
/// checkpoint, which a resumed run writes again), rewriting the file atomically; returns how
/// many were dropped. A missing file drops nothing; a torn last line is dropped too.
pub fn truncate_metrics(path: &Path, updates: u64) -> anyhow::Result<usize> {
    use anyhow::Context;
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return Ok(0);
    };
    let mut kept = vec![header];
    let mut dropped = 0;
    // `updates` is the third column (a contract of MetricsRow).
    for line in lines {
        let fields: Vec<&str> = line.split(',').collect();
        let keep = fields.len() == header.split(',').count()
            && fields[2].parse::<u64>().is_ok_and(|u| u <= updates);
        if keep {
            kept.push(line);
        } else {
            dropped += 1;
        }
    }
    if dropped > 0 || !text.ends_with('\n') {
        common::checkpoint::write_atomic(path, (kept.join("\n") + "\n").as_bytes())?;
    }
    Ok(dropped)
}

/// Reads `(frames, mean_return)` from a metrics file (rows without a return, or cut short,
/// are skipped).
pub fn read_curve(path: &Path) -> std::io::Result<Vec<(f64, f64)>> {
    Ok(csv::Reader::from_path(path)?
        .deserialize::<MetricsRow>()
        .filter_map(Result::ok)
        .filter(|r| r.mean_return.is_finite())
        .map(|r| (r.frames as f64, r.mean_return))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_keep_the_columns_and_read_back_as_the_curve() {
        let dir = std::env::temp_dir().join(format!("recur-metrics-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("metrics.csv");
        let _ = std::fs::remove_file(&path);
        let stats = UpdateStats {
            loss: 0.5,
            q_mean: 2.0,
            ..UpdateStats::default()
        };
        let row = |frames, mean_return| MetricsRow {
            frames,
            mean_return,
            ..MetricsRow::from(&stats)
        };
        MetricsWriter::open(&path)
            .unwrap()
            .write(&row(10, f64::NAN))
            .unwrap();
        // Reopened (a resumed run): rows are appended under the one header.
        MetricsWriter::open(&path)
            .unwrap()
            .write(&row(20, 1.5))
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "frames,wall_s,updates,mean_return,policy_lag,episodes,loss,policy_loss,value_loss,\
             entropy,approx_kl,clip_frac,grad_norm,frames_per_s,dropped_chunks,q_mean"
        );
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[1].split(',').nth(6), Some("0.5"), "{text}");
        assert_eq!(read_curve(&path).unwrap(), [(20.0, 1.5)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A full disk (here /dev/full) is reported with the file's path.
    #[test]
    fn a_full_disk_names_the_metrics_file() {
        let dir = std::env::temp_dir().join(format!("recur-metrics-full-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("metrics.csv");
        std::os::unix::fs::symlink("/dev/full", &path).unwrap();
        let mut w = MetricsWriter::open(&path).unwrap();
        let err = w.write(&MetricsRow::default()).unwrap_err().to_string();
        assert!(
            err.contains("metrics.csv") && err.contains("No space left on device"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Run metrics: `metrics.csv` (one row per update, written and read back through serde), the
//! same rows as TensorBoard scalars ([`MetricsRow::scalars`], `RUN_DIR/tb/`), and
//! `learning_curve.png`.

use std::path::Path;

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::run::tensorboard::{named, TensorBoard};

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
                let (sum, k) = (Self::sum(parts), parts.len().max(1) as f32);
                UpdateStats {
                    $($field: sum.$field / k,)*
                }
            }

            /// The field-wise sum of `parts` (a minibatch's statistics from its row blocks).
            pub fn sum(parts: &[UpdateStats]) -> UpdateStats {
                UpdateStats {
                    $($field: parts.iter().fold(0.0, |sum, s| sum + s.$field),)*
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

impl UpdateStats {
    /// PPO's per-minibatch statistics that several learner ranks sum (each rank's loss and
    /// diagnostics are its part of the group's means): loss, policy and value loss, entropy,
    /// approximate KL and clip fraction, in that order.
    pub fn ppo_parts(&self) -> [f32; 6] {
        [
            self.loss,
            self.policy_loss,
            self.value_loss,
            self.entropy,
            self.approx_kl,
            self.clip_frac,
        ]
    }

    /// Sets what [`ppo_parts`](Self::ppo_parts) reads.
    pub fn set_ppo_parts(&mut self, parts: [f32; 6]) {
        [
            self.loss,
            self.policy_loss,
            self.value_loss,
            self.entropy,
            self.approx_kl,
            self.clip_frac,
        ] = parts;
    }
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
    /// Mean return of the last 100 finished episodes (all of them before the 100th; NaN before
    /// the first): RLlib's `episode_reward_mean`, whose maximum over training is the POPGym
    /// paper's MMER. Learner-only replay leaves it NaN. Files written before this column read
    /// it as NaN.
    #[serde(default = "nan")]
    pub mean_return_100: f64,
}

fn nan() -> f64 {
    f64::NAN
}

/// The header line of `metrics.csv` (the columns of [`MetricsRow`], in order).
pub fn header() -> String {
    let mut csv = csv::Writer::from_writer(Vec::new());
    csv.serialize(MetricsRow::default())
        .expect("a MetricsRow serializes");
    let text = String::from_utf8(csv.into_inner().expect("in memory")).expect("utf-8");
    text.lines().next().unwrap_or_default().to_string()
}

impl MetricsRow {
    /// The row as TensorBoard scalars, one per column after `frames` (the step), in column
    /// order: SB3's tags where SB3 logs the same value (`rollout/ep_rew_mean`, `time/fps`,
    /// `train/approx_kl`, `train/clip_fraction`, ...), recur's own under the same sections.
    pub fn scalars(&self) -> [(&'static str, f64); 16] {
        [
            ("time/time_elapsed", self.wall_s),
            ("time/iterations", self.updates as f64),
            ("rollout/ep_rew_mean", self.mean_return),
            ("train/policy_lag", self.policy_lag),
            ("time/episodes", self.episodes as f64),
            ("train/loss", self.loss.into()),
            ("train/policy_loss", self.policy_loss.into()),
            ("train/value_loss", self.value_loss.into()),
            ("train/entropy", self.entropy.into()),
            ("train/approx_kl", self.approx_kl.into()),
            ("train/clip_fraction", self.clip_frac.into()),
            ("train/grad_norm", self.grad_norm.into()),
            ("time/fps", self.frames_per_s),
            ("rollout/dropped_chunks", self.dropped_chunks as f64),
            ("train/q_mean", self.q_mean.into()),
            ("rollout/ep_rew_mean_100", self.mean_return_100),
        ]
    }
}

/// Appends rows to `metrics.csv` or `eval.csv` (header written when the file is new), and to
/// the run's TensorBoard event file when it has one (`None`: `run.tensorboard = false`), each
/// row flushed before `write` returns. Errors name the file (a full disk too).
pub struct MetricsWriter {
    csv: csv::Writer<std::fs::File>,
    path: std::path::PathBuf,
    tensorboard: Option<TensorBoard>,
}

impl MetricsWriter {
    pub fn open(path: &Path, tensorboard: Option<TensorBoard>) -> std::io::Result<Self> {
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
            tensorboard,
        })
    }

    /// The event file the rows also go to, for the other writers of the run (`eval.csv`'s).
    pub fn tensorboard(&self) -> Option<TensorBoard> {
        self.tensorboard.clone()
    }

    /// Appends `row` to `metrics.csv` and, at step `frames`, to the event file.
    pub fn write(&mut self, row: &MetricsRow) -> std::io::Result<()> {
        self.append(row, row.frames, &row.scalars())
    }

    /// Appends `row` to the CSV file and `scalars` at step `frames` to the event file.
    pub fn append(
        &mut self,
        row: &impl Serialize,
        frames: u64,
        scalars: &[(&str, f64)],
    ) -> std::io::Result<()> {
        self.csv
            .serialize(row)
            .map_err(std::io::Error::other)
            .and_then(|()| self.csv.flush())
            .map_err(|e| named(&self.path, e))?;
        match &self.tensorboard {
            Some(tb) => tb.scalars(frames, scalars),
            None => Ok(()),
        }
    }
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
    // A file from before the last columns were added gets them (NaN) so that the rows the
    // resumed run appends sit under the right header.
    let current = self::header();
    let missing = match current.strip_prefix(header) {
        Some(rest) if header != current && rest.starts_with(',') => rest.split(',').count() - 1,
        _ => 0,
    };
    let pad = ",NaN".repeat(missing);
    let mut kept = vec![if missing > 0 { current } else { header.into() }];
    let mut dropped = 0;
    // `updates` is the third column (a contract of MetricsRow).
    for line in lines {
        let fields: Vec<&str> = line.split(',').collect();
        let keep = fields.len() == header.split(',').count()
            && fields[2].parse::<u64>().is_ok_and(|u| u <= updates);
        if keep {
            kept.push(format!("{line}{pad}"));
        } else {
            dropped += 1;
        }
    }
    if dropped > 0 || missing > 0 || !text.ends_with('\n') {
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

/// Draws the learning curve (mean return over frames, blue) and the greedy evaluations
/// (`eval`, green points joined by a line; may be empty) into `out` (PNG). Axis labels need a
/// TrueType font (DejaVu Sans from the system); without one the curve is drawn unlabelled and
/// the returned note says so.
pub fn plot_learning_curve(
    curve: &[(f64, f64)],
    eval: &[(f64, f64)],
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
    let max_x = curve.iter().chain(eval).map(|p| p.0).fold(1.0, f64::max);
    let (mut lo, mut hi) = curve
        .iter()
        .chain(eval)
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
    if !eval.is_empty() {
        let green = GREEN.mix(0.9);
        chart.draw_series(LineSeries::new(eval.iter().copied(), green.stroke_width(2)))?;
        chart.draw_series(eval.iter().map(|&p| Circle::new(p, 4, green.filled())))?;
    }
    root.present()?;
    Ok(note)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run written before `mean_return_100` existed, resumed: its rows get the column (NaN),
    /// the rows after the checkpoint go, and the resumed run's rows append under one header.
    #[test]
    fn resuming_a_file_without_the_last_column_adds_it() {
        let dir = std::env::temp_dir().join(format!("recur-metrics-old-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("metrics.csv");
        let old_header = header().replace(",mean_return_100", "");
        let old_row = |u: u64| format!("{},1.0,{u},0.5,0,3,0.1,0,0,0,0,0,0,100,0,0", u * 10);
        std::fs::write(
            &path,
            format!("{old_header}\n{}\n{}\n", old_row(1), old_row(2)),
        )
        .unwrap();
        assert_eq!(truncate_metrics(&path, 1).unwrap(), 1);
        let row = MetricsRow {
            frames: 20,
            updates: 2,
            mean_return: 0.75,
            mean_return_100: 0.5,
            ..MetricsRow::default()
        };
        MetricsWriter::open(&path, None)
            .unwrap()
            .write(&row)
            .unwrap();
        let rows: Vec<MetricsRow> = csv::Reader::from_path(&path)
            .unwrap()
            .deserialize()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].updates, rows[0].mean_return), (1, 0.5));
        assert!(rows[0].mean_return_100.is_nan());
        assert_eq!((rows[1].updates, rows[1].mean_return_100), (2, 0.5));
        // A current file is left as it is.
        let before = std::fs::read_to_string(&path).unwrap();
        assert_eq!(truncate_metrics(&path, 2).unwrap(), 0);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
        std::fs::remove_dir_all(&dir).unwrap();
    }

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
        MetricsWriter::open(&path, None)
            .unwrap()
            .write(&row(10, f64::NAN))
            .unwrap();
        // Reopened (a resumed run): rows are appended under the one header.
        MetricsWriter::open(&path, None)
            .unwrap()
            .write(&row(20, 1.5))
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "frames,wall_s,updates,mean_return,policy_lag,episodes,loss,policy_loss,value_loss,\
             entropy,approx_kl,clip_frac,grad_norm,frames_per_s,dropped_chunks,q_mean,\
             mean_return_100"
        );
        assert_eq!(lines[0], header());
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[1].split(',').nth(6), Some("0.5"), "{text}");
        assert_eq!(read_curve(&path).unwrap(), [(20.0, 1.5)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every column after `frames` has its TensorBoard tag, in column order, with the value
    /// the CSV holds (distinct values per column, so a swapped pair shows).
    #[test]
    fn every_column_is_a_tensorboard_scalar_with_its_value() {
        let row = MetricsRow {
            frames: 1,
            wall_s: 2.5,
            updates: 3,
            mean_return: 4.5,
            policy_lag: 5.5,
            episodes: 6,
            loss: 7.5,
            policy_loss: 8.5,
            value_loss: 9.5,
            entropy: 10.5,
            approx_kl: 11.5,
            clip_frac: 12.5,
            grad_norm: 13.5,
            frames_per_s: 14.5,
            dropped_chunks: 15,
            q_mean: 16.5,
            mean_return_100: 17.5,
        };
        let mut csv = csv::Writer::from_writer(Vec::new());
        csv.serialize(&row).unwrap();
        let text = String::from_utf8(csv.into_inner().unwrap()).unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let values: Vec<f64> = lines
            .next()
            .unwrap()
            .split(',')
            .map(|v| v.parse().unwrap())
            .collect();
        let scalars = row.scalars();
        assert_eq!(header.len(), scalars.len() + 1);
        assert_eq!(header[0], "frames");
        let pairs: Vec<(&str, &str)> = header[1..]
            .iter()
            .zip(&scalars)
            .map(|(column, s)| (*column, s.0))
            .collect();
        assert_eq!(
            pairs,
            [
                ("wall_s", "time/time_elapsed"),
                ("updates", "time/iterations"),
                ("mean_return", "rollout/ep_rew_mean"),
                ("policy_lag", "train/policy_lag"),
                ("episodes", "time/episodes"),
                ("loss", "train/loss"),
                ("policy_loss", "train/policy_loss"),
                ("value_loss", "train/value_loss"),
                ("entropy", "train/entropy"),
                ("approx_kl", "train/approx_kl"),
                ("clip_frac", "train/clip_fraction"),
                ("grad_norm", "train/grad_norm"),
                ("frames_per_s", "time/fps"),
                ("dropped_chunks", "rollout/dropped_chunks"),
                ("q_mean", "train/q_mean"),
                ("mean_return_100", "rollout/ep_rew_mean_100"),
            ]
        );
        let scalar_values: Vec<f64> = scalars.iter().map(|s| s.1).collect();
        assert_eq!(scalar_values, values[1..]);
    }

    /// A full disk (here /dev/full) is reported with the file's path.
    #[test]
    fn a_full_disk_names_the_metrics_file() {
        let dir = std::env::temp_dir().join(format!("recur-metrics-full-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("metrics.csv");
        std::os::unix::fs::symlink("/dev/full", &path).unwrap();
        let mut w = MetricsWriter::open(&path, None).unwrap();
        let err = w.write(&MetricsRow::default()).unwrap_err().to_string();
        assert!(
            err.contains("metrics.csv") && err.contains("No space left on device"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

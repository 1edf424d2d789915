//! In-process evaluation: a local actor runs the policy greedily (argmax of the head: the
//! Q-network's action, the policy's mode) for a number of episodes; [`EvalWorker`] does it
//! during a training run, in a thread of its own on snapshots of the weights, and writes
//! `eval.csv`.
//!
//! The environments come from a [`Registry`]: built-in ids, and gymnasium ids built exactly as
//! the run (or the dataset) names them, imports and `gymnasium.make` kwargs included
//! ([`env_registry`]).

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use anyhow::Context;
use burn::tensor::backend::Backend;
use common::backend::{cpu_device, Cpu};
use common::envs::{GymnasiumOptions, Registry, Success};
use common::policy::{init_policy, Policy, PolicyConfig};
use common::rollout::{Actor, ActorConfig, EpsilonSchedule, Exploration};
use common::weights::{from_blob, to_blob};
use serde::{Deserialize, Serialize};

use crate::config::{Override, TrainConfig};
use crate::run::metrics::MetricsWriter;
use crate::run::tensorboard::TensorBoard;

/// Seed base of `recur-learner eval`'s environments unless `--seed` says otherwise.
pub const EVAL_SEED: u64 = 1_000_000;

/// Returns of one evaluation.
#[derive(Clone, Debug, Serialize)]
pub struct Evaluation {
    pub episodes: usize,
    pub mean_return: f64,
    /// Population standard deviation of the episodes' returns.
    pub std_return: f64,
    pub min_return: f64,
    pub max_return: f64,
    /// The fraction of episodes that succeeded, for an environment that defines success
    /// ([`Success::of`]: MiniGrid's positive final reward); absent for the others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub success_rate: Option<f64>,
}

impl Evaluation {
    /// The statistics of finished episodes: `(return, final reward)` of each, success by
    /// `success` when the environment defines it.
    pub fn of(episodes: &[(f64, f64)], success: Option<Success>) -> Self {
        let n = episodes.len();
        let returns = episodes.iter().map(|e| e.0);
        let mean = returns.clone().sum::<f64>() / n as f64;
        let var = returns.clone().map(|r| (r - mean).powi(2)).sum::<f64>() / n as f64;
        let last: Vec<f64> = episodes.iter().map(|e| e.1).collect();
        Evaluation {
            episodes: n,
            mean_return: mean,
            std_return: var.sqrt(),
            min_return: returns.clone().fold(f64::INFINITY, f64::min),
            max_return: returns.fold(f64::NEG_INFINITY, f64::max),
            success_rate: success.and_then(|s| s.rate(&last)),
        }
    }
}

/// A row of `eval.csv`: the weights of the moment `frames` / `wall_s` of training, evaluated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalRow {
    pub frames: u64,
    pub wall_s: f64,
    pub eval_return_mean: f64,
    pub eval_return_std: f64,
    pub episodes: usize,
    /// [`Evaluation::success_rate`]: a column only in the `eval.csv` of an environment that
    /// defines success (every row of a run has the same environment, so the same columns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_success_rate: Option<f64>,
}

impl EvalRow {
    /// The row as TensorBoard scalars at step `frames` (SB3's EvalCallback tags, and recur's).
    /// `eval/success_rate` only where the environment defines success.
    pub fn scalars(&self) -> Vec<(&'static str, f64)> {
        let mut scalars = vec![
            ("eval/mean_reward", self.eval_return_mean),
            ("eval/std_reward", self.eval_return_std),
            ("eval/episodes", self.episodes as f64),
            ("eval/time_elapsed", self.wall_s),
        ];
        scalars.extend(self.eval_success_rate.map(|s| ("eval/success_rate", s)));
        scalars
    }
}

/// The built-in environments, and gymnasium ids built with `imports` and `kwargs` (a run's
/// `run.env_imports` / `run.env_kwargs`, a dataset's `env_imports` / `env_kwargs`).
pub fn env_registry(
    imports: &[String],
    kwargs: Option<serde_json::Value>,
    keys: Option<Vec<String>>,
) -> Registry {
    Registry::builtin().with_gymnasium(GymnasiumOptions {
        imports: imports.to_vec(),
        kwargs,
        keys,
        ..GymnasiumOptions::default()
    })
}

/// What an [`EvalWorker`] evaluates.
#[derive(Clone, Debug)]
pub struct EvalPlan {
    pub env: String,
    /// Builds `env` ([`env_registry`]).
    pub registry: Registry,
    pub policy: PolicyConfig,
    pub episodes: usize,
    /// Seed base of the evaluation environments (the same for every evaluation).
    pub seed: u64,
    /// Evaluate every this many frames (0: only at the end).
    pub every_frames: u64,
    /// `eval.csv` (appended to; header when new).
    pub csv: PathBuf,
    /// The run's TensorBoard event file, which gets the rows too.
    pub tensorboard: Option<TensorBoard>,
    /// Where the best weights so far are kept ([`save_best`]; `eval.keep_best`), if anywhere.
    pub best: Option<PathBuf>,
    /// The run's algorithm (`best/`'s manifest names it).
    pub algo: &'static str,
}

/// Greedy evaluation beside training (rl-zoo's EvalCallback): the training loop hands over a
/// weight blob whenever `every_frames` more frames are trained ([`EvalWorker::due`] /
/// [`EvalWorker::submit`]); a thread evaluates each in order on the CPU, off the training
/// loop, appends its row to `eval.csv` and, when the row is the best so far, keeps the weights
/// in `best/` ([`EvalPlan::best`]). [`EvalWorker::finish`] waits for the queue.
pub struct EvalWorker {
    tx: crossbeam_channel::Sender<(u64, f64, Vec<u8>)>,
    handle: JoinHandle<anyhow::Result<Vec<EvalRow>>>,
    every: u64,
    next: u64,
}

impl EvalWorker {
    /// Starts the thread; a resumed run (`frames` > 0) evaluates next at the following
    /// multiple of `every_frames`, and keeps its `best/` unless a new row reaches it.
    pub fn start(plan: EvalPlan, frames: u64) -> anyhow::Result<Self> {
        let (tx, rx) = crossbeam_channel::unbounded::<(u64, f64, Vec<u8>)>();
        // The best of the rows before a resume, if its weights were kept.
        let mut best = plan
            .best
            .as_deref()
            .filter(|dir| dir.join(BEST).exists())
            .and_then(|_| best_row(&read_eval_rows(&plan.csv)).map(|r| r.eval_return_mean));
        let mut writer = MetricsWriter::open(&plan.csv, plan.tensorboard.clone())?;
        let every = plan.every_frames;
        let handle = std::thread::Builder::new()
            .name("eval".into())
            .spawn(move || {
                let mut rows = Vec::new();
                for (frames, wall_s, blob) in rx {
                    let (policy, version) = from_blob(init_policy(&plan.policy, 0)?, &blob)?;
                    let EvalPlan { registry, env, .. } = &plan;
                    let e = evaluate(policy.clone(), registry, env, plan.episodes, plan.seed)?;
                    let row = EvalRow {
                        frames,
                        wall_s,
                        eval_return_mean: e.mean_return,
                        eval_return_std: e.std_return,
                        episodes: e.episodes,
                        eval_success_rate: e.success_rate,
                    };
                    let success = row
                        .eval_success_rate
                        .map_or(String::new(), |s| format!(", success rate {s:.2}"));
                    tracing::info!(
                        "eval at {frames} frames ({wall_s:.1} s): greedy return {:.2} +- {:.2} over {} episodes{success}",
                        row.eval_return_mean,
                        row.eval_return_std,
                        row.episodes
                    );
                    writer.append(&row, row.frames, &row.scalars())?;
                    if let Some(dir) = &plan.best {
                        if best.is_none_or(|b| row.eval_return_mean >= b) {
                            save_best(dir, &policy, plan.algo, version, &row)?;
                            best = Some(row.eval_return_mean);
                        }
                    }
                    rows.push(row);
                }
                Ok(rows)
            })?;
        Ok(EvalWorker {
            tx,
            handle,
            every,
            next: next_multiple(frames, every),
        })
    }

    /// Whether the weights after `frames` trained frames are due for an evaluation.
    pub fn due(&self, frames: u64) -> bool {
        frames >= self.next
    }

    /// Queues an evaluation of `blob`, the weights after `frames` frames and `wall_s` seconds.
    pub fn submit(&mut self, frames: u64, wall_s: f64, blob: Vec<u8>) {
        self.next = next_multiple(frames, self.every);
        // A send fails only when the thread ended on an error, which finish() reports.
        let _ = self.tx.send((frames, wall_s, blob));
    }

    /// Queues the final weights (unless that point was just evaluated), waits for every
    /// queued evaluation and returns the rows of this process.
    pub fn finish(mut self, last: Option<(u64, f64, Vec<u8>)>) -> anyhow::Result<Vec<EvalRow>> {
        if let Some((frames, wall_s, blob)) = last {
            self.submit(frames, wall_s, blob);
        }
        drop(self.tx);
        self.handle
            .join()
            .map_err(|_| anyhow::anyhow!("the evaluation thread panicked"))?
            .context("evaluation during training")
    }
}

/// The first multiple of `every` after `frames` (never, for `every` = 0).
fn next_multiple(frames: u64, every: u64) -> u64 {
    frames
        .checked_div(every)
        .map_or(u64::MAX, |k| (k + 1) * every)
}

/// The first row whose mean return reaches `target`: its frames and wall seconds.
pub fn first_at_target(rows: &[EvalRow], target: Option<f64>) -> Option<(u64, f64)> {
    let target = target?;
    rows.iter()
        .find(|r| r.eval_return_mean >= target)
        .map(|r| (r.frames, r.wall_s))
}

/// The row of the best mean return; of several, the last.
pub fn best_row(rows: &[EvalRow]) -> Option<&EvalRow> {
    // `max_by` returns the last of equal maxima.
    rows.iter()
        .max_by(|a, b| a.eval_return_mean.total_cmp(&b.eval_return_mean))
}

/// What `best/best.json` says of the weights beside it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BestWeights {
    /// The weights' policy version.
    pub version: u64,
    #[serde(flatten)]
    pub row: EvalRow,
}

/// `best/`'s description of its weights.
pub const BEST: &str = "best.json";

/// Keeps `policy` (policy version `version`, evaluated as `row`) in `dir`, a checkpoint
/// directory of the policy only for `algo` ([`common::checkpoint::save_policy`]), with
/// `best.json` ([`BestWeights`]) beside it.
pub fn save_best(
    dir: &Path,
    policy: &Policy<Cpu>,
    algo: &str,
    version: u64,
    row: &EvalRow,
) -> anyhow::Result<()> {
    let best = BestWeights {
        version,
        row: row.clone(),
    };
    let json = (serde_json::to_string_pretty(&best)? + "\n").into_bytes();
    common::checkpoint::save_policy(dir, policy, algo, version, &[(BEST, json)])
}

/// Reads the rows of an `eval.csv` (missing file: none; rows cut short are skipped).
pub fn read_eval_rows(path: &Path) -> Vec<EvalRow> {
    let Ok(mut reader) = csv::Reader::from_path(path) else {
        return Vec::new();
    };
    reader
        .deserialize::<EvalRow>()
        .filter_map(Result::ok)
        .collect()
}

/// What `recur-learner eval` prints.
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointEvaluation {
    pub checkpoint: String,
    pub env: String,
    /// The weights' policy version.
    pub version: u64,
    pub seed: u64,
    #[serde(flatten)]
    pub evaluation: Evaluation,
}

/// Evaluates the policy of a checkpoint (a run directory or its `checkpoint/`) greedily on
/// `episodes` environments of `env` (default: `run.env` of the run's `config.toml`, built with
/// its `run.env_imports` and `run.env_kwargs`; `overrides`: `--set` over that config.toml).
pub fn evaluate_checkpoint(
    dir: &Path,
    env: Option<&str>,
    episodes: usize,
    seed: u64,
    overrides: &[Override],
) -> anyhow::Result<CheckpointEvaluation> {
    anyhow::ensure!(episodes > 0, "--episodes 0: at least one episode");
    let (policy, version) = common::checkpoint::load_checkpoint_policy(dir)?;
    let (env, registry) = match env {
        Some(e) if overrides.is_empty() => (e.to_string(), Registry::builtin()),
        _ => {
            let run = run_env(dir, overrides)?;
            let registry = env_registry(&run.env_imports, run.env_kwargs, run.env_keys);
            (env.map_or(run.env, str::to_string), registry)
        }
    };
    let evaluation = evaluate(policy, &registry, &env, episodes, seed)?;
    Ok(CheckpointEvaluation {
        checkpoint: dir.display().to_string(),
        env,
        version,
        seed,
        evaluation,
    })
}

/// The environment of a run's `config.toml`.
#[derive(Deserialize)]
struct RunEnv {
    env: String,
    #[serde(default)]
    env_imports: Vec<String>,
    #[serde(default)]
    env_kwargs: Option<serde_json::Value>,
    #[serde(default)]
    env_keys: Option<Vec<String>>,
}

/// `run.env` (with its imports and kwargs) of the `config.toml` of run directory `dir` (or of
/// the run holding checkpoint directory `dir`); with `overrides`, of that config overridden
/// and checked as a training config.
fn run_env(dir: &Path, overrides: &[Override]) -> anyhow::Result<RunEnv> {
    let path = [dir.join("config.toml"), dir.join("../config.toml")]
        .into_iter()
        .find(|p| p.exists())
        .with_context(|| {
            format!(
                "{} holds no config.toml to name the environment: pass --env",
                dir.display()
            )
        })?;
    if !overrides.is_empty() {
        let run = TrainConfig::load_with(&path, overrides)?.run;
        return Ok(RunEnv {
            env_kwargs: run.env_kwargs_json(),
            env: run.env,
            env_imports: run.env_imports,
            env_keys: run.env_keys,
        });
    }
    let text = std::fs::read_to_string(&path)?;
    let value: toml::Value =
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let run = value
        .get("run")
        .filter(|r| r.get("env").is_some_and(toml::Value::is_str))
        .with_context(|| format!("{} has no run.env: pass --env", path.display()))?;
    run.clone().try_into().with_context(|| {
        format!(
            "{}: [run] env, env_imports, env_kwargs, env_keys",
            path.display()
        )
    })
}

/// Steps per evaluation chunk, and the most chunks an evaluation may take.
const STEPS: usize = 64;
const MAX_CHUNKS: usize = 1000;

/// The policy on the CPU backend (actors and evaluation run there): a clone when it already is
/// a CPU policy, otherwise a CPU policy loaded with its weights (copied to the host).
pub fn host_policy<B: Backend>(policy: &Policy<B>) -> anyhow::Result<Policy<Cpu>> {
    if let Some(cpu) = (policy as &dyn std::any::Any).downcast_ref::<Policy<Cpu>>() {
        return Ok(cpu.clone());
    }
    let cpu = policy.config().init::<Cpu>(&cpu_device())?;
    Ok(from_blob(cpu, &to_blob(policy, 0))?.0)
}

/// Runs `episodes` greedy episodes of `env`, built by `registry` (one per environment, all in
/// parallel), and averages their returns; the success rate where `env` defines success
/// ([`Success::of`]).
pub fn evaluate(
    policy: Policy<Cpu>,
    registry: &Registry,
    env: &str,
    episodes: usize,
    seed: u64,
) -> anyhow::Result<Evaluation> {
    let envs = registry.make_vec(env, episodes, seed)?;
    let config = ActorConfig {
        exploration: Exploration::Greedy(EpsilonSchedule::constant(0.0)),
        ..ActorConfig::new(env, episodes, STEPS, seed)
    };
    let mut actor = Actor::with_envs(config, policy, envs)?;
    // The first episode of every environment: no bias towards short episodes.
    let mut first: Vec<Option<(f64, f64)>> = vec![None; episodes];
    for _ in 0..MAX_CHUNKS {
        actor.collect()?;
        for ep in actor.take_finished() {
            first[ep.env].get_or_insert((ep.ret, ep.last_reward));
        }
        if first.iter().all(Option::is_some) {
            let finished: Vec<(f64, f64)> = first.into_iter().flatten().collect();
            return Ok(Evaluation::of(&finished, Success::of(env)));
        }
    }
    anyhow::bail!(
        "evaluation on {env}: {} of {episodes} episodes still running after {} steps",
        first.iter().filter(|r| r.is_none()).count(),
        MAX_CHUNKS * STEPS
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Statistics of finished episodes; `success_rate` (JSON and eval.csv) only where the
    /// environment defines success, counted on final rewards, not returns.
    #[test]
    fn evaluation_reports_success_only_where_defined() {
        // (return, final reward): two successes, a wrong choice after a shaped reward, a time-out.
        let episodes = [(0.9, 0.9), (0.2, 0.2), (0.5, 0.0), (0.0, 0.0)];
        let e = Evaluation::of(&episodes, Success::of("gymnasium:MiniGrid-MemoryS7-v0"));
        assert_eq!(e.episodes, 4);
        assert!((e.mean_return - 0.4).abs() < 1e-12, "{e:?}");
        assert_eq!((e.min_return, e.max_return), (0.0, 0.9));
        assert_eq!(e.success_rate, Some(0.5));
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["success_rate"], 0.5, "{json}");
        let plain = Evaluation::of(&episodes, Success::of("CartPole-v1"));
        assert_eq!(plain.success_rate, None);
        let json = serde_json::to_value(&plain).unwrap();
        assert!(json.get("success_rate").is_none(), "{json}");
        assert_eq!(json["mean_return"], e.mean_return, "{json}");

        // eval.csv: the column only with a success rate, and rows read back either way.
        let row = |s| EvalRow {
            frames: 10,
            wall_s: 1.0,
            eval_return_mean: 0.4,
            eval_return_std: 0.1,
            episodes: 4,
            eval_success_rate: s,
        };
        for (rate, header) in [
            (
                None,
                "frames,wall_s,eval_return_mean,eval_return_std,episodes",
            ),
            (
                Some(0.5),
                "frames,wall_s,eval_return_mean,eval_return_std,episodes,eval_success_rate",
            ),
        ] {
            let mut w = csv::Writer::from_writer(Vec::new());
            w.serialize(row(rate)).unwrap();
            let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
            assert_eq!(text.lines().next(), Some(header), "{text}");
            let back: Vec<EvalRow> = csv::Reader::from_reader(text.as_bytes())
                .deserialize()
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(back, vec![row(rate)]);
            assert_eq!(
                row(rate)
                    .scalars()
                    .iter()
                    .any(|s| s.0 == "eval/success_rate"),
                rate.is_some()
            );
        }
    }

    /// The worker evaluates every submitted snapshot in order, plus the final one, and
    /// eval.csv holds the same rows.
    #[test]
    fn worker_evaluates_snapshots_and_writes_eval_csv() {
        let dir = std::env::temp_dir().join(format!("recur-eval-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let csv = dir.join("eval.csv");
        let _ = std::fs::remove_file(&csv);
        let pc = common::policy::policy_config_for("CartPole-v1").unwrap();
        let policy = pc.init_seeded::<Cpu>(1, &cpu_device()).unwrap();
        let mut worker = EvalWorker::start(
            EvalPlan {
                env: "CartPole-v1".into(),
                registry: Registry::builtin(),
                policy: pc,
                episodes: 3,
                seed: 5,
                every_frames: 100,
                csv: csv.clone(),
                tensorboard: None,
                best: None,
                algo: "ppo",
            },
            0,
        )
        .unwrap();
        assert!(!worker.due(99) && worker.due(100));
        worker.submit(120, 1.0, to_blob(&policy, 2));
        assert!(!worker.due(199) && worker.due(200));
        let rows = worker
            .finish(Some((250, 2.0, to_blob(&policy, 3))))
            .unwrap();
        assert_eq!(
            rows.iter().map(|r| r.frames).collect::<Vec<_>>(),
            [120, 250]
        );
        // The same weights on the same seeds: the same greedy returns.
        assert_eq!(rows[0].eval_return_mean, rows[1].eval_return_mean);
        assert!(rows
            .iter()
            .all(|r| r.episodes == 3 && r.eval_return_mean >= 1.0));
        assert_eq!(read_eval_rows(&csv), rows);
        assert_eq!(
            first_at_target(&rows, Some(rows[0].eval_return_mean)),
            Some((120, 1.0))
        );
        assert_eq!(first_at_target(&rows, Some(1e9)), None);
        assert!(!dir.join("best").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `best/` holds the weights of the best row (the later of a tie), as a checkpoint
    /// directory; a resumed worker keeps it against a worse row and replaces it on a tie.
    #[test]
    fn worker_keeps_the_best_weights_across_a_resume() {
        let dir = std::env::temp_dir().join(format!("recur-eval-best-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let pc = common::policy::policy_config_for("CartPole-v1").unwrap();
        let plan = EvalPlan {
            env: "CartPole-v1".into(),
            registry: Registry::builtin(),
            policy: pc.clone(),
            episodes: 4,
            seed: 9,
            every_frames: 100,
            csv: dir.join("eval.csv"),
            tensorboard: None,
            best: Some(dir.join("best")),
            algo: "ppo",
        };
        let blobs: Vec<Vec<u8>> = (0..6u64)
            .map(|s| to_blob(&pc.init_seeded::<Cpu>(s, &cpu_device()).unwrap(), s))
            .collect();
        let mut worker = EvalWorker::start(plan.clone(), 0).unwrap();
        for (i, blob) in blobs.iter().enumerate().take(5) {
            worker.submit(100 * (i as u64 + 1), i as f64, blob.clone());
        }
        let rows = worker.finish(None).unwrap();
        let means: Vec<f64> = rows.iter().map(|r| r.eval_return_mean).collect();
        assert!(
            means.iter().any(|m| *m != means[0]),
            "random policies with equal returns test nothing: {means:?}"
        );
        let read_best = || -> (BestWeights, Vec<u8>) {
            let best = std::fs::read(dir.join("best").join(BEST)).unwrap();
            let weights = std::fs::read(dir.join("best/weights.bin")).unwrap();
            (serde_json::from_slice(&best).unwrap(), weights)
        };
        let top = best_row(&rows).unwrap().clone();
        let at = rows.iter().rposition(|r| *r == top).unwrap();
        assert_eq!(
            means.iter().cloned().fold(f64::MIN, f64::max),
            top.eval_return_mean
        );
        assert_eq!(
            read_best(),
            (
                BestWeights {
                    version: at as u64,
                    row: top.clone()
                },
                blobs[at].clone()
            )
        );
        // What `recur-learner eval --checkpoint RUN/best` loads: the same weights.
        let (policy, version) =
            common::checkpoint::load_checkpoint_policy(&dir.join("best")).unwrap();
        assert_eq!(
            (to_blob(&policy, version), version),
            (blobs[at].clone(), at as u64)
        );

        // Resumed: the worst weights again leave best/ alone; the best ones again (a tie)
        // replace it with the later row.
        let worst = rows
            .iter()
            .position(|r| r.eval_return_mean < top.eval_return_mean)
            .unwrap();
        let mut worker = EvalWorker::start(plan.clone(), 500).unwrap();
        worker.submit(600, 6.0, blobs[worst].clone());
        worker.finish(None).unwrap();
        assert_eq!(read_best().0.row, top);
        let plan_for_error = plan.clone();
        let mut worker = EvalWorker::start(plan, 600).unwrap();
        worker.submit(700, 7.0, blobs[at].clone());
        let tie = worker.finish(None).unwrap();
        assert_eq!(tie[0].eval_return_mean, top.eval_return_mean);
        assert_eq!(read_best().0.row, tie[0]);
        assert_eq!(
            best_row(&read_eval_rows(&dir.join("eval.csv"))),
            Some(&tie[0])
        );

        // best/ that cannot be written: the worker's finish names it (the run then stops
        // as after any failed write of its files).
        let mut worker = EvalWorker::start(
            EvalPlan {
                best: Some(PathBuf::from("/dev/null/best")),
                csv: dir.join("eval2.csv"),
                ..plan_for_error
            },
            0,
        )
        .unwrap();
        worker.submit(100, 1.0, blobs[0].clone());
        let err = format!("{:#}", worker.finish(None).unwrap_err());
        assert!(err.contains("/dev/null/best"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
    use burn::module::AutodiffModule;
    use common::backend::CpuAutodiff;
    use common::policy::policy_config_for;

    #[test]
    fn host_policy_keeps_the_weights_on_both_paths() {
        let pc = policy_config_for("MaskedCartPole-v1").unwrap();
        let trained = pc.init_seeded::<CpuAutodiff>(3, &cpu_device()).unwrap();
        let blob = to_blob(&trained, 0);
        // Another backend goes through the host copy (a GPU model's path) ...
        assert_eq!(to_blob(&host_policy(&trained).unwrap(), 0), blob);
        // ... a CPU policy is cloned.
        assert_eq!(to_blob(&host_policy(&trained.valid()).unwrap(), 0), blob);
    }
}

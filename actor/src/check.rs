//! The spec check (TorchRL's `check_env_specs`): a short rollout whose every field is checked
//! against the declared spaces and the policy's primer. It runs at actor start and as
//! `recur-actor --check-env ENV`; a mismatch names the field, the expected and the observed
//! value.

use burn::tensor::{Bool, Tensor, TensorData};
use common::backend::{cpu_device, to_vec, Cpu};
use common::chunk::{ActionColumn, Chunk};
use common::envs::{ActionRef, Registry, Space};
use common::policy::Policy;
use common::rollout::{Actor, ActorConfig};
use recur_rnn::RecurrentState;

/// One step's recurrent state on the host: `rs_h` and (LSTM) `rs_c`, `[L * H]` each.
pub type HostState = (Vec<f32>, Option<Vec<f32>>);

/// A field that does not match its spec.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("spec check of {env}: `{field}` at env {env_index}, step {step}: expected {expected}, observed {observed}")]
pub struct SpecMismatch {
    pub env: String,
    pub field: String,
    pub env_index: usize,
    pub step: usize,
    pub expected: String,
    pub observed: String,
}

/// What a passing check covered.
#[derive(Clone, Debug, PartialEq)]
pub struct SpecReport {
    pub env: String,
    pub envs: usize,
    pub steps: usize,
    pub chunks: usize,
    pub episodes_finished: usize,
    pub fields: Vec<&'static str>,
}

/// Rolls out `chunks` chunks of `steps` steps on `envs` environments of `env` (built by
/// `registry`) with `policy` and checks every field.
pub fn check_env_specs(
    registry: &Registry,
    env: &str,
    policy: Policy<Cpu>,
    envs: usize,
    steps: usize,
    chunks: usize,
    seed: u64,
) -> anyhow::Result<SpecReport> {
    let config = ActorConfig::new(env, envs, steps, seed);
    let envs_built = registry.make_vec(env, envs, seed)?;
    let mut actor = Actor::with_envs(config, policy, envs_built)?;
    let mut checker = Checker::new(&actor);
    for _ in 0..chunks {
        let chunk = actor.collect()?;
        checker.check(&actor, &chunk)?;
    }
    Ok(SpecReport {
        env: env.to_string(),
        envs,
        steps,
        chunks,
        episodes_finished: actor.take_finished().len(),
        fields: actor.schema().fields().iter().map(|f| f.key).collect(),
    })
}

/// Checks consecutive chunks of one actor, carrying what crosses chunk boundaries.
pub struct Checker {
    env: String,
    obs_space: Space,
    action_space: Space,
    /// Per env: `next.done` of the last step of the previous chunk (`None` before the first).
    last_done: Vec<Option<bool>>,
    last_traj: Vec<Option<i64>>,
    /// Per env: the recurrent state after the previous step, `[L*H]` per entry.
    last_next: Vec<Option<HostState>>,
}

impl Checker {
    pub fn new(actor: &Actor) -> Self {
        let e = actor.schema().envs;
        Checker {
            env: actor.config().env.clone(),
            obs_space: actor.observation_space().clone(),
            action_space: actor.action_space().clone(),
            last_done: vec![None; e],
            last_traj: vec![None; e],
            last_next: vec![None; e],
        }
    }

    /// Checks every field of `chunk`, which `actor` just produced.
    pub fn check(&mut self, actor: &Actor, chunk: &Chunk) -> Result<(), SpecMismatch> {
        let s = actor.schema();
        let (e, t_len, d, lh) = (s.envs, s.steps, s.obs_dim, s.num_layers * s.hidden_size);
        let primer = actor.policy().primer();
        // What holds for the whole chunk (named at env 0, step 0).
        let whole = |field: &str, expected: String, observed: String| {
            self.mismatch(field, 0, 0, expected, observed)
        };
        let shape = [s.num_layers, s.hidden_size];
        if let Some(entry) = primer.entries.iter().find(|e| e.shape != shape) {
            let observed = format!("{:?}", entry.shape);
            return Err(whole(entry.key, format!("{shape:?}"), observed));
        }
        let (expected, observed) = (primer.entry("rs_c").is_some(), chunk.rs_c.is_some());
        if expected != observed {
            let present = |p: bool| format!("present = {p}");
            return Err(whole("rs_c", present(expected), present(observed)));
        }
        let schema = "a chunk of the run's schema";
        chunk
            .validate(s)
            .map_err(|e| whole("chunk", schema.into(), e.to_string()))?;
        // Recompute ("next", state) of every step with the policy to check the carry.
        let nexts = next_states(actor.policy(), chunk, s.envs, s.steps);
        for env in 0..e {
            for t in 0..t_len {
                let p = env * t_len + t;
                let at = |field: &str, expected: String, observed: String| {
                    self.mismatch(field, env, t, expected, observed)
                };
                for (field, obs) in [
                    ("observation", &chunk.observation),
                    ("next.observation", &chunk.next_observation),
                ] {
                    let o = &obs[p * d..(p + 1) * d];
                    if !self.obs_space.contains_obs(o) {
                        return Err(at(field, self.obs_space.describe(), format!("{o:?}")));
                    }
                }
                let k = s.action_dim();
                let action = match &chunk.action {
                    ActionColumn::Discrete(a) if k > 1 => {
                        ActionRef::MultiDiscrete(&a[p * k..(p + 1) * k])
                    }
                    ActionColumn::Discrete(a) => ActionRef::Discrete(a[p]),
                    ActionColumn::Continuous(a) => ActionRef::Continuous(&a[p * k..(p + 1) * k]),
                };
                if !self.action_space.contains_action(action) {
                    let observed = match action {
                        ActionRef::Discrete(a) => a.to_string(),
                        ActionRef::MultiDiscrete(a) => format!("{a:?}"),
                        ActionRef::Continuous(a) => format!("{a:?}"),
                    };
                    return Err(at("action", self.action_space.describe(), observed));
                }
                if matches!(
                    self.action_space,
                    Space::Discrete { .. } | Space::MultiDiscrete { .. }
                ) && chunk.sample_log_prob[p] > 1e-6
                {
                    return Err(at(
                        "sample_log_prob",
                        "<= 0 (a probability's log)".into(),
                        chunk.sample_log_prob[p].to_string(),
                    ));
                }
                let (term, trunc) = (chunk.next_terminated[p], chunk.next_truncated[p]);
                let done = chunk.next_done[p];
                if done != (term | trunc) || term > 1 || trunc > 1 {
                    return Err(at(
                        "next.done",
                        format!("terminated | truncated = {}", term | trunc),
                        done.to_string(),
                    ));
                }
                // is_init exactly at episode starts: the very first step, and after every done.
                let (previous_done, previous_traj) = if t == 0 {
                    (self.last_done[env], self.last_traj[env])
                } else {
                    (
                        Some(chunk.next_done[p - 1] == 1),
                        Some(chunk.traj_ids[p - 1]),
                    )
                };
                let expected_init = previous_done.unwrap_or(true);
                if (chunk.is_init[p] == 1) != expected_init {
                    return Err(at(
                        "is_init",
                        expected_init.to_string(),
                        (chunk.is_init[p] == 1).to_string(),
                    ));
                }
                // The primer's zeros at every episode start; the carried state elsewhere.
                let rs_h = &chunk.rs_h[p * lh..(p + 1) * lh];
                let rs_c = chunk.rs_c.as_ref().map(|c| &c[p * lh..(p + 1) * lh]);
                if expected_init {
                    for (key, v) in [("rs_h", Some(rs_h)), ("rs_c", rs_c)] {
                        if let Some(v) = v.filter(|v| v.iter().any(|&x| x != 0.0)) {
                            return Err(at(
                                key,
                                "zeros (the primer's state at is_init)".into(),
                                format!(
                                    "max |x| = {}",
                                    v.iter().fold(0.0f32, |m, x| m.max(x.abs()))
                                ),
                            ));
                        }
                    }
                } else if let Some((h, c)) = &self.last_next[env] {
                    let diff = max_diff(rs_h, h).max(match (rs_c, c) {
                        (Some(a), Some(b)) => max_diff(a, b),
                        _ => 0.0,
                    });
                    if diff > 1e-5 {
                        return Err(at(
                            "rs_h",
                            "(\"next\", rs_h) of the previous step".into(),
                            format!("max |diff| = {diff}"),
                        ));
                    }
                }
                // One trajectory id per episode.
                let traj = chunk.traj_ids[p];
                if let Some(prev) = previous_traj.filter(|&prev| (traj != prev) != expected_init) {
                    let relation = if expected_init {
                        "different from"
                    } else {
                        "equal to"
                    };
                    return Err(at(
                        "collector.traj_ids",
                        format!("{relation} the previous step's id {prev}"),
                        traj.to_string(),
                    ));
                }
                self.last_next[env] = Some(nexts[p].clone());
            }
            self.last_done[env] = Some(chunk.next_done[env * t_len + t_len - 1] == 1);
            self.last_traj[env] = Some(chunk.traj_ids[env * t_len + t_len - 1]);
        }
        Ok(())
    }

    fn mismatch(
        &self,
        field: &str,
        env_index: usize,
        step: usize,
        expected: String,
        observed: String,
    ) -> SpecMismatch {
        SpecMismatch {
            env: self.env.clone(),
            field: field.to_string(),
            env_index,
            step,
            expected,
            observed,
        }
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0.0, |m, (x, y)| m.max((x - y).abs()))
}

/// `("next", state)` of every `(env, t)` of a chunk, recomputed with one sequential-mode call
/// on all `E * T` rows (each row is an independent step from its stored state).
pub fn next_states(
    policy: &Policy<Cpu>,
    chunk: &Chunk,
    envs: usize,
    steps: usize,
) -> Vec<HostState> {
    let cfg = policy.config();
    let (n, d) = (envs * steps, cfg.obs_dim);
    let (l, h) = (cfg.state_layers(), policy.core.hidden_size());
    let device = cpu_device();
    let obs =
        Tensor::<Cpu, 2>::from_data(TensorData::new(chunk.observation.clone(), [n, d]), &device);
    let is_init: Vec<bool> = chunk.is_init.iter().map(|&x| x == 1).collect();
    let is_init = Tensor::<Cpu, 1, Bool>::from_data(TensorData::new(is_init, [n]), &device);
    let state =
        |v: &Vec<f32>| Tensor::<Cpu, 3>::from_data(TensorData::new(v.clone(), [n, l, h]), &device);
    let pixels = common::policy::pixel_tensor(&chunk.pixels, [n, cfg.pixels()], &device);
    let out = policy
        .forward(
            obs,
            pixels,
            is_init,
            RecurrentState {
                rs_h: state(&chunk.rs_h),
                rs_c: chunk.rs_c.as_ref().map(state),
            },
        )
        .expect("the chunk matches the policy");
    let hs = to_vec(out.next.rs_h);
    let cs = out.next.rs_c.map(to_vec);
    (0..n)
        .map(|p| {
            let r = p * l * h..(p + 1) * l * h;
            (hs[r.clone()].to_vec(), cs.as_ref().map(|c| c[r].to_vec()))
        })
        .collect()
}

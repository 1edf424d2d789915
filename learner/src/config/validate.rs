//! The validation pass every config goes through after parsing (and after command-line
//! overrides): ranges, finite floats, the combinations that cannot work. Every error names the
//! key and the value ([`ConfigError::Invalid`]).

use common::backend::TrainDevice;
use common::policy::CriticCore;

use super::schema::{
    Algo, AlgoConfig, CollectorMode, DqnSection, EvalSection, PolicySection, PpoSection,
    ReplayConfig, SliceTraining, TrainConfig,
};
use super::ConfigError;

impl TrainConfig {
    /// Checks every range; errors name the key and the value.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let v = Checker { origin };
        v.environment(&self.run, &self.collector)?;
        v.check("run.frames", self.run.frames, Range::AtLeastOne)?;
        if let Some(a) = self.run.actors {
            if a == 0 && self.run.listen.is_none() {
                return v.fail(
                    "run.actors",
                    a,
                    "in 1..2048 (0 only with `run.listen`, for remote actors)",
                );
            }
            if a >= 2048 {
                return v.fail("run.actors", a, "in 1..2048");
            }
        }
        let c = &self.collector;
        if let Some(listen) = &self.run.listen {
            let port = listen
                .rsplit_once(':')
                .map(|(host, port)| (host, port.parse::<u16>()));
            if !matches!(port, Some((host, Ok(_))) if !host.is_empty()) {
                return v.fail(
                    "run.listen",
                    format!("{listen:?}"),
                    "HOST:PORT, e.g. \"0.0.0.0:7070\" (port 0: any free port)",
                );
            }
            if c.mode == CollectorMode::Sync {
                return v.fail(
                    "collector.mode",
                    "\"sync\"",
                    "\"async\" with `run.listen` (sync collection counts the learner's own actors)",
                );
            }
        }
        v.check(
            "collector.envs_per_actor",
            c.envs_per_actor,
            Range::AtLeastOne,
        )?;
        v.check("collector.steps", c.steps, Range::AtLeastOne)?;
        if c.ring_slots < 2 {
            return v.fail("collector.ring_slots", c.ring_slots, "at least 2");
        }
        v.device("run.device", self.run.device)?;
        v.policy(&self.policy)?;
        if self.run.algo == Algo::Bc {
            return v.fail(
                "run.algo",
                "\"bc\"",
                "\"ppo\" or \"dqn\" (behaviour cloning trains from a dataset: recur-learner replay)",
            );
        }
        let chunk = c.envs_per_actor * c.steps;
        v.algorithm("run.algo", self.run.algo, self.selected(), Some(chunk))?;
        v.train_bounds(self)?;
        v.learning_quality(self.run.algo, &self.policy, self.eval.as_ref())
    }
}

impl ReplayConfig {
    /// Checks the replay section, the policy and the section of `replay.algo`.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let v = Checker { origin };
        let r = &self.replay;
        v.check("replay.updates", r.updates, Range::AtLeastOne)?;
        v.check("replay.eval_episodes", r.eval_episodes, Range::AtLeastOne)?;
        v.device("replay.device", r.device)?;
        v.policy(&self.policy)?;
        v.algorithm("replay.algo", r.algo, self.selected(), None)?;
        v.replay_bounds(self)?;
        v.learning_quality(r.algo, &self.policy, None)
    }
}

/// The ranges config numbers must lie in (floats also finite), named as errors show them.
#[derive(Clone, Copy, Debug)]
enum Range {
    AtLeastOne,
    Positive,
    NonNegative,
    Unit,
    Probability,
    PositiveUnit,
}

impl Range {
    fn contains(self, v: f64) -> bool {
        v.is_finite()
            && match self {
                Range::AtLeastOne => v >= 1.0,
                Range::Positive => v > 0.0,
                Range::NonNegative => v >= 0.0,
                Range::Unit | Range::Probability => (0.0..=1.0).contains(&v),
                Range::PositiveUnit => v > 0.0 && v <= 1.0,
            }
    }

    fn expected(self) -> &'static str {
        match self {
            Range::AtLeastOne => "at least 1",
            Range::Positive => "a positive number",
            Range::NonNegative => "a number >= 0",
            Range::Unit => "in [0, 1]",
            Range::Probability => "a probability in [0, 1]",
            Range::PositiveUnit => "in (0, 1]",
        }
    }
}

/// A config number: shown as written, compared as `f64`.
trait Number: Copy + std::fmt::Display {
    fn value(self) -> f64;
}

macro_rules! number {
    ($($t:ty),*) => {
        $(impl Number for $t {
            fn value(self) -> f64 {
                self as f64
            }
        })*
    };
}
number!(usize, u64, f32, f64);

/// The validation of one config (`origin`): every error names the key and the value.
pub(super) struct Checker<'a> {
    pub(super) origin: &'a str,
}

impl Checker<'_> {
    pub(super) fn fail(
        &self,
        key: &str,
        value: impl std::fmt::Display,
        expected: &str,
    ) -> Result<(), ConfigError> {
        Err(ConfigError::Invalid {
            path: self.origin.to_string(),
            key: key.to_string(),
            value: value.to_string(),
            expected: expected.to_string(),
        })
    }

    /// `key` = `value` must lie in `range`.
    fn check(&self, key: &str, value: impl Number, range: Range) -> Result<(), ConfigError> {
        if range.contains(value.value()) {
            return Ok(());
        }
        self.fail(key, value, range.expected())
    }

    /// The device must be built in (`--features cuda` for CUDA). (`fused` runs on CUDA too:
    /// the CubeCL kernels, `recur_rnn::backend::cube`.)
    fn device(&self, key: &str, device: TrainDevice) -> Result<(), ConfigError> {
        device.check_built().or_else(|_| {
            self.fail(
                key,
                format!("\"{device}\""),
                "\"cpu\": this binary was built without `--features cuda` (rebuild with \
                 `cargo build --release --features cuda` to train on a GPU)",
            )
        })
    }

    fn policy(&self, p: &PolicySection) -> Result<(), ConfigError> {
        self.check("policy.hidden_size", p.hidden_size, Range::AtLeastOne)?;
        self.check("policy.num_layers", p.num_layers, Range::AtLeastOne)?;
        if p.encoder.mlp().contains(&0) {
            return self.fail(
                "policy.encoder",
                format!("{:?}", p.encoder.mlp()),
                "widths of at least 1",
            );
        }
        if let Err((key, value, expected)) = p.encoder.cnn() {
            return self.fail(&key, value, &expected);
        }
        Ok(())
    }

    /// The section `key` = `algo` selects (`None`: the config has none); `chunk`: frames of
    /// one chunk, when PPO updates are paced by received chunks.
    fn algorithm(
        &self,
        key: &str,
        algo: Algo,
        section: Option<AlgoConfig>,
        chunk: Option<usize>,
    ) -> Result<(), ConfigError> {
        match section {
            None => self.fail(
                algo.name(),
                "missing",
                &format!("a [{0}] section ({key} = \"{0}\")", algo.name()),
            ),
            Some(AlgoConfig::Ppo(o)) => self.ppo(&o, chunk),
            Some(AlgoConfig::Dqn(d)) => self.dqn(&d),
            Some(AlgoConfig::Bc(b)) => self.slices("bc", &b),
        }
    }

    fn ppo(&self, o: &PpoSection, chunk: Option<usize>) -> Result<(), ConfigError> {
        self.check(
            "ppo.frames_per_update",
            o.frames_per_update,
            Range::AtLeastOne,
        )?;
        self.check("ppo.epochs", o.epochs, Range::AtLeastOne)?;
        self.check("ppo.slice_len", o.slice_len, Range::AtLeastOne)?;
        self.check("ppo.num_slices", o.num_slices, Range::AtLeastOne)?;
        if o.clip_value {
            // Accepted and ignored before: refuse it rather than train without it.
            return self.fail(
                "ppo.clip_value",
                true,
                "false (PPO2's value clipping is not implemented; the value loss is unclipped)",
            );
        }
        if let Some(chunk) = chunk.filter(|&c| !o.frames_per_update.is_multiple_of(c)) {
            return self.fail(
                "ppo.frames_per_update",
                o.frames_per_update,
                &format!(
                    "a multiple of one chunk (collector.envs_per_actor x collector.steps = \
                     {chunk})"
                ),
            );
        }
        self.check("ppo.lr", o.lr, Range::Positive)?;
        self.check("ppo.gamma", o.gamma, Range::Unit)?;
        self.check("ppo.gae_lambda", o.gae_lambda, Range::Unit)?;
        self.check("ppo.clip_eps", o.clip_eps, Range::Positive)?;
        self.check("ppo.max_grad_norm", o.max_grad_norm, Range::Positive)?;
        self.check("ppo.value_coef", o.value_coef, Range::NonNegative)?;
        self.check("ppo.entropy_coef", o.entropy_coef, Range::NonNegative)?;
        self.check("ppo.novelty_bonus", o.novelty_bonus, Range::NonNegative)
    }

    /// Observation normalization (PPO's), its clip, and the `[eval]` section.
    fn learning_quality(
        &self,
        algo: Algo,
        p: &PolicySection,
        eval: Option<&EvalSection>,
    ) -> Result<(), ConfigError> {
        if p.obs_norm && algo != Algo::Ppo {
            return self.fail(
                "policy.obs_norm",
                true,
                &format!(
                    "false with algo \"{}\" (the normalizer is kept by PPO)",
                    algo.name()
                ),
            );
        }
        self.check("policy.obs_clip", p.obs_clip, Range::Positive)?;
        if p.critic_core == CriticCore::Separate && algo != Algo::Ppo {
            return self.fail(
                "policy.critic_core",
                "\"separate\"",
                &format!(
                    "\"shared\" with algo \"{}\" (only PPO has a value head to train)",
                    algo.name()
                ),
            );
        }
        if let Some(e) = eval {
            self.check("eval.episodes", e.episodes, Range::AtLeastOne)?;
            if e.episodes > 10_000 {
                return self.fail("eval.episodes", e.episodes, "at most 10000");
            }
        }
        Ok(())
    }

    /// The slice training of section `[name]`.
    fn slices(&self, name: &str, s: &SliceTraining) -> Result<(), ConfigError> {
        let key = |k: &str| format!("{name}.{k}");
        self.check(&key("slice_len"), s.slice_len, Range::AtLeastOne)?;
        self.check(&key("num_slices"), s.num_slices, Range::AtLeastOne)?;
        if s.burn_in >= s.slice_len {
            return self.fail(
                &key("burn_in"),
                s.burn_in,
                &format!(
                    "less than slice_len = {} (steps left to learn on)",
                    s.slice_len
                ),
            );
        }
        self.check(&key("lr"), s.lr, Range::Positive)?;
        self.check(&key("max_grad_norm"), s.max_grad_norm, Range::Positive)
    }

    fn dqn(&self, d: &DqnSection) -> Result<(), ConfigError> {
        self.slices("dqn", &d.slices())?;
        self.check("dqn.gamma", d.gamma, Range::Unit)?;
        self.check("dqn.n_step", d.n_step, Range::AtLeastOne)?;
        match d.tau {
            Some(tau) => self.check("dqn.tau", tau, Range::PositiveUnit)?,
            None if d.target_update_every == 0 => {
                return self.fail(
                    "dqn.target_update_every",
                    0,
                    "at least 1 (or set dqn.tau for Polyak updates)",
                )
            }
            None => {}
        }
        self.check("dqn.buffer_size", d.buffer_size, Range::AtLeastOne)?;
        self.check(
            "dqn.updates_per_chunk",
            d.updates_per_chunk,
            Range::AtLeastOne,
        )?;
        self.check("dqn.cql_alpha", d.cql_alpha, Range::NonNegative)?;
        self.check("dqn.huber_delta", d.huber_delta, Range::NonNegative)?;
        self.check("dqn.epsilon_start", d.epsilon_start, Range::Probability)?;
        self.check("dqn.epsilon_end", d.epsilon_end, Range::Probability)
    }

    fn finite(&self, key: &str, value: Option<f64>) -> Result<(), ConfigError> {
        match value {
            Some(v) if !v.is_finite() => self.fail(key, v, "a finite number"),
            _ => Ok(()),
        }
    }

    /// The reward scales of the sections a config has.
    fn reward_scales(
        &self,
        ppo: Option<&PpoSection>,
        dqn: Option<&DqnSection>,
    ) -> Result<(), ConfigError> {
        if let Some(p) = ppo {
            self.check("ppo.reward_scale", p.reward_scale, Range::Positive)?;
        }
        if let Some(d) = dqn {
            self.check("dqn.reward_scale", d.reward_scale, Range::Positive)?;
        }
        Ok(())
    }

    /// Finite floats and sizes a training run can allocate.
    fn train_bounds(&self, c: &TrainConfig) -> Result<(), ConfigError> {
        self.finite("run.target_return", c.run.target_return)?;
        if ![20, 100].contains(&c.run.target_window) {
            self.fail(
                "run.target_window",
                c.run.target_window,
                "20 or 100 (episodes of the training mean compared with run.target_return)",
            )?;
        }
        let col = &c.collector;
        self.check(
            "collector.restart_window_s",
            col.restart_window_s,
            Range::Positive,
        )?;
        self.check(
            "collector.restart_backoff_s",
            col.restart_backoff_s,
            Range::NonNegative,
        )?;
        self.check(
            "collector.stall_timeout_s",
            col.stall_timeout_s,
            Range::NonNegative,
        )?;
        if col.stall_timeout_s > 1e9 {
            return self.fail(
                "collector.stall_timeout_s",
                col.stall_timeout_s,
                "at most 1e9 seconds",
            );
        }
        // Durations: bounded so that they convert (and double) without overflow.
        if col.restart_window_s > 1e9 {
            return self.fail(
                "collector.restart_window_s",
                col.restart_window_s,
                "at most 1e9 seconds",
            );
        }
        if col.restart_backoff_s > 3600.0 {
            return self.fail(
                "collector.restart_backoff_s",
                col.restart_backoff_s,
                "at most 3600 seconds (doubled per restart, capped at 8 s)",
            );
        }
        self.reward_scales(c.ppo.as_ref(), c.dqn.as_ref())?;
        self.train_memory(c)
    }

    /// Finite floats and sizes a replay run can allocate.
    fn replay_bounds(&self, c: &ReplayConfig) -> Result<(), ConfigError> {
        self.finite("replay.target_return", c.replay.target_return)?;
        self.reward_scales(c.ppo.as_ref(), c.dqn.as_ref())?;
        self.policy_memory(&c.policy)
    }
}

//! The actor loop: `E` environments, the policy in sequential mode (inference only, no
//! autodiff), one recurrent state per environment, `T` steps per [`Chunk`].
//!
//! Init tracking and priming are not optional wiring: the actor writes `is_init` (true at the
//! first step after every reset) and replaces an environment's recurrent state with the
//! policy's [`Primer`](recur_rnn::Primer) zeros at every reset, because the policy
//! contains a recurrent core. Between steps it copies `("next", state)` to `state`. It never
//! touches the recurrent mode: its thread stays in the sequential default.
//!
//! Environments that step in another process (the gymnasium bridge) come in
//! [step groups](crate::envs::VectorEnv::step_groups): the actor runs the policy on one group
//! while the other steps, and each group's environments see exactly the sequence they would
//! see stepped all at once (per-environment state, `is_init`, chunk layout, the action
//! sampling's random draws in environment order at each step).

mod exploration;
mod sampling;

use std::ops::Range;

use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;
use serde::{Deserialize, Serialize};

use crate::backend::Cpu;
use crate::chunk::{traj_id, ActionColumn, ActionKind, Chunk, ChunkMeta, ChunkSchema};
use crate::envs::{EnvError, Space, VecActions, VecEnv, VectorEnv};
use crate::policy::inference::{InferencePolicy, StepOutput};
use crate::policy::{action_spec, chunk_schema, Policy};
use recur_rnn::{current_recurrent_mode, RecurrentError, RecurrentMode};

pub use exploration::{EpsilonSchedule, Exploration};
use sampling::Sampler;

/// What an actor runs.
#[derive(Clone, Debug, PartialEq)]
pub struct ActorConfig {
    /// Environment id (see [`crate::envs::ENV_IDS`]).
    pub env: String,
    /// Environments stepped together (`E`).
    pub num_envs: usize,
    /// Steps per chunk (`T`).
    pub steps: usize,
    /// Seeds the environments and the action sampling.
    pub seed: u64,
    pub actor_id: u32,
    pub incarnation: u32,
    /// How actions are chosen from the policy's head.
    pub exploration: Exploration,
}

impl ActorConfig {
    /// Actor 0, incarnation 0, sampling actions: a standalone actor's config.
    pub fn new(env: impl Into<String>, num_envs: usize, steps: usize, seed: u64) -> Self {
        Self {
            env: env.into(),
            num_envs,
            steps,
            seed,
            actor_id: 0,
            incarnation: 0,
            exploration: Exploration::default(),
        }
    }
}

/// Why an actor cannot start or step.
#[derive(Debug, thiserror::Error)]
pub enum ActorError {
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error(transparent)]
    Policy(#[from] RecurrentError),
    #[error("actor config: `{key}` = {value} is invalid: {expected}")]
    Config {
        key: &'static str,
        value: String,
        expected: String,
    },
    #[error("the policy does not fit environment {env}: {what}")]
    Mismatch { env: String, what: String },
    #[error("an actor runs in sequential mode, but this thread was switched to recurrent mode")]
    RecurrentMode,
    /// An environment produced NaN or Inf: the chunk is refused, never sent.
    #[error(
        "chunk {chunk} refused: `{field}` of environment {env_index} of {env} holds {value} \
         at step {step} of the chunk (actor step {actor_step}; finite values only)"
    )]
    NonFinite {
        env: String,
        field: &'static str,
        env_index: usize,
        step: usize,
        actor_step: u64,
        chunk: u64,
        value: f32,
    },
}

/// A finished episode.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Episode {
    pub env: usize,
    pub ret: f64,
    pub length: u64,
    /// The episode's final reward (MiniGrid's success is a positive one: `envs::Success`).
    pub last_reward: f64,
}

/// One actor: environments, policy, per-environment recurrent state.
pub struct Actor {
    config: ActorConfig,
    env: Box<dyn VectorEnv>,
    observation_space: Space,
    action_space: Space,
    /// Vector steps taken.
    steps_taken: u64,
    policy: Policy<Cpu>,
    /// The same weights for the per-step calls.
    fast: InferencePolicy,
    /// The environments' step groups ([`VectorEnv::step_groups`]).
    groups: Vec<Range<usize>>,
    /// Per group: the policy's outputs for its rows at the current step.
    outs: Vec<StepOutput>,
    /// Per group: a step begun and not yet ended.
    pending: Vec<bool>,
    /// The action sampling: its random generator, and each environment's action and
    /// log-probability at the current step.
    sampler: Sampler,
    policy_version: u64,
    schema: ChunkSchema,
    /// What the policy sees at the current step, `[E, D]`.
    obs: Vec<f32>,
    /// Its pixels lane, `[E, P]` (empty without images).
    pixels: Vec<u8>,
    /// `[E]`: the current step is an episode start.
    is_init: Vec<bool>,
    /// The recurrent state fed to the policy at the current step, `[E, L, H]`.
    rs_h: Vec<f32>,
    rs_c: Option<Vec<f32>>,
    episode: Vec<u64>,
    seq: u64,
    /// Per environment: the incarnation under which its running episode started (its
    /// trajectory id's; an actor restored from a saved state continues those episodes).
    traj_incarnation: Vec<u32>,
    finished: Vec<Episode>,
}

impl Actor {
    /// Starts `config.num_envs` built-in environments `config.env` (all at an episode start)
    /// with `policy`.
    pub fn new(config: ActorConfig, policy: Policy<Cpu>) -> Result<Self, ActorError> {
        let env = VecEnv::new(&config.env, config.num_envs.max(1), config.seed)?;
        Self::with_envs(config, policy, Box::new(env))
    }

    /// [`Actor::new`] with environments built elsewhere (a [`crate::envs::Registry`]: user
    /// environments, the gymnasium bridge); `env.num_envs()` must equal `config.num_envs`.
    pub fn with_envs(
        config: ActorConfig,
        policy: Policy<Cpu>,
        mut env: Box<dyn VectorEnv>,
    ) -> Result<Self, ActorError> {
        let bad = |key, value: String, expected: &str| ActorError::Config {
            key,
            value,
            expected: expected.into(),
        };
        if config.steps == 0 {
            return Err(bad("steps", "0".into(), "at least 1 step per chunk"));
        }
        if config.num_envs > 65536 {
            return Err(bad(
                "num_envs",
                config.num_envs.to_string(),
                "at most 65536",
            ));
        }
        if config.actor_id >= 2048 {
            return Err(bad("actor_id", config.actor_id.to_string(), "below 2048"));
        }
        if env.num_envs() != config.num_envs {
            return Err(bad(
                "num_envs",
                config.num_envs.to_string(),
                &format!("the {} environments given", env.num_envs()),
            ));
        }
        let observation_space = env.observation_space();
        let action_space = env.action_space();
        let pc = policy.config();
        let mismatch = |what: String| ActorError::Mismatch {
            env: config.env.clone(),
            what,
        };
        if pc.obs_dim != observation_space.dim() {
            return Err(mismatch(format!(
                "policy obs_dim = {}, observation space has {}",
                pc.obs_dim,
                observation_space.dim()
            )));
        }
        if pc.images != observation_space.images() {
            return Err(mismatch(format!(
                "policy images = {:?}, observation space {} has {:?}",
                pc.images,
                observation_space.describe(),
                observation_space.images()
            )));
        }
        let wanted = action_spec(&action_space);
        if pc.action != wanted {
            return Err(mismatch(format!(
                "policy action = {:?}, action space is {wanted:?}",
                pc.action
            )));
        }
        let schema = chunk_schema(pc, config.num_envs, config.steps);
        let first = env.reset()?;
        let (obs, pixels) = (first.obs.clone(), first.pixels.clone());
        let e = config.num_envs;
        let groups = env.step_groups();
        assert!(
            groups.first().map(|g| g.start) == Some(0)
                && groups.last().map(|g| g.end) == Some(e)
                && groups.windows(2).all(|w| w[0].end == w[1].start)
                && groups.iter().all(|g| !g.is_empty()),
            "{}: step groups {groups:?} do not cover 0..{e} in order",
            config.env
        );
        let state_len = e * schema.num_layers * schema.hidden_size;
        let primer = policy.primer();
        let zeros = |key: &str| primer.entry(key).map(|_| vec![0.0f32; state_len]);
        Ok(Actor {
            sampler: Sampler::new(
                ChaCha12Rng::seed_from_u64(config.seed ^ 0x5eed_ac70),
                e,
                schema.action_dim(),
            ),
            traj_incarnation: vec![config.incarnation; e],
            is_init: vec![true; e],
            rs_h: zeros("rs_h").expect("every primer declares rs_h"),
            rs_c: zeros("rs_c"),
            episode: vec![0; e],
            finished: Vec::new(),
            fast: InferencePolicy::from_policy(&policy),
            outs: vec![StepOutput::default(); groups.len()],
            pending: vec![false; groups.len()],
            groups,
            seq: 0,
            policy_version: 0,
            config,
            env,
            observation_space,
            action_space,
            steps_taken: 0,
            policy,
            schema,
            obs,
            pixels,
        })
    }

    /// The space of one environment's observation.
    pub fn observation_space(&self) -> &Space {
        &self.observation_space
    }

    /// The space of one environment's action.
    pub fn action_space(&self) -> &Space {
        &self.action_space
    }

    pub fn schema(&self) -> &ChunkSchema {
        &self.schema
    }

    pub fn config(&self) -> &ActorConfig {
        &self.config
    }

    pub fn policy(&self) -> &Policy<Cpu> {
        &self.policy
    }

    pub fn policy_version(&self) -> u64 {
        self.policy_version
    }

    /// Adopts new weights; call between chunks, so every chunk is produced by one version.
    pub fn set_policy(&mut self, policy: Policy<Cpu>, version: u64) {
        self.fast = InferencePolicy::from_policy(&policy);
        self.policy = policy;
        self.policy_version = version;
    }

    /// Episodes finished since the last call.
    pub fn take_finished(&mut self) -> Vec<Episode> {
        std::mem::take(&mut self.finished)
    }

    /// Everything the actor's next chunks depend on besides the weights: the environments'
    /// states, the recurrent state, the current observations and `is_init`, the episode
    /// counters and trajectory ids, the action sampler's position. [`Actor::restore`] on a
    /// fresh actor of the same configuration continues exactly where this one stands (the
    /// exact resume of `sync` runs). `None` when the environments cannot be saved
    /// ([`VectorEnv::save_state`]: the gymnasium bridge).
    pub fn save_state(&self) -> Option<Vec<u8>> {
        let state = ActorState {
            schema_hash: self.schema.hash(),
            policy_version: self.policy_version,
            envs: self.env.save_state()?,
            steps_taken: self.steps_taken,
            obs: self.obs.clone(),
            is_init: self.is_init.clone(),
            rs_h: self.rs_h.clone(),
            rs_c: self.rs_c.clone(),
            episode: self.episode.clone(),
            traj_incarnation: self.traj_incarnation.clone(),
            rng: (
                self.sampler.rng.get_seed(),
                self.sampler.rng.get_stream(),
                self.sampler.rng.get_word_pos(),
            ),
        };
        Some(crate::envs::encode_state(&state))
    }

    /// Continues from what [`Actor::save_state`] wrote (by an earlier incarnation, or before
    /// the learner was restarted); returns the policy version of the last chunk collected
    /// before the save. The chunk sequence numbers stay this incarnation's own.
    ///
    /// # Errors
    /// A state written for another chunk schema, or one that does not decode.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<u64, ActorError> {
        let state: ActorState = crate::envs::decode_state(&self.config.env, bytes)?;
        let bad = |what: String| ActorError::Mismatch {
            env: self.config.env.clone(),
            what: format!("saved actor state: {what}"),
        };
        if state.schema_hash != self.schema.hash() {
            return Err(bad(format!(
                "written for chunk schema {:#x}, this actor's is {:#x}",
                state.schema_hash,
                self.schema.hash()
            )));
        }
        let fits = state.obs.len() == self.obs.len()
            && state.is_init.len() == self.is_init.len()
            && state.rs_h.len() == self.rs_h.len()
            && state.rs_c.as_ref().map(Vec::len) == self.rs_c.as_ref().map(Vec::len)
            && state.episode.len() == self.episode.len()
            && state.traj_incarnation.len() == self.traj_incarnation.len();
        if !fits {
            return Err(bad("its buffers do not have this actor's sizes".into()));
        }
        self.env.load_state(&state.envs)?;
        self.steps_taken = state.steps_taken;
        self.obs = state.obs;
        self.pixels.copy_from_slice(self.env.pixels());
        self.is_init = state.is_init;
        self.rs_h = state.rs_h;
        self.rs_c = state.rs_c;
        self.episode = state.episode;
        self.traj_incarnation = state.traj_incarnation;
        let (seed, stream, word_pos) = state.rng;
        self.sampler.rng = ChaCha12Rng::from_seed(seed);
        self.sampler.rng.set_stream(stream);
        self.sampler.rng.set_word_pos(word_pos);
        self.policy_version = state.policy_version;
        Ok(state.policy_version)
    }

    /// Collects the next chunk: `T` steps of every environment.
    ///
    /// Per step `t` and group `g` (in order): end `g`'s step `t - 1` and record its outcome,
    /// run the policy on `g`'s rows, record what it saw and did at `t`, begin `g`'s step `t`.
    /// With several groups the policy on one group overlaps the other groups' steps. The
    /// chunk's steps are all ended before it is returned.
    pub fn collect(&mut self) -> Result<Chunk, ActorError> {
        if current_recurrent_mode() == Some(RecurrentMode::Recurrent) {
            return Err(ActorError::RecurrentMode);
        }
        let s = self.schema.clone();
        let meta = ChunkMeta {
            actor_id: self.config.actor_id,
            incarnation: self.config.incarnation,
            seq: self.seq,
            policy_version: self.policy_version,
            schema_hash: s.hash(),
            envs: s.envs as u32,
            steps: s.steps as u32,
            payload_len: s.payload_len() as u64,
            payload_crc32: 0,
        };
        let mut chunk = Chunk::zeros(&s, meta);
        let result = self.fill(&mut chunk);
        // After a failure, end the steps still running so the environments stay usable (or
        // fail the same way on the next call); their outcome is dropped with the chunk.
        for g in 0..self.groups.len() {
            if std::mem::take(&mut self.pending[g]) && result.is_err() {
                let _ = self.env.end_step(g);
            }
        }
        result?;
        self.steps_taken += s.steps as u64;
        self.seq += 1;
        Ok(chunk)
    }

    /// The step loop of [`Actor::collect`].
    fn fill(&mut self, chunk: &mut Chunk) -> Result<(), ActorError> {
        let t_len = self.schema.steps;
        for t in 0..t_len {
            for g in 0..self.groups.len() {
                if t > 0 {
                    self.end_group(g, t - 1, chunk)?;
                }
                self.policy_step(g)?;
                self.record(g, t, chunk);
                let k = self.schema.action_dim();
                let rows = self.groups[g].start * k..self.groups[g].end * k;
                let actions = match self.schema.action {
                    ActionKind::Continuous { .. } => {
                        VecActions::Continuous(&self.sampler.continuous[rows])
                    }
                    ActionKind::Discrete | ActionKind::MultiDiscrete { .. } => {
                        VecActions::Discrete(&self.sampler.discrete[rows])
                    }
                };
                self.env.begin_step(g, actions)?;
                self.pending[g] = true;
            }
        }
        for g in 0..self.groups.len() {
            self.end_group(g, t_len - 1, chunk)?;
        }
        Ok(())
    }

    /// Records what the policy saw and did at step `t` for group `g`'s environments.
    fn record(&self, g: usize, t: usize, chunk: &mut Chunk) {
        let s = &self.schema;
        let (t_len, d, k, px) = (s.steps, s.obs_dim, s.action_dim(), s.pixels());
        let lh = s.num_layers * s.hidden_size;
        let r = self.groups[g].clone();
        let out = &self.outs[g];
        for env in r.clone() {
            let p = env * t_len + t;
            chunk.observation[p * d..(p + 1) * d]
                .copy_from_slice(&self.obs[env * d..(env + 1) * d]);
            chunk.pixels[p * px..(p + 1) * px]
                .copy_from_slice(&self.pixels[env * px..(env + 1) * px]);
            chunk.is_init[p] = self.is_init[env] as u8;
            chunk.rs_h[p * lh..(p + 1) * lh].copy_from_slice(&self.rs_h[env * lh..(env + 1) * lh]);
            if let (Some(dst), Some(src)) = (&mut chunk.rs_c, &self.rs_c) {
                dst[p * lh..(p + 1) * lh].copy_from_slice(&src[env * lh..(env + 1) * lh]);
            }
            chunk.sample_log_prob[p] = self.sampler.log_prob[env];
            chunk.state_value[p] = out.value[env - r.start];
            chunk.traj_ids[p] = traj_id(
                self.config.actor_id,
                self.traj_incarnation[env],
                env,
                self.episode[env],
            );
            let (to, from) = (p * k..(p + 1) * k, env * k..(env + 1) * k);
            match &mut chunk.action {
                ActionColumn::Discrete(a) => a[to].copy_from_slice(&self.sampler.discrete[from]),
                ActionColumn::Continuous(a) => {
                    a[to].copy_from_slice(&self.sampler.continuous[from])
                }
            }
        }
    }

    /// Ends group `g`'s step `t` (of this chunk): checks and records its outcome, finished
    /// episodes, and moves its environments to the next step: `("next", state)` -> state
    /// with the primer's zeros where an episode restarts, the new observations and `is_init`.
    fn end_group(&mut self, g: usize, t: usize, chunk: &mut Chunk) -> Result<(), ActorError> {
        let s = &self.schema;
        let (t_len, d, lh) = (s.steps, s.obs_dim, s.num_layers * s.hidden_size);
        let px = s.pixels();
        let r = self.groups[g].clone();
        self.pending[g] = false;
        let out = self.env.end_step(g)?;
        for (field, values) in [
            ("next.observation", &out.next_obs[r.start * d..r.end * d]),
            ("observation", &out.obs[r.start * d..r.end * d]),
        ] {
            if let Some(i) = values.iter().position(|x| !x.is_finite()) {
                return Err(ActorError::NonFinite {
                    env: self.config.env.clone(),
                    field,
                    env_index: r.start + i / d,
                    step: t,
                    actor_step: self.steps_taken + t as u64 + 1,
                    chunk: self.seq,
                    value: values[i],
                });
            }
        }
        for env in r.clone() {
            let p = env * t_len + t;
            chunk.next_observation[p * d..(p + 1) * d]
                .copy_from_slice(&out.next_obs[env * d..(env + 1) * d]);
            chunk.next_pixels[p * px..(p + 1) * px]
                .copy_from_slice(&out.next_pixels[env * px..(env + 1) * px]);
            chunk.next_reward[p] = out.reward[env];
            chunk.next_terminated[p] = out.terminated[env] as u8;
            chunk.next_truncated[p] = out.truncated[env] as u8;
            chunk.next_done[p] = out.done[env] as u8;
            if out.done[env] {
                self.finished.push(Episode {
                    env,
                    ret: out.episode_return[env].unwrap_or(f64::NAN),
                    length: out.episode_length[env].unwrap_or(0),
                    last_reward: f64::from(out.reward[env]),
                });
                self.episode[env] += 1;
                self.traj_incarnation[env] = self.config.incarnation;
            }
        }
        let states = r.start * lh..r.end * lh;
        self.rs_h[states.clone()].copy_from_slice(&self.outs[g].next_h);
        if let Some(c) = &mut self.rs_c {
            c[states].copy_from_slice(&self.outs[g].next_c);
        }
        for env in r.clone().filter(|&env| out.is_init[env]) {
            self.rs_h[env * lh..(env + 1) * lh].fill(0.0);
            if let Some(c) = &mut self.rs_c {
                c[env * lh..(env + 1) * lh].fill(0.0);
            }
        }
        self.obs[r.start * d..r.end * d].copy_from_slice(&out.obs[r.start * d..r.end * d]);
        self.pixels[r.start * px..r.end * px]
            .copy_from_slice(&out.pixels[r.start * px..r.end * px]);
        self.is_init[r.clone()].copy_from_slice(&out.is_init[r]);
        Ok(())
    }

    /// One sequential-mode policy step on group `g`'s environments: their observations,
    /// `is_init` and recurrent state through the policy ([`InferencePolicy`], the burn policy's
    /// weights on the host), then their actions sampled from its head with their
    /// log-probabilities ([`Sampler`], random draws in environment order). The state for the
    /// next step (`("next", state)`) waits in the group's outputs for [`Actor::end_group`].
    fn policy_step(&mut self, g: usize) -> Result<(), ActorError> {
        let r = self.groups[g].clone();
        let s = &self.schema;
        let (d, lh, px) = (s.obs_dim, s.num_layers * s.hidden_size, s.pixels());
        self.fast.step(
            &self.obs[r.start * d..r.end * d],
            &self.pixels[r.start * px..r.end * px],
            &self.is_init[r.clone()],
            &self.rs_h[r.start * lh..r.end * lh],
            self.rs_c.as_deref().map(|c| &c[r.start * lh..r.end * lh]),
            &mut self.outs[g],
        );
        self.sampler.sample(
            self.fast.action(),
            &self.outs[g].head,
            r,
            self.config.exploration,
            self.policy_version,
        );
        Ok(())
    }
}

/// What [`Actor::save_state`] writes.
#[derive(Serialize, Deserialize)]
struct ActorState {
    schema_hash: u64,
    policy_version: u64,
    envs: Vec<u8>,
    steps_taken: u64,
    obs: Vec<f32>,
    is_init: Vec<bool>,
    rs_h: Vec<f32>,
    rs_c: Option<Vec<f32>>,
    episode: Vec<u64>,
    traj_incarnation: Vec<u32>,
    rng: ([u8; 32], u64, u128),
}

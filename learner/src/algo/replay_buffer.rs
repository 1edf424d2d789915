//! Replay storage: a circular buffer of steps (every chunk field), extended chunk by chunk.
//!
//! A chunk `[E, T]` is stored env-major: env 0's `T` steps, then env 1's, ... Each env's steps
//! of one chunk are contiguous; a trajectory that continues in the actor's next chunk lands in
//! another stretch of storage. Trajectories are identified by `("collector", "traj_ids")`
//! (run-unique: actor, incarnation, env, episode), so steps of different actors or envs never
//! form one trajectory. A *run* is a maximal stretch of consecutive positions with one
//! trajectory id and no `done` before its last step: the unit slices are cut from.

use common::chunk::{ActionColumn, Chunk, ChunkSchema};

/// Per-step columns of the storage, `capacity` steps each.
#[derive(Clone, Debug)]
pub struct ReplayStorage {
    schema: ChunkSchema,
    capacity: usize,
    /// Next write position.
    cursor: usize,
    len: usize,
    pub observation: Vec<f32>,
    /// The pixels lane, `P` bytes a step (empty without images).
    pub pixels: Vec<u8>,
    /// Discrete actions as `f32` indices, or `[action_dim]` floats.
    pub action: Vec<f32>,
    pub sample_log_prob: Vec<f32>,
    pub state_value: Vec<f32>,
    pub is_init: Vec<bool>,
    pub rs_h: Vec<f32>,
    pub rs_c: Vec<f32>,
    pub next_observation: Vec<f32>,
    pub next_pixels: Vec<u8>,
    pub next_reward: Vec<f32>,
    pub next_terminated: Vec<bool>,
    pub next_truncated: Vec<bool>,
    pub next_done: Vec<bool>,
    pub traj_ids: Vec<i64>,
    /// The policy version that produced each step.
    pub policy_version: Vec<u64>,
}

impl ReplayStorage {
    /// Storage for `capacity` steps of chunks of `schema` (capacity is rounded up to whole
    /// env rows of a chunk, `T` steps).
    pub fn new(schema: &ChunkSchema, capacity: usize) -> Self {
        let capacity = capacity.div_ceil(schema.steps).max(1) * schema.steps;
        let (d, a, lh) = widths(schema);
        ReplayStorage {
            schema: schema.clone(),
            capacity,
            cursor: 0,
            len: 0,
            observation: vec![0.0; capacity * d],
            pixels: vec![0; capacity * schema.pixels()],
            action: vec![0.0; capacity * a],
            sample_log_prob: vec![0.0; capacity],
            state_value: vec![0.0; capacity],
            is_init: vec![false; capacity],
            rs_h: vec![0.0; capacity * lh],
            rs_c: if schema.cell.has_cell_state() {
                vec![0.0; capacity * lh]
            } else {
                Vec::new()
            },
            next_observation: vec![0.0; capacity * d],
            next_pixels: vec![0; capacity * schema.pixels()],
            next_reward: vec![0.0; capacity],
            next_terminated: vec![false; capacity],
            next_truncated: vec![false; capacity],
            next_done: vec![false; capacity],
            traj_ids: vec![0; capacity],
            policy_version: vec![0; capacity],
        }
    }

    pub fn schema(&self) -> &ChunkSchema {
        &self.schema
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Empties the storage (on-policy training clears it after each update).
    pub fn clear(&mut self) {
        self.cursor = 0;
        self.len = 0;
    }

    /// Appends a chunk, env row by env row (overwriting the oldest steps when full).
    pub fn extend(&mut self, chunk: &Chunk) {
        let (t_len, (d, a, lh)) = (self.schema.steps, widths(&self.schema));
        let px = self.schema.pixels();
        for env in 0..self.schema.envs {
            for t in 0..t_len {
                let p = env * t_len + t;
                let q = self.cursor;
                self.observation[q * d..(q + 1) * d]
                    .copy_from_slice(&chunk.observation[p * d..(p + 1) * d]);
                self.pixels[q * px..(q + 1) * px]
                    .copy_from_slice(&chunk.pixels[p * px..(p + 1) * px]);
                match &chunk.action {
                    ActionColumn::Discrete(v) => {
                        for j in 0..a {
                            self.action[q * a + j] = v[p * a + j] as f32;
                        }
                    }
                    ActionColumn::Continuous(v) => {
                        self.action[q * a..(q + 1) * a].copy_from_slice(&v[p * a..(p + 1) * a])
                    }
                }
                self.sample_log_prob[q] = chunk.sample_log_prob[p];
                self.state_value[q] = chunk.state_value[p];
                self.is_init[q] = chunk.is_init[p] == 1;
                self.rs_h[q * lh..(q + 1) * lh].copy_from_slice(&chunk.rs_h[p * lh..(p + 1) * lh]);
                if let Some(c) = &chunk.rs_c {
                    self.rs_c[q * lh..(q + 1) * lh].copy_from_slice(&c[p * lh..(p + 1) * lh]);
                }
                self.next_observation[q * d..(q + 1) * d]
                    .copy_from_slice(&chunk.next_observation[p * d..(p + 1) * d]);
                self.next_pixels[q * px..(q + 1) * px]
                    .copy_from_slice(&chunk.next_pixels[p * px..(p + 1) * px]);
                self.next_reward[q] = chunk.next_reward[p];
                self.next_terminated[q] = chunk.next_terminated[p] == 1;
                self.next_truncated[q] = chunk.next_truncated[p] == 1;
                self.next_done[q] = chunk.next_done[p] == 1;
                self.traj_ids[q] = chunk.traj_ids[p];
                self.policy_version[q] = chunk.meta.policy_version;
                self.cursor = (self.cursor + 1) % self.capacity;
                self.len = (self.len + 1).min(self.capacity);
            }
        }
    }

    /// The runs of the storage: `(first position in insertion order, length)`; a run never
    /// crosses a change of trajectory id, a step for which `ends(position)` holds (its last), or
    /// the oldest/newest boundary.
    pub fn runs(&self, ends: impl Fn(usize) -> bool) -> Vec<(usize, usize)> {
        self.runs_in(0..self.len, ends)
    }

    /// [`runs`](Self::runs) of the steps `range` (in insertion order) alone: a run also ends
    /// at the range's end (one learner rank's shard of the storage, `--as-ranks`).
    pub fn runs_in(
        &self,
        range: std::ops::Range<usize>,
        ends: impl Fn(usize) -> bool,
    ) -> Vec<(usize, usize)> {
        let mut runs = Vec::new();
        let mut start = range.start;
        for i in range.start + 1..=range.end {
            let p = self.position(i - 1);
            if i == range.end || self.traj_ids[self.position(i)] != self.traj_ids[p] || ends(p) {
                runs.push((start, i - start));
                start = i;
            }
        }
        runs
    }

    /// Storage position of the `i`-th oldest step.
    pub fn position(&self, i: usize) -> usize {
        (self.cursor + self.capacity - self.len + i) % self.capacity
    }
}

/// Values per step of the observation, the action and the recurrent state.
fn widths(s: &ChunkSchema) -> (usize, usize, usize) {
    (s.obs_dim, s.action_dim(), s.num_layers * s.hidden_size)
}

//! What a training run counts as chunks arrive: which chunks the algorithm takes
//! ([`Admission`]), the episode returns ([`Returns`]), a sync update's chunks held until all
//! are in, the actors' saved states, and the counters a checkpoint keeps ([`TrainState`]).

use std::collections::{BTreeMap, HashMap, VecDeque};

use burn::tensor::backend::AutodiffBackend;
use common::checkpoint::ResumeState;
use common::chunk::Chunk;
use serde::{Deserialize, Serialize};

use crate::actors::transport::{Received, SavedStates};
use crate::algo::Learner;

/// What a checkpoint holds besides the model and optimizer.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TrainState {
    pub updates: u64,
    pub frames: u64,
    pub policy_version: u64,
    pub wall_s: f64,
    pub episodes: u64,
    pub recent_returns: Vec<f64>,
    pub best_mean_return: Option<f64>,
    pub frames_to_target: Option<u64>,
    pub seconds_to_target: Option<f64>,
    /// The learner ranks that trained the run ([`crate::ranks`]); a resume asks for as many
    /// (checkpoints written before this field: 1).
    #[serde(default = "one")]
    pub world_size: usize,
    /// Several ranks: ranks 1.. 's algorithm host state (their slice samplers' positions and
    /// reward normalizers; rank 0's is `resume.bin`'s), so that each resumes its own.
    // No skip_serializing_if: the ranks also share this struct as bincode, which needs every
    // field.
    #[serde(default)]
    pub rank_hosts: Vec<Vec<u8>>,
}

fn one() -> usize {
    1
}

/// Episodes in the running mean return.
const RECENT: usize = 20;
/// Episodes in the wider mean (`mean_return_100`: RLlib's window, POPGym's MMER).
const WIDE: usize = 100;

/// The chunks of a run on their way to the algorithm: admitted or dropped, their episodes
/// counted, a sync update's held until all are in (then fed in actor order), each admitted
/// one's saved state kept for the checkpoint and for its actor's restart.
pub struct Intake {
    pub admission: Admission,
    pub returns: Returns,
    /// Sync runs: each actor's state after its chunk of the last update (the checkpoint's, and
    /// the one an actor registering with that id continues from).
    pub saved_states: SavedStates,
    held: Vec<Chunk>,
    chunk_frames: u64,
    frames_per_update: usize,
}

impl Intake {
    pub fn new(
        admission: Admission,
        resumed: &ResumeState,
        state: &TrainState,
        chunk_frames: u64,
        frames_per_update: usize,
    ) -> Self {
        Intake {
            admission,
            returns: Returns {
                open: resumed.open_returns.iter().copied().collect(),
                recent: state.recent_returns.iter().copied().collect(),
            },
            saved_states: resumed.actors.iter().cloned().collect(),
            held: Vec::new(),
            chunk_frames,
            frames_per_update,
        }
    }

    /// Takes one chunk while the weights are at `version`: every chunk's episodes count; an
    /// admitted one adds its frames and goes to `learner` (a sync update's once all its chunks
    /// are in, in actor order: arrival order depends on timing), and in a sync run the state
    /// that came with it becomes its actor's saved state (none if it came without).
    pub fn take<B: AutodiffBackend>(
        &mut self,
        received: Received,
        version: u64,
        learner: &mut Learner<B>,
        state: &mut TrainState,
    ) {
        let Received { chunk, saved } = received;
        if !self.admission.admit(&chunk, version) {
            state.episodes += self.returns.add(&chunk);
            return;
        }
        state.frames += self.chunk_frames;
        if !self.admission.sync {
            state.episodes += self.returns.add(&chunk);
            learner.add_chunk(&chunk);
            return;
        }
        match saved {
            Some(saved) => self.saved_states.insert(chunk.meta.actor_id, saved),
            None => self.saved_states.remove(&chunk.meta.actor_id),
        };
        self.held.push(chunk);
        if self.held.len() * (self.chunk_frames as usize) < self.frames_per_update {
            return;
        }
        self.held.sort_by_key(|c| c.meta.actor_id);
        for chunk in self.held.drain(..) {
            state.episodes += self.returns.add(&chunk);
            learner.add_chunk(&chunk);
        }
    }

    /// What `resume.bin` holds besides the algorithm's own state (sorted: the same run writes
    /// the same bytes).
    pub fn resume_state(&self) -> ResumeState {
        let open: BTreeMap<i64, f64> = self.returns.open.iter().map(|(&k, &v)| (k, v)).collect();
        ResumeState {
            actors: (self.saved_states.iter())
                .map(|(&a, s)| (a, s.clone()))
                .collect(),
            open_returns: open.into_iter().collect(),
            ..Default::default()
        }
    }
}

/// Which chunks the algorithm gets: in async mode those at most `max_policy_lag` versions
/// behind (any, for an off-policy algorithm); in sync mode one chunk per actor per update, all
/// from the current weights. Counts the policy lag of what it admits and what it drops.
#[derive(Default)]
pub struct Admission {
    pub sync: bool,
    pub max_policy_lag: u64,
    pub off_policy: bool,
    /// Actors whose chunk this update already has (sync mode).
    taken: Vec<u32>,
    lag_sum: u64,
    lag_n: u64,
    pub dropped: u64,
}

impl Admission {
    pub fn new(sync: bool, max_policy_lag: u64, off_policy: bool) -> Self {
        Admission {
            sync,
            max_policy_lag,
            off_policy,
            ..Default::default()
        }
    }

    /// Whether `chunk` goes to the algorithm while the weights are at `version`.
    fn admit(&mut self, chunk: &Chunk, version: u64) -> bool {
        let lag = version.saturating_sub(chunk.meta.policy_version);
        let accept = if self.sync {
            lag == 0 && !self.taken.contains(&chunk.meta.actor_id)
        } else {
            self.off_policy || lag <= self.max_policy_lag
        };
        if !accept {
            self.dropped += 1;
            return false;
        }
        if self.sync {
            self.taken.push(chunk.meta.actor_id);
        }
        self.lag_sum += lag;
        self.lag_n += 1;
        true
    }

    /// An update happened: in sync mode every actor's next chunk is wanted. Returns the mean
    /// lag of the chunks admitted since the last update.
    pub fn updated(&mut self) -> f64 {
        self.taken.clear();
        let mean = self.lag_sum as f64 / self.lag_n.max(1) as f64;
        (self.lag_sum, self.lag_n) = (0, 0);
        mean
    }
}

/// The mean returns of a report: this rank's, or the group's ([`super::group`]).
#[derive(Clone, Copy, Debug)]
pub struct ReturnMeans {
    /// Of the last [`RECENT`] finished episodes (NaN before the first).
    pub mean: f64,
    /// Of the last [`WIDE`] (NaN before the first).
    pub mean_100: f64,
    /// Whether the window of [`RECENT`] is full (on every rank).
    pub full: bool,
    /// Whether the window of [`WIDE`] is full (on every rank).
    pub full_100: bool,
}

impl ReturnMeans {
    /// The mean over the last `window` episodes (20 or 100) and whether that window is full.
    pub fn over(&self, window: usize) -> (f64, bool) {
        match window {
            WIDE => (self.mean_100, self.full_100),
            _ => (self.mean, self.full),
        }
    }
}

/// Episode returns: rewards summed per trajectory until its `done`; the last [`WIDE`]
/// finished episodes kept (the running mean is over the last [`RECENT`] of them).
pub struct Returns {
    open: HashMap<i64, f64>,
    recent: VecDeque<f64>,
}

impl Returns {
    /// Adds a chunk's rewards; returns how many episodes ended in it.
    fn add(&mut self, chunk: &Chunk) -> u64 {
        let mut ended = 0;
        for p in 0..chunk.traj_ids.len() {
            let r = self.open.entry(chunk.traj_ids[p]).or_insert(0.0);
            *r += chunk.next_reward[p] as f64;
            if chunk.next_done[p] == 1 {
                ended += 1;
                let ret = self.open.remove(&chunk.traj_ids[p]).unwrap_or(0.0);
                self.recent.push_back(ret);
                if self.recent.len() > WIDE {
                    self.recent.pop_front();
                }
            }
        }
        ended
    }

    /// The means a report shows.
    pub fn means(&self) -> ReturnMeans {
        ReturnMeans {
            mean: self.mean(),
            mean_100: self.mean_100(),
            full: self.recent.len() >= RECENT,
            full_100: self.recent.len() >= WIDE,
        }
    }

    /// The mean of the last [`RECENT`] returns (NaN before the first finished episode).
    pub fn mean(&self) -> f64 {
        self.mean_of_last(RECENT)
    }

    /// The mean of the last [`WIDE`] returns (NaN before the first finished episode).
    pub fn mean_100(&self) -> f64 {
        self.mean_of_last(WIDE)
    }

    fn mean_of_last(&self, n: usize) -> f64 {
        let n = n.min(self.recent.len());
        if n == 0 {
            f64::NAN
        } else {
            self.recent.iter().rev().take(n).sum::<f64>() / n as f64
        }
    }

    pub fn recent(&self) -> Vec<f64> {
        self.recent.iter().copied().collect()
    }
}

impl TrainState {
    /// Takes in the returns after an update at wall time `now`: the recent ones, the best mean,
    /// when the mean over the last `window` episodes (20 or 100) first reached `target`
    /// (`means`: this rank's, or the group's). Returns the mean of the last 20.
    pub fn note_returns(
        &mut self,
        returns: &Returns,
        means: ReturnMeans,
        (target, window): (Option<f64>, usize),
        now: f64,
    ) -> f64 {
        let mean_return = means.mean;
        self.recent_returns = returns.recent();
        if mean_return.is_finite() {
            self.best_mean_return = Some(
                self.best_mean_return
                    .map_or(mean_return, |b| b.max(mean_return)),
            );
        }
        if let (Some(target), None) = (target, self.frames_to_target) {
            let (mean, full) = means.over(window);
            if full && mean >= target {
                self.frames_to_target = Some(self.frames);
                self.seconds_to_target = Some(now);
                tracing::info!(
                    "mean return ({window} episodes) {mean:.3} >= {target} after {} frames, \
                     {now:.1} s",
                    self.frames
                );
            }
        }
        mean_return
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn means(mean: f64, mean_100: f64, episodes: usize) -> ReturnMeans {
        ReturnMeans {
            mean,
            mean_100,
            full: episodes >= RECENT,
            full_100: episodes >= WIDE,
        }
    }

    #[test]
    fn the_target_counts_on_the_window_asked_for_once_it_is_full() {
        let returns = Returns {
            open: HashMap::new(),
            recent: VecDeque::new(),
        };
        // The 20-episode mean reaches the target first; the 100-episode one counts only when
        // its window is full.
        let mut state = TrainState {
            frames: 1000,
            ..TrainState::default()
        };
        state.note_returns(&returns, means(0.9, 0.7, 50), (Some(0.8), 20), 1.0);
        assert_eq!(state.frames_to_target, Some(1000));
        let mut wide = TrainState::default();
        for (frames, m) in [(1000, means(0.9, 0.9, 50)), (2000, means(0.9, 0.7, 100))] {
            wide.frames = frames;
            wide.note_returns(&returns, m, (Some(0.8), 100), 1.0);
            assert_eq!(wide.frames_to_target, None, "at {frames}");
        }
        wide.frames = 3000;
        wide.note_returns(&returns, means(0.5, 0.81, 120), (Some(0.8), 100), 2.0);
        assert_eq!(wide.frames_to_target, Some(3000));
        assert_eq!(wide.seconds_to_target, Some(2.0));
    }
}

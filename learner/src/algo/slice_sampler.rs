//! SliceSampler: contiguous sub-trajectories of the replay storage, TorchRL's options.
//!
//! - `slice_len` or `num_slices` with `batch_size` (`batch_size = num_slices * slice_len`).
//! - `strict_length = true` drops runs shorter than `slice_len`; `false` lets slices end early
//!   at a trajectory's end (shorter slices, so the flat batch can hold fewer steps).
//! - Output is ragged and flat by default: the slices back to back, `is_init` true at every
//!   slice start (and wherever a trajectory starts inside a slice); `pad_output` gives
//!   `[num_slices, slice_len]` with `("collector", "mask")`.
//! - End of trajectory: a change of `traj_ids` and the end key (`done`, or
//!   `terminated | truncated`); slices never cross either.
//! - With replacement: start positions uniform over every valid start. Without replacement:
//!   an epoch visits every valid slice once, where the valid slices tile each run into
//!   consecutive `slice_len` pieces (the last piece shorter, or dropped with `strict_length`);
//!   the tiling is offset at random per epoch so that piece boundaries move.
//! - `pack` (PPO's `pack_slices`, not a TorchRL option): the runs are the stored env rows
//!   (each chunk's `T` steps per env) instead of trajectories, tiled from their first step, so
//!   slices cross trajectory ends with `is_init` at each start inside them and nothing is
//!   padded when `slice_len` divides `T`.
//!
//! (TorchRL draws a trajectory first and then a start within it; recur draws starts uniformly,
//! so long trajectories are not under-sampled.)

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha12Rng;
use serde::{Deserialize, Serialize};

use std::ops::Range;

use crate::algo::replay_buffer::ReplayStorage;

/// Which flags end a trajectory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndKey {
    Done,
    TerminatedOrTruncated,
}

/// Sampler options (TorchRL's names).
#[derive(Clone, Debug, PartialEq)]
pub struct SliceSamplerConfig {
    pub slice_len: Option<usize>,
    pub num_slices: Option<usize>,
    pub batch_size: usize,
    pub strict_length: bool,
    pub pad_output: bool,
    pub end_key: EndKey,
    pub replacement: bool,
    pub seed: u64,
    /// Slices tile each stored env row (a chunk's `T` steps) at fixed offsets and cross
    /// trajectory ends (`is_init` marks each start inside a slice), instead of ending at them.
    pub pack: bool,
}

impl SliceSamplerConfig {
    /// `slice_len`-long slices, `batch_size` steps per batch, TorchRL's defaults otherwise.
    pub fn with_slice_len(slice_len: usize, batch_size: usize) -> Self {
        SliceSamplerConfig {
            slice_len: Some(slice_len),
            num_slices: None,
            batch_size,
            strict_length: true,
            pad_output: false,
            end_key: EndKey::Done,
            replacement: true,
            seed: 0,
            pack: false,
        }
    }

    /// `num_slices` slices of `slice_len` per batch, padded, slices cut short at trajectory
    /// ends: what the learners train on.
    pub fn padded(slice_len: usize, num_slices: usize, replacement: bool, seed: u64) -> Self {
        SliceSamplerConfig {
            strict_length: false,
            pad_output: true,
            replacement,
            seed,
            ..Self::with_slice_len(slice_len, slice_len * num_slices)
        }
    }
}

/// Invalid sampler options or an impossible request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplerError {
    #[error("slice sampler: `{key}` = {value} is invalid: {expected}")]
    Config {
        key: &'static str,
        value: String,
        expected: String,
    },
    #[error("slice sampler: no valid slice of length {slice_len} in {steps} stored steps ({runs} runs, longest {longest})")]
    Empty {
        slice_len: usize,
        steps: usize,
        runs: usize,
        longest: usize,
    },
}

/// One sampled batch, as storage positions.
#[derive(Clone, Debug, PartialEq)]
pub struct SampledBatch {
    /// Flat layout: the storage position of every step, slices back to back. With
    /// `pad_output`, `num_slices * slice_len` entries (padding repeats the slice's last step).
    pub positions: Vec<usize>,
    /// True at every slice start and wherever a trajectory starts inside a slice.
    pub is_init: Vec<bool>,
    /// `(start in the flat layout, length)` of each slice.
    pub slices: Vec<(usize, usize)>,
    /// With `pad_output`: true on real steps, false on padding (`("collector", "mask")`).
    pub mask: Option<Vec<bool>>,
}

/// What [`SliceSampler::state`] saves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SamplerState {
    rng: ([u8; 32], u64, u128),
    epoch: Vec<(usize, usize)>,
}

/// Draws slices from a [`ReplayStorage`].
pub struct SliceSampler {
    config: SliceSamplerConfig,
    slice_len: usize,
    num_slices: usize,
    /// rand's `StdRng` generator, named so that its position can be saved.
    rng: ChaCha12Rng,
    /// Without replacement: the remaining slices of the current epoch.
    epoch: Vec<(usize, usize)>,
}

impl SliceSampler {
    /// Where the sampler stands (its generator's position, the rest of the current epoch):
    /// saved in a checkpoint so that a resumed run draws the slices the uninterrupted one would.
    pub fn state(&self) -> SamplerState {
        let rng = &self.rng;
        SamplerState {
            rng: (rng.get_seed(), rng.get_stream(), rng.get_word_pos()),
            epoch: self.epoch.clone(),
        }
    }

    /// Continues from [`SliceSampler::state`].
    pub fn set_state(&mut self, state: SamplerState) {
        let (seed, stream, word_pos) = state.rng;
        self.rng = ChaCha12Rng::from_seed(seed);
        self.rng.set_stream(stream);
        self.rng.set_word_pos(word_pos);
        self.epoch = state.epoch;
    }

    pub fn new(config: SliceSamplerConfig) -> Result<Self, SamplerError> {
        let bad = |key, value: String, expected: &str| {
            Err(SamplerError::Config {
                key,
                value,
                expected: expected.into(),
            })
        };
        if config.batch_size == 0 {
            return bad("batch_size", "0".into(), "at least 1");
        }
        let one = "exactly one of slice_len and num_slices";
        let (slice_len, num_slices) = match (config.slice_len, config.num_slices) {
            (Some(_), Some(_)) => {
                return bad("slice_len", "set together with num_slices".into(), one)
            }
            (None, None) => return bad("slice_len", "unset, and num_slices too".into(), one),
            (Some(0), _) => return bad("slice_len", "0".into(), "at least 1"),
            (_, Some(0)) => return bad("num_slices", "0".into(), "at least 1"),
            (Some(l), None) => (l, config.batch_size / l),
            (None, Some(n)) => (config.batch_size / n, n),
        };
        if slice_len * num_slices != config.batch_size || slice_len == 0 || num_slices == 0 {
            return bad(
                "batch_size",
                config.batch_size.to_string(),
                &format!("a multiple of slice_len / num_slices ({slice_len} x {num_slices})"),
            );
        }
        Ok(SliceSampler {
            rng: ChaCha12Rng::seed_from_u64(config.seed),
            config,
            slice_len,
            num_slices,
            epoch: Vec::new(),
        })
    }

    /// Runs (in insertion order) under this sampler's end key; with `pack`, the stored env
    /// rows (`T` steps each: the storage holds whole rows).
    fn runs(&self, storage: &ReplayStorage, range: Range<usize>) -> Vec<(usize, usize)> {
        if self.config.pack {
            let t = storage.schema().steps;
            return (range.start / t..range.end / t)
                .map(|r| (r * t, t))
                .collect();
        }
        match self.config.end_key {
            EndKey::Done => storage.runs_in(range, |p| storage.next_done[p]),
            EndKey::TerminatedOrTruncated => storage.runs_in(range, |p| {
                storage.next_terminated[p] || storage.next_truncated[p]
            }),
        }
    }

    /// Every valid `(start, length)` in insertion order: with replacement, one per start
    /// position; without, the tiling of each run.
    fn candidates(
        &mut self,
        storage: &ReplayStorage,
        range: Range<usize>,
    ) -> Result<Vec<(usize, usize)>, SamplerError> {
        let steps = range.len();
        let runs = self.runs(storage, range);
        let l = self.slice_len;
        let mut out = Vec::new();
        if self.config.replacement {
            for &(start, len) in &runs {
                if len >= l {
                    out.extend((start..=start + len - l).map(|s| (s, l)));
                } else if !self.config.strict_length {
                    // Any start works; the slice ends at the run's end.
                    out.extend((start..start + len).map(|s| (s, (start + len - s).min(l))));
                }
            }
        } else {
            for &(start, len) in &runs {
                if self.config.strict_length {
                    // floor(len / l) whole pieces, at a random shift inside the run.
                    let pieces = len / l;
                    let shift = self.rng.random_range(0..=len - pieces * l);
                    out.extend((0..pieces).map(|k| (start + shift + k * l, l)));
                } else if len <= l {
                    out.push((start, len));
                } else {
                    // A head piece of random length (possibly none; none when packed), then
                    // whole pieces, the last one shorter.
                    let head = if self.config.pack {
                        0
                    } else {
                        self.rng.random_range(0..l)
                    };
                    let mut s = start;
                    if head > 0 {
                        out.push((s, head));
                        s += head;
                    }
                    while s < start + len {
                        let take = l.min(start + len - s);
                        out.push((s, take));
                        s += take;
                    }
                }
            }
        }
        if out.is_empty() {
            return Err(SamplerError::Empty {
                slice_len: l,
                steps,
                runs: runs.len(),
                longest: runs.iter().map(|r| r.1).max().unwrap_or(0),
            });
        }
        Ok(out)
    }

    /// Draws one batch of `num_slices` slices.
    pub fn sample(&mut self, storage: &ReplayStorage) -> Result<SampledBatch, SamplerError> {
        self.sample_in(storage, 0..storage.len())
    }

    /// [`sample`](Self::sample) from the steps `range` (insertion order) alone, as this
    /// sampler would from a storage that held only them: one rank's shard (`--as-ranks`).
    pub fn sample_in(
        &mut self,
        storage: &ReplayStorage,
        range: Range<usize>,
    ) -> Result<SampledBatch, SamplerError> {
        let picks: Vec<(usize, usize)> = if self.config.replacement {
            let candidates = self.candidates(storage, range)?;
            (0..self.num_slices)
                .map(|_| candidates[self.rng.random_range(0..candidates.len())])
                .collect()
        } else {
            let mut picks = Vec::with_capacity(self.num_slices);
            while picks.len() < self.num_slices {
                if self.epoch.is_empty() {
                    let mut next = self.candidates(storage, range.clone())?;
                    next.shuffle(&mut self.rng);
                    self.epoch = next;
                }
                picks.push(self.epoch.pop().expect("a refilled epoch"));
            }
            picks
        };
        Ok(self.assemble(storage, &picks))
    }

    /// The slices of one whole epoch without replacement, in batches (the last may be
    /// smaller); the sampler's state is left at a fresh epoch.
    pub fn epoch(&mut self, storage: &ReplayStorage) -> Result<Vec<SampledBatch>, SamplerError> {
        self.epoch_in(storage, 0..storage.len())
    }

    /// [`epoch`](Self::epoch) over the steps `range` (insertion order) alone (see
    /// [`sample_in`](Self::sample_in)).
    pub fn epoch_in(
        &mut self,
        storage: &ReplayStorage,
        range: Range<usize>,
    ) -> Result<Vec<SampledBatch>, SamplerError> {
        let mut all = self.candidates(storage, range)?;
        all.shuffle(&mut self.rng);
        self.epoch.clear();
        Ok(all
            .chunks(self.num_slices)
            .map(|picks| self.assemble(storage, picks))
            .collect())
    }

    fn assemble(&self, storage: &ReplayStorage, picks: &[(usize, usize)]) -> SampledBatch {
        let mut b = SampledBatch {
            positions: Vec::new(),
            is_init: Vec::new(),
            slices: Vec::new(),
            mask: self.config.pad_output.then(Vec::new),
        };
        for &(start, len) in picks {
            b.slices.push((b.positions.len(), len));
            for k in 0..len {
                let p = storage.position(start + k);
                b.positions.push(p);
                b.is_init.push(k == 0 || storage.is_init[p]);
            }
            if let Some(mask) = &mut b.mask {
                mask.extend(std::iter::repeat_n(true, len));
                let last = storage.position(start + len - 1);
                for _ in len..self.slice_len {
                    b.positions.push(last);
                    b.is_init.push(false);
                    mask.push(false);
                }
            }
        }
        b
    }
}

impl SampledBatch {
    /// The batches `parts` back to back, as one batch (their positions index one storage).
    pub fn concat(parts: Vec<SampledBatch>) -> SampledBatch {
        let mut out = SampledBatch {
            positions: Vec::new(),
            is_init: Vec::new(),
            slices: Vec::new(),
            mask: parts
                .first()
                .and_then(|p| p.mask.as_ref())
                .map(|_| Vec::new()),
        };
        for part in parts {
            let at = out.positions.len();
            out.slices
                .extend(part.slices.iter().map(|&(start, len)| (at + start, len)));
            out.positions.extend(part.positions);
            out.is_init.extend(part.is_init);
            if let (Some(all), Some(mask)) = (out.mask.as_mut(), part.mask) {
                all.extend(mask);
            }
        }
        out
    }
}

/// What `N` learner ranks would sample, in one process (`recur-learner replay --as-ranks N`,
/// the reference the rank tests hold a group to): the storage holds the ranks' shards back to
/// back, shard `k` sampled by the sampler rank `k` would have, and each batch is the
/// concatenation of the shards' batches (rank 0's slices first), so that one process trains on
/// the group's minibatches.
pub struct ShardSamplers {
    samplers: Vec<SliceSampler>,
    /// Each shard's steps, in insertion order.
    shards: Vec<Range<usize>>,
}

impl ShardSamplers {
    /// One sampler per shard: `config(k)` is rank `k`'s sampler config (its share of the
    /// slices, its seed); `shards` the shards' step ranges.
    pub fn new(
        shards: Vec<Range<usize>>,
        config: impl Fn(usize) -> SliceSamplerConfig,
    ) -> Result<Self, SamplerError> {
        let samplers = (0..shards.len())
            .map(|k| SliceSampler::new(config(k)))
            .collect::<Result<_, _>>()?;
        Ok(ShardSamplers { samplers, shards })
    }

    /// One batch of every shard, concatenated.
    pub fn sample(&mut self, storage: &ReplayStorage) -> Result<SampledBatch, SamplerError> {
        let parts = (self.samplers.iter_mut().zip(&self.shards))
            .map(|(s, range)| s.sample_in(storage, range.clone()))
            .collect::<Result<_, _>>()?;
        Ok(SampledBatch::concat(parts))
    }

    /// Every shard's epoch, its `i`-th batches concatenated into the `i`-th batch (the shards'
    /// epochs must have as many batches: PPO's `pack_slices` on equal shards).
    pub fn epoch(&mut self, storage: &ReplayStorage) -> Result<Vec<SampledBatch>, SamplerError> {
        let mut epochs = Vec::with_capacity(self.samplers.len());
        for (s, range) in self.samplers.iter_mut().zip(&self.shards) {
            epochs.push(s.epoch_in(storage, range.clone())?.into_iter());
        }
        let mut out = Vec::new();
        loop {
            let parts: Vec<SampledBatch> = epochs.iter_mut().filter_map(|e| e.next()).collect();
            if parts.is_empty() {
                return Ok(out);
            }
            out.push(SampledBatch::concat(parts));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::chunk::{traj_id, ActionKind, Chunk, ChunkMeta, ChunkSchema};
    use recur_rnn::CellKind;

    fn schema(envs: usize, steps: usize) -> ChunkSchema {
        ChunkSchema {
            envs,
            steps,
            obs_dim: 1,
            action: ActionKind::Discrete,
            cell: CellKind::Gru,
            num_layers: 1,
            hidden_size: 2,
            images: Vec::new(),
        }
    }

    /// A storage of `chunks` chunks whose episodes end with probability `p_done` per step;
    /// observation = the global step index (to identify positions).
    fn storage(envs: usize, steps: usize, chunks: usize, p_done: f64, seed: u64) -> ReplayStorage {
        let all = chunks_of(envs, steps, chunks, p_done, seed);
        stored(&schema(envs, steps), &all)
    }

    /// A storage holding exactly `chunks`.
    fn stored(s: &ChunkSchema, chunks: &[Chunk]) -> ReplayStorage {
        let mut storage = ReplayStorage::new(s, s.envs * s.steps * chunks.len());
        chunks.iter().for_each(|c| storage.extend(c));
        storage
    }

    /// The chunks of [`storage`].
    fn chunks_of(envs: usize, steps: usize, chunks: usize, p_done: f64, seed: u64) -> Vec<Chunk> {
        let s = schema(envs, steps);
        let mut out = Vec::new();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut episode = vec![0u64; envs];
        let mut starting = vec![true; envs];
        for c in 0..chunks {
            let meta = ChunkMeta::new(1, 0, c as u64, 0);
            let mut chunk = Chunk::zeros(&s, meta);
            for e in 0..envs {
                for t in 0..steps {
                    let p = e * steps + t;
                    chunk.observation[p] = (c * envs * steps + p) as f32;
                    chunk.traj_ids[p] = traj_id(1, 0, e, episode[e]);
                    chunk.is_init[p] = starting[e] as u8;
                    let done = rng.random_bool(p_done);
                    chunk.next_done[p] = done as u8;
                    chunk.next_terminated[p] = done as u8;
                    starting[e] = done;
                    if done {
                        episode[e] += 1;
                    }
                }
            }
            out.push(chunk);
        }
        out
    }

    /// `--as-ranks`' samplers draw, over one storage holding the shards back to back, exactly
    /// what each rank's sampler draws from a storage of its shard alone (positions offset by
    /// the shard's start), concatenated in rank order: with and without replacement, packed.
    #[test]
    fn shard_samplers_draw_what_each_rank_draws_from_its_own_shard() {
        let (envs, steps) = (4, 20);
        let all = chunks_of(envs, steps, 4, 0.1, 3);
        let s = schema(envs, steps);
        let combined = stored(&s, &all);
        let f = 2 * envs * steps;
        for (replacement, pack) in [(true, false), (false, false), (false, true)] {
            let config = |k: usize| SliceSamplerConfig {
                pack,
                ..SliceSamplerConfig::padded(5, 3, replacement, 10 + k as u64)
            };
            let mut shards = ShardSamplers::new(vec![0..f, f..2 * f], config).unwrap();
            let mut ranks: Vec<(ReplayStorage, SliceSampler)> = (0..2)
                .map(|k| {
                    (
                        stored(&s, &all[2 * k..2 * k + 2]),
                        SliceSampler::new(config(k)).unwrap(),
                    )
                })
                .collect();
            let offset = |k: usize, mut b: SampledBatch| {
                b.positions.iter_mut().for_each(|p| *p += k * f);
                b
            };
            for _ in 0..4 {
                let (got, want) = if replacement {
                    let want = (ranks.iter_mut().enumerate())
                        .map(|(k, (st, sm))| offset(k, sm.sample(st).unwrap()))
                        .collect();
                    (
                        vec![shards.sample(&combined).unwrap()],
                        vec![SampledBatch::concat(want)],
                    )
                } else {
                    let epochs: Vec<Vec<SampledBatch>> = (ranks.iter_mut().enumerate())
                        .map(|(k, (st, sm))| {
                            let e = sm.epoch(st).unwrap();
                            e.into_iter().map(|b| offset(k, b)).collect()
                        })
                        .collect();
                    // Unpacked shards may tile into different numbers of batches: the longer
                    // epoch's last batches are its own.
                    let most = epochs.iter().map(Vec::len).max().unwrap();
                    let want = (0..most)
                        .map(|i| {
                            SampledBatch::concat(
                                epochs.iter().filter_map(|e| e.get(i).cloned()).collect(),
                            )
                        })
                        .collect();
                    (shards.epoch(&combined).unwrap(), want)
                };
                assert!(!got.is_empty());
                assert_eq!(got, want, "replacement {replacement}, pack {pack}");
            }
        }
    }

    fn check_no_crossing(storage: &ReplayStorage, b: &SampledBatch) {
        for &(start, len) in &b.slices {
            let ps = &b.positions[start..start + len];
            assert!(
                ps.iter()
                    .all(|&p| storage.traj_ids[p] == storage.traj_ids[ps[0]]),
                "a slice crosses trajectories"
            );
            assert!(
                ps[..len - 1].iter().all(|&p| !storage.next_done[p]),
                "a slice crosses a done"
            );
            // Consecutive steps of the storage.
            for w in ps.windows(2) {
                assert_eq!(storage.observation[w[1]], storage.observation[w[0]] + 1.0);
            }
            assert!(b.is_init[start], "is_init at every slice start");
        }
    }

    #[test]
    fn slices_never_cross_trajectories_under_any_option() {
        let st = storage(4, 25, 6, 0.05, 1);
        for strict in [true, false] {
            for replacement in [true, false] {
                for end_key in [EndKey::Done, EndKey::TerminatedOrTruncated] {
                    let mut c = SliceSamplerConfig::with_slice_len(8, 64);
                    c.strict_length = strict;
                    c.replacement = replacement;
                    c.end_key = end_key;
                    let mut s = SliceSampler::new(c).unwrap();
                    for _ in 0..20 {
                        let b = s.sample(&st).unwrap();
                        assert_eq!(b.slices.len(), 8);
                        check_no_crossing(&st, &b);
                        if strict {
                            assert!(b.slices.iter().all(|s| s.1 == 8));
                            assert_eq!(b.positions.len(), 64);
                        } else {
                            assert!(b.slices.iter().all(|s| (1..=8).contains(&s.1)));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn num_slices_and_batch_size_define_the_slice_length() {
        let st = storage(2, 40, 2, 0.0, 2);
        let mut c = SliceSamplerConfig::with_slice_len(1, 60);
        c.slice_len = None;
        c.num_slices = Some(6);
        let mut s = SliceSampler::new(c).unwrap();
        assert_eq!((s.slice_len, s.num_slices), (10, 6));
        assert_eq!(s.sample(&st).unwrap().positions.len(), 60);
        let err = SliceSampler::new(SliceSamplerConfig::with_slice_len(7, 60))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("`batch_size` = 60") && err.contains("multiple"),
            "{err}"
        );
        let mut both = SliceSamplerConfig::with_slice_len(10, 60);
        both.num_slices = Some(6);
        assert!(SliceSampler::new(both)
            .err()
            .unwrap()
            .to_string()
            .contains("exactly one"));
    }

    #[test]
    fn strict_length_drops_short_trajectories_and_says_when_nothing_is_left() {
        // Every episode lasts 5 steps (p_done = 1 every 5th step is emulated with p=0 + short chunks).
        let st = storage(3, 5, 2, 0.0, 3); // runs of 5 (each env row of a chunk)
        let mut strict = SliceSampler::new(SliceSamplerConfig::with_slice_len(8, 16)).unwrap();
        let err = strict.sample(&st).unwrap_err();
        assert!(
            matches!(
                err,
                SamplerError::Empty {
                    slice_len: 8,
                    longest: 5,
                    ..
                }
            ),
            "{err}"
        );
        let mut c = SliceSamplerConfig::with_slice_len(8, 16);
        c.strict_length = false;
        let b = SliceSampler::new(c).unwrap().sample(&st).unwrap();
        assert!(b.slices.iter().all(|s| s.1 <= 5));
        assert!(b.positions.len() < 16);
    }

    #[test]
    fn pad_output_gives_rectangular_slices_with_a_mask() {
        let st = storage(3, 5, 2, 0.0, 4);
        let mut c = SliceSamplerConfig::with_slice_len(8, 16);
        c.strict_length = false;
        c.pad_output = true;
        let b = SliceSampler::new(c).unwrap().sample(&st).unwrap();
        let mask = b.mask.as_ref().unwrap();
        assert_eq!((b.positions.len(), mask.len()), (16, 16));
        for (k, &(start, len)) in b.slices.iter().enumerate() {
            assert_eq!(start, k * 8);
            assert!(mask[start..start + len].iter().all(|&m| m));
            assert!(mask[start + len..start + 8].iter().all(|&m| !m));
            assert!(b.is_init[start] && !b.is_init[start + len..start + 8].iter().any(|&x| x));
        }
    }

    #[test]
    fn an_epoch_without_replacement_visits_every_valid_slice_once() {
        let st = storage(4, 30, 5, 0.04, 5);
        for strict in [false, true] {
            let mut c = SliceSamplerConfig::with_slice_len(8, 32);
            c.replacement = false;
            c.strict_length = strict;
            let mut s = SliceSampler::new(c).unwrap();
            let batches = s.epoch(&st).unwrap();
            let mut seen = vec![0u32; st.capacity()];
            for b in &batches {
                check_no_crossing(&st, b);
                for &p in &b.positions {
                    seen[p] += 1;
                }
            }
            let runs = st.runs(|p| st.next_done[p]);
            if strict {
                let expected: usize = runs.iter().map(|r| r.1 / 8 * 8).sum();
                assert_eq!(seen.iter().filter(|&&n| n == 1).count(), expected);
                assert!(seen.iter().all(|&n| n <= 1));
            } else {
                // Every stored step exactly once.
                assert!(
                    seen.iter().all(|&n| n == 1),
                    "non-strict epochs cover every step once"
                );
            }
        }
    }

    /// `pack` (PPO's `pack_slices`): an epoch tiles every stored env row at fixed offsets, so
    /// with `slice_len` dividing `T` it is exactly `len / slice_len` full slices, no padding,
    /// every step once; slices run across episode ends with `is_init` at each trajectory start
    /// inside them, and never across rows (chunks or envs).
    #[test]
    fn packed_epochs_tile_rows_across_episode_ends_without_padding() {
        let (envs, steps, chunks, l) = (4, 32, 3, 8);
        let st = storage(envs, steps, chunks, 0.1, 7);
        let mut c = SliceSamplerConfig::padded(l, 4, false, 9);
        c.pack = true;
        let mut s = SliceSampler::new(c).unwrap();
        for _ in 0..3 {
            let batches = s.epoch(&st).unwrap();
            assert_eq!(batches.len(), envs * steps * chunks / (l * 4));
            let mut seen = vec![0u32; st.capacity()];
            let mut crossed = 0;
            for b in &batches {
                assert_eq!(b.positions.len(), 4 * l);
                assert!(b.mask.as_ref().unwrap().iter().all(|&m| m), "no padding");
                for &(start, len) in &b.slices {
                    assert_eq!(len, l);
                    let ps = &b.positions[start..start + len];
                    assert_eq!(ps[0] % l, 0, "fixed offsets");
                    assert_eq!(ps[0] / steps, ps[len - 1] / steps, "inside one row");
                    for (k, w) in ps.windows(2).enumerate() {
                        assert_eq!(st.observation[w[1]], st.observation[w[0]] + 1.0);
                        let starts = st.traj_ids[w[1]] != st.traj_ids[w[0]];
                        crossed += usize::from(starts);
                        assert_eq!(b.is_init[start + k + 1], st.is_init[w[1]]);
                        assert_eq!(starts, st.is_init[w[1]], "a new trajectory is an is_init");
                    }
                    assert!(b.is_init[start], "is_init at every slice start");
                    ps.iter().for_each(|&p| seen[p] += 1);
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "every stored step once");
            assert!(crossed > 0, "some slice runs across an episode end");
        }
    }

    /// Start positions are uniform over the valid starts: chi-square over 100 starts with a fixed
    /// seed; the statistic must stay below the 0.999 quantile of chi^2(99) (148.2).
    #[test]
    fn start_positions_are_uniform_over_valid_starts() {
        // One long run: 107 steps, slice_len 8 -> 100 valid starts.
        let st = storage(1, 107, 1, 0.0, 6);
        let mut c = SliceSamplerConfig::with_slice_len(8, 8 * 50);
        c.seed = 12345;
        let mut s = SliceSampler::new(c).unwrap();
        let mut counts = vec![0f64; 100];
        for _ in 0..400 {
            let b = s.sample(&st).unwrap();
            for &(start, _) in &b.slices {
                counts[st.observation[b.positions[start]] as usize] += 1.0;
            }
        }
        let n: f64 = counts.iter().sum();
        let expected = n / 100.0;
        let chi2: f64 = counts
            .iter()
            .map(|c| (c - expected).powi(2) / expected)
            .sum();
        assert!(chi2 < 148.2, "chi^2 = {chi2} over 100 starts ({n} draws)");
        assert!(
            counts.iter().all(|&c| c > 0.0),
            "every valid start is drawn"
        );
    }
}

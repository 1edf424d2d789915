//! `ppo.novelty_bonus`: a count bonus for exploration. Each step's reward gains
//! `novelty_bonus / sqrt(n)`, where `n` counts the visits to the step's next observation
//! (every observation column, image bytes included, compared exactly), this one included.
//! `ppo.novelty_counts = "episode"` counts within the step's episode: a view seen for the
//! first time in an episode earns the whole bonus, so a policy is pushed to look around
//! within each episode. `"run"` counts since the run began: views grow familiar for good,
//! and only the ones the policy seldom reaches (turning back to a cue it has stopped looking
//! at, say) still pay. The episode returns recur reports are the environment's alone. Like
//! the return normalizer's, the counts are kept in checkpoints (bit-exact resume).

use std::collections::HashMap;

use common::chunk::{Chunk, ChunkSchema};
use common::hash::fnv1a;

use crate::config::NoveltyCounts;

/// Distinct views the run-wide table holds at most (about 100 MB); views past them count
/// as new each time.
const RUN_VIEWS: usize = 1 << 22;

/// The visit counts, keyed by the observation's FNV-1a hash: per open trajectory (dropped at
/// its end), or for the whole run.
#[derive(Default, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) struct Novelty {
    open: HashMap<i64, HashMap<u64, u32>>,
    run: HashMap<u64, u32>,
    #[serde(skip)]
    warned: bool,
}

impl Novelty {
    /// Counts every next observation of `chunk` (`[E, T]` positions, row-major) and returns
    /// `1 / sqrt(count)` per position (to be scaled by the bonus).
    pub(super) fn visit(
        &mut self,
        chunk: &Chunk,
        schema: &ChunkSchema,
        counts: NoveltyCounts,
    ) -> Vec<f32> {
        let (d, px) = (schema.obs_dim, schema.pixels());
        (0..chunk.next_reward.len())
            .map(|p| {
                let obs = &chunk.next_observation[p * d..(p + 1) * d];
                let pixels = &chunk.next_pixels[p * px..(p + 1) * px];
                let key = fnv1a(
                    obs.iter()
                        .flat_map(|x| x.to_bits().to_le_bytes())
                        .chain(pixels.iter().copied()),
                );
                let traj = chunk.traj_ids[p];
                let seen = match counts {
                    NoveltyCounts::Episode => {
                        let table = self.open.entry(traj).or_default();
                        bump(table.entry(key).or_insert(0))
                    }
                    NoveltyCounts::Run if self.run.len() < RUN_VIEWS => {
                        bump(self.run.entry(key).or_insert(0))
                    }
                    NoveltyCounts::Run => match self.run.get_mut(&key) {
                        Some(n) => bump(n),
                        None => {
                            if !std::mem::replace(&mut self.warned, true) {
                                tracing::warn!(
                                    "ppo.novelty_counts = \"run\": {RUN_VIEWS} distinct views \
                                     counted; views past them count as new each time (are the \
                                     observations continuous?)"
                                );
                            }
                            1
                        }
                    },
                };
                if chunk.next_done[p] == 1 {
                    self.open.remove(&traj);
                }
                1.0 / (seen as f32).sqrt()
            })
            .collect()
    }

    /// Trajectories with counts (open ones).
    #[cfg(test)]
    pub(super) fn open(&self) -> usize {
        self.open.len()
    }
}

/// Adds a visit and returns the count.
fn bump(n: &mut u32) -> u32 {
    *n = n.saturating_add(1);
    *n
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::chunk::{ActionKind, ChunkMeta, ImagePart};
    use recur_rnn::CellKind;

    /// One env row of `obs.len()` steps, a one-float observation each (and `px` image
    /// bytes), trajectory ids and ends as given.
    fn chunk(obs: &[f32], traj: &[i64], done: &[u8], px: usize) -> (Chunk, ChunkSchema) {
        let schema = ChunkSchema {
            envs: 1,
            steps: obs.len(),
            obs_dim: 1,
            action: ActionKind::Discrete,
            cell: CellKind::Gru,
            num_layers: 1,
            hidden_size: 1,
            images: (px > 0)
                .then(|| ImagePart {
                    key: "image".into(),
                    shape: [1, 1, px],
                })
                .into_iter()
                .collect(),
        };
        let mut chunk = Chunk::zeros(&schema, ChunkMeta::new(0, 0, 0, 0));
        chunk.next_observation = obs.to_vec();
        chunk.next_done = done.to_vec();
        chunk.traj_ids = traj.to_vec();
        (chunk, schema)
    }

    #[test]
    fn a_view_pays_less_each_time_its_episode_sees_it_again_and_counts_restart_per_episode() {
        let mut novelty = Novelty::default();
        // Trajectory 7 sees 1, 2, 1, 1 and ends; trajectory 8 sees 1 again, then 2.
        let (c, s) = chunk(
            &[1.0, 2.0, 1.0, 1.0, 1.0, 2.0],
            &[7, 7, 7, 7, 8, 8],
            &[0, 0, 0, 1, 0, 0],
            0,
        );
        let got = novelty.visit(&c, &s, NoveltyCounts::Episode);
        let want = [1.0, 1.0, 1.0 / 2f32.sqrt(), 1.0 / 3f32.sqrt(), 1.0, 1.0];
        assert_eq!(got, want);
        // The ended trajectory's table is gone; the open one carries into the next chunk.
        assert_eq!(novelty.open(), 1);
        let (c, s) = chunk(&[2.0, 3.0], &[8, 8], &[0, 1], 0);
        assert_eq!(
            novelty.visit(&c, &s, NoveltyCounts::Episode),
            [1.0 / 2f32.sqrt(), 1.0]
        );
        assert_eq!(novelty.open(), 0);
    }

    #[test]
    fn run_wide_counts_carry_across_episodes() {
        let mut novelty = Novelty::default();
        let (c, s) = chunk(&[1.0, 2.0, 1.0, 1.0], &[7, 7, 8, 8], &[0, 1, 0, 1], 0);
        let got = novelty.visit(&c, &s, NoveltyCounts::Run);
        assert_eq!(got, [1.0, 1.0, 1.0 / 2f32.sqrt(), 1.0 / 3f32.sqrt()]);
        assert_eq!(novelty.open(), 0);
        let (c, s) = chunk(&[2.0], &[9], &[0], 0);
        assert_eq!(
            novelty.visit(&c, &s, NoveltyCounts::Run),
            [1.0 / 2f32.sqrt()]
        );
    }

    #[test]
    fn image_bytes_tell_views_apart() {
        let (mut c, s) = chunk(&[1.0, 1.0], &[3, 3], &[0, 0], 2);
        c.next_pixels = vec![5, 6, 5, 7];
        assert_eq!(
            Novelty::default().visit(&c, &s, NoveltyCounts::Episode),
            [1.0, 1.0]
        );
        c.next_pixels = vec![5, 6, 5, 6];
        assert_eq!(
            Novelty::default().visit(&c, &s, NoveltyCounts::Episode),
            [1.0, 1.0 / 2f32.sqrt()]
        );
    }
}

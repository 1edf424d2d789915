//! `popgym-MineSweeper{Easy,Medium,Hard}-v0` (`popgym/envs/minesweeper.py`).

use super::numpy_rng::Generator;
use super::Difficulty;
use super::{check_obs, id_of, pair_action, write_one_hot};
use crate::envs::{ActionRef, Env, Space, StepResult};

/// MineSweeper on a hidden board: each click observes only the clicked square's count.
///
/// At reset `m` mines are placed on an `h x w` board with
/// `np_random.choice(arange(h * w), size=m, replace=False)` (Easy 4x4 with 2 mines, Medium 6x6
/// with 6, Hard 8x8 with 10). Each step clicks a square (`MultiDiscrete([h, w])`: row,
/// column), with `T = h w - m`: a mine terminates with reward `-0.5 - 1/T`; a square already
/// clicked costs `-0.5/(T - 2)`; a new free square is rewarded `1/T`. The episode also
/// terminates once every free square has been clicked, and truncates at step `T` otherwise.
/// The observation is the number of mines in the clicked square's 3x3 neighbourhood (itself
/// included) as a one-hot `[min(m + 1, 10)]` (0 at reset).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct MineSweeper {
    #[serde(skip)]
    id: &'static str,
    dims: [usize; 2],
    mines: usize,
    rng: Generator,
    /// popgym's `hidden_grid`, row-major: 0 clear, 1 mine, 2 viewed.
    hidden: Vec<u8>,
    /// Mines in each square's 3x3 neighbourhood.
    neighbors: Vec<u8>,
    steps: usize,
}

const CLEAR: u8 = 0;
const MINE: u8 = 1;
const VIEWED: u8 = 2;

impl MineSweeper {
    /// The `level` variant; call [`Env::reset`] before stepping.
    pub fn new(level: Difficulty) -> Self {
        let (dims, mines) = level.pick([([4, 4], 2), ([6, 6], 6), ([8, 8], 10)]);
        Self {
            id: id_of("MineSweeper", level),
            dims,
            mines,
            rng: Generator::from_seed(0),
            hidden: vec![CLEAR; dims[0] * dims[1]],
            neighbors: vec![0; dims[0] * dims[1]],
            steps: 0,
        }
    }

    fn num_obs(&self) -> usize {
        (self.mines + 1).min(10)
    }

    /// `max_episode_length`: the free squares.
    fn episode_length(&self) -> usize {
        self.dims[0] * self.dims[1] - self.mines
    }
}

impl Env for MineSweeper {
    // Observation one-hot count, `Box([0; k], [1; k])`, `k = min(m + 1, 10)` (popgym:
    // `Discrete(k)`). Action `MultiDiscrete([h, w])`: row and column to click.
    super::popgym_env!(env => observation: Space::unit_box(env.num_obs()),
        action: Space::MultiDiscrete { nvec: env.dims.to_vec() });

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        check_obs(self.id, obs, self.num_obs());
        self.rng = Generator::from_seed(seed);
        let [h, w] = self.dims;
        self.hidden.fill(CLEAR);
        for square in self.rng.choice_without_replacement(h * w, self.mines) {
            self.hidden[square] = MINE;
        }
        for r in 0..h {
            for c in 0..w {
                let mut count = 0;
                for rr in r.saturating_sub(1)..(r + 2).min(h) {
                    for cc in c.saturating_sub(1)..(c + 2).min(w) {
                        count += self.hidden[rr * w + cc];
                    }
                }
                self.neighbors[r * w + c] = count;
            }
        }
        self.steps = 0;
        write_one_hot(obs, 0);
    }

    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        check_obs(self.id, obs, self.num_obs());
        let [r, c] = pair_action(self.id, action, self.dims);
        let square = r * self.dims[1] + c;
        let t = self.episode_length();
        let success = 1.0 / t as f64;
        let mut terminated = false;
        let reward = match self.hidden[square] {
            MINE => {
                terminated = true;
                -0.5 - success
            }
            VIEWED => -0.5 / (t - 2) as f64,
            _ => {
                self.hidden[square] = VIEWED;
                success
            }
        };
        self.steps += 1;
        terminated |= self.hidden.iter().all(|&s| s != CLEAR);
        let truncated = self.steps == t && !terminated;
        write_one_hot(obs, usize::from(self.neighbors[square]));
        StepResult {
            reward,
            terminated,
            truncated,
        }
    }
}

//! `popgym-Battleship{Easy,Medium,Hard}-v0` (`popgym/envs/battleship.py`).

use super::numpy_rng::Generator;
use super::Difficulty;
use super::{check_obs, id_of, pair_action, write_one_hot};
use crate::envs::{ActionRef, Env, Space, StepResult};

/// Battleship on a hidden `b x b` board: only hit or miss is observed.
///
/// Ships of sizes 2, 3, 3 and 4 are placed at reset exactly as popgym does (a random start
/// `integers(b, size=2)` and direction `integers(2, size=2)`, redrawn until the ship lies on
/// the board and on free squares); `b` is 8 (Easy), 10 (Medium) or 12 (Hard). Each step fires
/// at a square (`MultiDiscrete([b, b])`: row, column): a hit on a ship square not fired at
/// before is rewarded `1/14`, anything else `-1/(b^2 - 14)`. The observation is hit (1) or
/// miss (0) as a one-hot `[2]` (0 at reset). The episode terminates when all 14 ship squares
/// are hit and truncates at step `b^2` (both may hold).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Battleship {
    #[serde(skip)]
    id: &'static str,
    size: usize,
    rng: Generator,
    /// Ship squares, row-major.
    board: Vec<bool>,
    /// Squares fired at, row-major.
    guesses: Vec<bool>,
    hits: usize,
    steps: usize,
}

impl Battleship {
    /// Ship sizes, placed in this order.
    pub const SHIPS: [usize; 4] = [2, 3, 3, 4];
    /// Hits needed to sink every ship.
    const NEEDED_HITS: usize = 2 + 3 + 3 + 4;

    /// The `level` variant; call [`Env::reset`] before stepping.
    pub fn new(level: Difficulty) -> Self {
        let size = level.pick([8, 10, 12]);
        Self {
            id: id_of("Battleship", level),
            size,
            rng: Generator::from_seed(0),
            board: vec![false; size * size],
            guesses: vec![false; size * size],
            hits: 0,
            steps: 0,
        }
    }

    /// popgym's `place_ship`.
    fn place_ship(&mut self, ship: usize) {
        let b = self.size as i64;
        loop {
            let start = [self.rng.integers(0, b), self.rng.integers(0, b)];
            let direction = [self.rng.integers(0, 2), self.rng.integers(0, 2)];
            let mut end = start;
            let sign = if direction[1] == 0 { 1 } else { -1 };
            end[direction[0] as usize] = start[direction[0] as usize] + sign * (ship as i64 - 1);
            if end.iter().any(|&e| e < 0 || e >= b) {
                continue;
            }
            let lo = [start[0].min(end[0]) as usize, start[1].min(end[1]) as usize];
            let hi = [start[0].max(end[0]) as usize, start[1].max(end[1]) as usize];
            let squares =
                || (lo[0]..=hi[0]).flat_map(move |r| (lo[1]..=hi[1]).map(move |c| (r, c)));
            if squares().all(|(r, c)| !self.board[r * self.size + c]) {
                for (r, c) in squares() {
                    self.board[r * self.size + c] = true;
                }
                return;
            }
        }
    }
}

impl Env for Battleship {
    // Observation one-hot hit/miss, `Box([0; 2], [1; 2])` (popgym: `Discrete(2)`).
    // Action `MultiDiscrete([b, b])`: row and column to fire at.
    super::popgym_env!(env => observation: Space::unit_box(2),
        action: Space::MultiDiscrete { nvec: vec![env.size, env.size] });

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        check_obs(self.id, obs, 2);
        self.rng = Generator::from_seed(seed);
        self.board.fill(false);
        for ship in Self::SHIPS {
            self.place_ship(ship);
        }
        self.guesses.fill(false);
        self.hits = 0;
        self.steps = 0;
        write_one_hot(obs, 0);
    }

    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        check_obs(self.id, obs, 2);
        let [r, c] = pair_action(self.id, action, [self.size, self.size]);
        let square = r * self.size + c;
        let hit = self.board[square] && !self.guesses[square];
        self.guesses[square] = true;
        if hit {
            self.hits += 1;
        }
        self.steps += 1;
        let max_steps = self.size * self.size;
        let needed = Self::NEEDED_HITS as f64;
        // popgym: int(hit) * (1.0 / needed) + int(not hit) * (-1.0 / (max - needed)),
        // evaluated as written (the zero term can be -0.0).
        let reward = f64::from(u8::from(hit)) * (1.0 / needed)
            + f64::from(u8::from(!hit)) * (-1.0 / (max_steps - Self::NEEDED_HITS) as f64);
        write_one_hot(obs, usize::from(hit));
        StepResult {
            reward,
            terminated: self.hits == Self::NEEDED_HITS,
            truncated: self.steps >= max_steps,
        }
    }
}

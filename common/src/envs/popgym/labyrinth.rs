//! `popgym-LabyrinthEscape{Easy,Medium,Hard}-v0` and `popgym-LabyrinthExplore{...}-v0`
//! (`popgym/envs/labyrinth_{escape,explore}.py` over `popgym/core/maze.py`, with mazelib 0.9's
//! `HuntAndKill` generator and `Maze.generate_entrances`).

use super::mt19937::{LegacyRandomState, PyRandom};
use super::{check_obs, discrete_action, id_of, Difficulty};
use crate::envs::{ActionRef, Env, Space, StepResult};

/// popgym's `Cell`: what a grid square holds.
const FREE: u8 = 0;
const OBSTACLE: u8 = 1;
const START: u8 = 2;
const GOAL: u8 = 3;
/// `len(Cell)` (with `HIDDEN`, which observations never show) and `len(Actions)` (with `NONE`).
const CELL_KINDS: usize = 5;
/// `Actions.NONE`: the action part of the reset observation.
const NO_ACTION: usize = 4;
/// `episode_length` at every level.
const EPISODE_LENGTH: usize = 1024;
/// Observation: the 3x3 view, then the previous action, each one-hot over 5.
const OBS_DIM: usize = 10 * CELL_KINDS;

/// What the agent is rewarded for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Task {
    /// Reach the exit on the far wall: `-1/1024` per step, `+1` on the exit, which ends it.
    Escape,
    /// Visit every free square: `1/(free squares)` for a new one, `-1/1024` otherwise; ends when
    /// all are visited.
    Explore,
}

/// A maze of `blocks x blocks` corridors (Easy 5, Medium 7, Hard 9: popgym's `maze_dims` 10, 14,
/// 18 halved), `2 * blocks + 1` squares a side, walls included. The agent starts in an opening
/// of the outer wall and sees the 3x3 squares around it (popgym's `local_view`: at the grid's
/// edge the view is shifted, not centred, and padded with walls at the bottom and right) and
/// its previous action. Actions: `Discrete(4)`, left, right, up, down; a move into a wall does
/// nothing. Episodes truncate after 1023 steps (popgym's `curr_step == max_episode_length - 1`).
///
/// Every reset regenerates the maze from `seed` exactly as `reset(seed=seed)` does in the
/// package: `random.seed(seed)` and `np.random.seed(seed)`, then mazelib's Hunt-and-Kill (random
/// hunt order: `H * W` hunts) draws cells with `random.randrange`/`choice` and shuffles
/// neighbour lists with `np.random.shuffle`; the start and exit are on opposite outer walls.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Labyrinth {
    #[serde(skip)]
    id: &'static str,
    task: Task,
    /// Squares per side (`H = W`).
    side: usize,
    /// Row-major `side * side` cells.
    grid: Vec<u8>,
    explored: Vec<bool>,
    /// `(row, column)`.
    position: (usize, usize),
    curr_step: usize,
    /// Squares visited, and squares that can be (Explore's end condition).
    visited: usize,
    open: usize,
    /// Explore's reward for a new square.
    new_square_reward: f64,
}

impl Labyrinth {
    /// `LabyrinthEscape` at `level`; call [`Env::reset`] before stepping.
    pub fn escape(level: Difficulty) -> Self {
        Self::new(Task::Escape, id_of("LabyrinthEscape", level), level)
    }

    /// `LabyrinthExplore` at `level`; call [`Env::reset`] before stepping.
    pub fn explore(level: Difficulty) -> Self {
        Self::new(Task::Explore, id_of("LabyrinthExplore", level), level)
    }

    fn new(task: Task, id: &'static str, level: Difficulty) -> Self {
        let side = 2 * level.pick([5, 7, 9]) + 1;
        Self {
            id,
            task,
            side,
            grid: vec![OBSTACLE; side * side],
            explored: vec![false; side * side],
            position: (0, 0),
            curr_step: 0,
            visited: 0,
            open: 0,
            new_square_reward: 0.0,
        }
    }

    fn at(&self, (r, c): (usize, usize)) -> usize {
        r * self.side + c
    }

    /// mazelib's `MazeGenAlgo._find_neighbors(r, c, grid, is_wall=True)`: the walled cells two
    /// squares away, in the order north, south, west, east, then `np.random.shuffle`d.
    fn walled_neighbors(
        &self,
        (r, c): (usize, usize),
        np: &mut LegacyRandomState,
    ) -> Vec<(usize, usize)> {
        let mut ns: Vec<_> = [
            (r > 1).then(|| (r - 2, c)),
            (r + 2 < self.side).then(|| (r + 2, c)),
            (c > 1).then(|| (r, c - 2)),
            (c + 2 < self.side).then(|| (r, c + 2)),
        ]
        .into_iter()
        .flatten()
        .filter(|&p| self.grid[self.at(p)] == OBSTACLE)
        .collect();
        np.shuffle(&mut ns);
        ns
    }

    /// `HuntAndKill(hunt_order="random").generate()` into `self.grid`.
    fn generate(&mut self, py: &mut PyRandom, np: &mut LegacyRandomState) {
        let side = self.side;
        self.grid.fill(OBSTACLE);
        let mut cell = Some((py.randrange(1, side, 2), py.randrange(1, side, 2)));
        let start = self.at(cell.expect("set"));
        self.grid[start] = FREE;
        let mut trials = 0;
        while let Some(from) = cell {
            // `_walk`: a random walk from a carved cell, carving until it is boxed in.
            if self.grid[self.at(from)] == FREE {
                let mut here = from;
                let mut ns = self.walled_neighbors(here, np);
                while !ns.is_empty() {
                    let next = py.choice(&ns);
                    let (wall, n) = (
                        self.at(((next.0 + here.0) / 2, (next.1 + here.1) / 2)),
                        self.at(next),
                    );
                    self.grid[n] = FREE;
                    self.grid[wall] = FREE;
                    here = next;
                    ns = self.walled_neighbors(here, np);
                }
            }
            // `_hunt_random`: `H * W` random restarts.
            cell = (trials < side * side)
                .then(|| (py.randrange(1, side, 2), py.randrange(1, side, 2)));
            trials += 1;
        }
    }

    /// `Maze._generate_outer_entrances`: `(start, end)` on opposite outer walls.
    fn entrances(&self, py: &mut PyRandom) -> ((usize, usize), (usize, usize)) {
        let last = self.side - 1;
        let side = py.randbelow(4);
        let mut odd = || py.randrange(1, self.side, 2);
        match side {
            0 => ((0, odd()), (last, odd())),
            1 => ((last, odd()), (0, odd())),
            2 => ((odd(), 0), (odd(), last)),
            _ => ((odd(), last), (odd(), 0)),
        }
    }

    /// `MazeEnv.move`: where `action` leads (a wall, or the grid's edge, stops it).
    fn target(&self, action: usize) -> (usize, usize) {
        let (y, x) = self.position;
        let last = self.side - 1;
        let (y, x) = match action {
            0 => (y, x.saturating_sub(1)),
            1 => (y, (x + 1).min(last)),
            2 => (y.saturating_sub(1), x),
            _ => ((y + 1).min(last), x),
        };
        if self.grid[self.at((y, x))] == OBSTACLE {
            self.position
        } else {
            (y, x)
        }
    }

    /// `MazeEnv.get_obs(action)`: the one-hot 3x3 view (`local_view`), then the action.
    fn observe(&self, action: usize, obs: &mut [f32]) {
        obs.fill(0.0);
        let (y, x) = self.position;
        let (y0, x0) = (y.saturating_sub(1), x.saturating_sub(1));
        for dy in 0..3 {
            for dx in 0..3 {
                let (r, c) = (y0 + dy, x0 + dx);
                // The slice `grid[y-1 : y+2, x-1 : x+2]` clipped to the grid, padded with
                // walls at the end; at row/column 0 it starts at 0, so the view shifts.
                let inside = r <= y + 1 && c <= x + 1 && r < self.side && c < self.side;
                let cell = if inside {
                    self.grid[self.at((r, c))]
                } else {
                    OBSTACLE
                };
                obs[(dy * 3 + dx) * CELL_KINDS + usize::from(cell)] = 1.0;
            }
        }
        obs[9 * CELL_KINDS + action] = 1.0;
    }
}

impl Env for Labyrinth {
    // Observation the one-hot view and action, `Box([0; 50], [1; 50])` (popgym:
    // `MultiDiscrete([5; 10])`). Action `Discrete(4)`: left, right, up, down.
    super::popgym_env!(env => observation: Space::unit_box(OBS_DIM),
        action: Space::Discrete { n: 4 });

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        check_obs(self.id, obs, OBS_DIM);
        let mut py = PyRandom::seeded(seed);
        let mut np = LegacyRandomState::seeded(seed);
        self.generate(&mut py, &mut np);
        let (start, end) = self.entrances(&mut py);
        self.position = start;
        self.explored.fill(false);
        let s = self.at(start);
        self.grid[s] = START;
        self.explored[s] = true;
        self.curr_step = 0;
        self.visited = 1;
        match self.task {
            Task::Escape => {
                let e = self.at(end);
                self.grid[e] = GOAL;
            }
            Task::Explore => {
                let free = self.grid.iter().filter(|&&c| c == FREE).count();
                self.new_square_reward = 1.0 / free as f64;
            }
        }
        self.open = self.grid.iter().filter(|&&c| c != OBSTACLE).count();
        self.observe(NO_ACTION, obs);
    }

    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        check_obs(self.id, obs, OBS_DIM);
        let action = discrete_action(self.id, action, 4);
        self.position = self.target(action);
        let here = self.at(self.position);
        let new_square = !self.explored[here];
        if new_square {
            self.explored[here] = true;
            self.visited += 1;
        }
        self.curr_step += 1;
        let step_cost = -1.0 / EPISODE_LENGTH as f64;
        let (reward, terminated) = match self.task {
            Task::Escape if self.grid[here] == GOAL => (step_cost + 1.0, true),
            Task::Escape => (step_cost, false),
            Task::Explore => (
                if new_square {
                    self.new_square_reward
                } else {
                    step_cost
                },
                self.visited == self.open,
            ),
        };
        self.observe(action, obs);
        StepResult {
            reward,
            terminated,
            truncated: self.curr_step == EPISODE_LENGTH - 1,
        }
    }
}

//! Native MiniGrid memory rooms (`MiniGrid-MemoryS7-v0` ... `MiniGrid-MemoryS17Random-v0`),
//! step for step equal to the Python `minigrid` package (3.2) under recur's seed contract.
//!
//! `minigrid/envs/memory.py`'s `MemoryEnv`: the agent starts in a small room facing east,
//! beside a green key or ball; a hallway leads to a split whose two ends hold one key and one
//! ball. Stepping onto the cell beside the object that matches the start room's ends the
//! episode with `1 - 0.9 * step_count / max_steps`, the other one with 0; `max_steps` is
//! `5 * size²` (245 for S7, 605 for S11), after which the episode truncates (both flags can
//! be set on one step, as in the package). `pickup` acts as `toggle`, and neither does
//! anything to a key, a ball or a wall; `drop` and `done` do nothing either.
//!
//! * **Spaces.** What recur's gymnasium bridge makes of the package's observation with
//!   `run.env_keys = ["direction", "image"]` (the `mission` string cannot be fed to a policy):
//!   a `Dict` of `direction`, one-hot `Box([0; 4], [1; 4])`, and `image`, the agent's 7x7 view
//!   as `(object, colour, state)` codes, `Image [7, 7, 3]` (`u8`, the package's array order:
//!   view column, view row, code). Actions: `Discrete(7)`.
//! * **The view.** `gen_obs` as the package computes it: the 7x7 square ahead of the agent
//!   (cells outside the grid are walls), rotated so that the agent looks up from the bottom
//!   row's middle, cells hidden behind walls (`process_vis`) encoded as unseen `(0, 0, 0)`,
//!   the agent's own cell as empty `(1, 0, 0)`.
//! * **Randomness.** [`Env::reset`]`(seed)` reseeds as `env.reset(seed=seed)` does
//!   (`np_random = default_rng(seed)`, [`numpy_rng`](super::popgym::numpy_rng)), and the
//!   grid is generated with the package's draws in its order: the hallway's length (the
//!   `Random` ids only), the agent's start column, the start room's object, the split's order.
//! * **Episode ends.** The package registers these ids without a gymnasium `TimeLimit` (the
//!   environment truncates itself), and so does recur: the spec says `max_episode_steps: None`.
//!
//! `common/tests/minigrid_parity.rs` checks all of this against the installed package. The
//! ids define success as the bridged ids do ([`super::Success`]: a positive final reward).

use super::popgym::numpy_rng::Generator;
use super::popgym::popgym_env;
use super::{ActionRef, Env, Space, StepResult};

/// The native MiniGrid ids, in the package's spelling.
pub const MINIGRID_IDS: &[&str] = &[
    "MiniGrid-MemoryS7-v0",
    "MiniGrid-MemoryS9-v0",
    "MiniGrid-MemoryS11-v0",
    "MiniGrid-MemoryS13-v0",
    "MiniGrid-MemoryS13Random-v0",
    "MiniGrid-MemoryS17Random-v0",
];

/// The agent's view: `VIEW x VIEW` cells (MiniGrid's `agent_view_size`).
pub const VIEW: usize = 7;
/// Bytes of the `image` part: `VIEW * VIEW` cells of 3 codes.
const IMAGE_BYTES: usize = VIEW * VIEW * 3;
/// `DIR_TO_VEC`: east, south, west, north.
const DIR_TO_VEC: [(i64, i64); 4] = [(1, 0), (0, 1), (-1, 0), (0, -1)];

/// What a grid cell holds (every object of these rooms is green; walls are grey).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Cell {
    Empty,
    Wall,
    Key,
    Ball,
}

impl Cell {
    /// `(OBJECT_TO_IDX, COLOR_TO_IDX, state)` as `Grid.encode` writes a visible cell.
    fn encode(self) -> [u8; 3] {
        match self {
            Cell::Empty => [1, 0, 0],
            Cell::Wall => [2, 5, 0],
            Cell::Key => [5, 1, 0],
            Cell::Ball => [6, 1, 0],
        }
    }
}

/// `MemoryEnv(size, random_length)`; see the module documentation.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Memory {
    #[serde(skip)]
    id: &'static str,
    size: i64,
    random_length: bool,
    max_steps: u64,
    rng: Generator,
    /// `size * size` cells, `y * size + x`.
    grid: Vec<Cell>,
    agent: (i64, i64),
    /// 0 east, 1 south, 2 west, 3 north.
    dir: usize,
    success: (i64, i64),
    failure: (i64, i64),
    step_count: u64,
    /// The `image` part of the latest observation.
    image: Vec<u8>,
}

/// The environment `id` (one of [`MINIGRID_IDS`]), or `None`.
pub fn make(id: &str) -> Option<Box<dyn Env>> {
    let id: &'static str = MINIGRID_IDS.iter().copied().find(|k| *k == id)?;
    let name = id.strip_prefix("MiniGrid-MemoryS")?.strip_suffix("-v0")?;
    let (digits, random_length) = match name.strip_suffix("Random") {
        Some(d) => (d, true),
        None => (name, false),
    };
    let size = digits.parse().ok()?;
    Some(Box::new(Memory::new(id, size, random_length)))
}

impl Memory {
    fn new(id: &'static str, size: i64, random_length: bool) -> Self {
        assert!(size % 2 == 1 && size >= 7, "{id}: size {size}");
        Self {
            id,
            size,
            random_length,
            max_steps: 5 * (size * size) as u64,
            rng: Generator::from_seed(0),
            grid: vec![Cell::Empty; (size * size) as usize],
            agent: (1, size / 2),
            dir: 0,
            success: (0, 0),
            failure: (0, 0),
            step_count: 0,
            image: vec![0; IMAGE_BYTES],
        }
    }

    fn get(&self, x: i64, y: i64) -> Cell {
        self.grid[(y * self.size + x) as usize]
    }

    fn set(&mut self, x: i64, y: i64, cell: Cell) {
        self.grid[(y * self.size + x) as usize] = cell;
    }

    /// `MemoryEnv._gen_grid`, with the package's draws in its order.
    fn gen_grid(&mut self) {
        let (w, h) = (self.size, self.size);
        self.grid.fill(Cell::Empty);
        for i in 0..w {
            self.set(i, 0, Cell::Wall);
            self.set(i, h - 1, Cell::Wall);
        }
        for j in 0..h {
            self.set(0, j, Cell::Wall);
            self.set(w - 1, j, Cell::Wall);
        }
        let upper = h / 2 - 2;
        let lower = h / 2 + 2;
        let hallway_end = if self.random_length {
            self.rng.integers(4, w - 2)
        } else {
            w - 3
        };
        for i in 1..5 {
            self.set(i, upper, Cell::Wall);
            self.set(i, lower, Cell::Wall);
        }
        self.set(4, upper + 1, Cell::Wall);
        self.set(4, lower - 1, Cell::Wall);
        for i in 5..hallway_end {
            self.set(i, upper + 1, Cell::Wall);
            self.set(i, lower - 1, Cell::Wall);
        }
        for j in 0..h {
            if j != h / 2 {
                self.set(hallway_end, j, Cell::Wall);
            }
            self.set(hallway_end + 2, j, Cell::Wall);
        }
        self.agent = (self.rng.integers(1, hallway_end + 1), h / 2);
        self.dir = 0;
        let start = [Cell::Key, Cell::Ball][self.rng.integers(0, 2) as usize];
        self.set(1, h / 2 - 1, start);
        let others =
            [[Cell::Ball, Cell::Key], [Cell::Key, Cell::Ball]][self.rng.integers(0, 2) as usize];
        let pos0 = (hallway_end + 1, h / 2 - 2);
        let pos1 = (hallway_end + 1, h / 2 + 2);
        self.set(pos0.0, pos0.1, others[0]);
        self.set(pos1.0, pos1.1, others[1]);
        let (above, below) = ((pos0.0, pos0.1 + 1), (pos1.0, pos1.1 - 1));
        (self.success, self.failure) = if start == others[0] {
            (above, below)
        } else {
            (below, above)
        };
    }

    /// `gen_obs`: the view (`gen_obs_grid`: slice, rotate, `process_vis`) encoded into
    /// `self.image`.
    fn gen_obs(&mut self) {
        const V: i64 = VIEW as i64;
        let (ax, ay) = self.agent;
        let (top_x, top_y) = match self.dir {
            0 => (ax, ay - V / 2),
            1 => (ax - V / 2, ay),
            2 => (ax - V + 1, ay - V / 2),
            _ => (ax - V / 2, ay - V + 1),
        };
        // grid.slice: view cell (i, j) is world (top_x + i, top_y + j); outside is wall.
        let mut view = [[Cell::Wall; VIEW]; VIEW]; // view[i][j], i the column
        for (i, column) in view.iter_mut().enumerate() {
            for (j, cell) in column.iter_mut().enumerate() {
                let (x, y) = (top_x + i as i64, top_y + j as i64);
                if (0..self.size).contains(&x) && (0..self.size).contains(&y) {
                    *cell = self.get(x, y);
                }
            }
        }
        // rotate_left, dir + 1 times: new (j, V - 1 - i) = old (i, j).
        for _ in 0..=self.dir {
            let old = view;
            for (i, column) in old.iter().enumerate() {
                for (j, &cell) in column.iter().enumerate() {
                    view[j][VIEW - 1 - i] = cell;
                }
            }
        }
        // process_vis from the agent's cell (V / 2, V - 1): light spreads right, left and up,
        // never out of a wall.
        let mut mask = [[false; VIEW]; VIEW];
        mask[VIEW / 2][VIEW - 1] = true;
        for j in (0..VIEW).rev() {
            for i in 0..VIEW - 1 {
                if !mask[i][j] || view[i][j] == Cell::Wall {
                    continue;
                }
                mask[i + 1][j] = true;
                if j > 0 {
                    mask[i + 1][j - 1] = true;
                    mask[i][j - 1] = true;
                }
            }
            for i in (1..VIEW).rev() {
                if !mask[i][j] || view[i][j] == Cell::Wall {
                    continue;
                }
                mask[i - 1][j] = true;
                if j > 0 {
                    mask[i - 1][j - 1] = true;
                    mask[i][j - 1] = true;
                }
            }
        }
        // The agent's own cell shows what it carries: nothing in these rooms.
        view[VIEW / 2][VIEW - 1] = Cell::Empty;
        for i in 0..VIEW {
            for j in 0..VIEW {
                let code = if mask[i][j] {
                    view[i][j].encode()
                } else {
                    [0; 3]
                };
                let at = (i * VIEW + j) * 3;
                self.image[at..at + 3].copy_from_slice(&code);
            }
        }
    }

    /// The values lane: the one-hot direction.
    fn write_values(&self, obs: &mut [f32]) {
        super::popgym::check_obs(self.id, obs, 4);
        obs.fill(0.0);
        obs[self.dir] = 1.0;
    }
}

impl Env for Memory {
    // Observation `direction` one-hot (MiniGrid: `Discrete(4)`) and `image` `[7, 7, 3]`.
    // Action `Discrete(7)`: left, right, forward, pickup, drop, toggle, done.
    popgym_env!(env => observation: Space::Dict {
        parts: vec![
            ("direction".into(), Space::unit_box(4)),
            ("image".into(), Space::Image { shape: [VIEW, VIEW, 3] }),
        ],
    }, action: Space::Discrete { n: 7 });

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        self.rng = Generator::from_seed(seed);
        self.gen_grid();
        self.step_count = 0;
        self.gen_obs();
        self.write_values(obs);
    }

    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        let action = super::popgym::discrete_action(self.id, action, 7);
        self.step_count += 1;
        let (dx, dy) = DIR_TO_VEC[self.dir];
        let front = (self.agent.0 + dx, self.agent.1 + dy);
        match action {
            0 => self.dir = (self.dir + 3) % 4,
            1 => self.dir = (self.dir + 1) % 4,
            2 if self.get(front.0, front.1) == Cell::Empty => self.agent = front,
            // forward into an object or a wall; pickup (toggle here), drop, toggle, done:
            // nothing changes in these rooms.
            _ => {}
        }
        let truncated = self.step_count >= self.max_steps;
        let mut reward = 0.0;
        let mut terminated = false;
        if self.agent == self.success {
            reward = 1.0 - 0.9 * (self.step_count as f64 / self.max_steps as f64);
            terminated = true;
        }
        if self.agent == self.failure {
            reward = 0.0;
            terminated = true;
        }
        self.gen_obs();
        self.write_values(obs);
        StepResult {
            reward,
            terminated,
            truncated,
        }
    }

    fn pixels(&self, out: &mut [u8]) {
        out.copy_from_slice(&self.image);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(id: &str, seed: u64) -> (Box<dyn Env>, Vec<f32>, Vec<u8>) {
        let mut env = make(id).unwrap();
        let mut obs = vec![f32::NAN; 4];
        env.reset(seed, &mut obs);
        let mut px = vec![0; IMAGE_BYTES];
        env.pixels(&mut px);
        (env, obs, px)
    }

    /// The view's code at view column `i`, row `j`.
    fn code(px: &[u8], i: usize, j: usize) -> [u8; 3] {
        let at = (i * VIEW + j) * 3;
        [px[at], px[at + 1], px[at + 2]]
    }

    #[test]
    fn every_id_builds_with_the_bridged_spaces() {
        for &id in MINIGRID_IDS {
            let (env, obs, _) = start(id, 1);
            assert_eq!(env.id(), id);
            let space = env.observation_space();
            assert_eq!(space.dim(), 4);
            assert_eq!(space.pixels(), IMAGE_BYTES);
            assert!(space.contains_obs(&obs), "{id}: {obs:?}");
            assert_eq!(
                obs,
                [1.0, 0.0, 0.0, 0.0],
                "{id}: the agent starts facing east"
            );
        }
        assert!(make("MiniGrid-MemoryS8-v0").is_none());
        assert!(make("gymnasium:MiniGrid-MemoryS7-v0").is_none());
    }

    #[test]
    fn the_agent_sees_itself_empty_and_nothing_behind_walls() {
        for seed in 0..20 {
            let (_, _, px) = start("MiniGrid-MemoryS7-v0", seed);
            assert_eq!(code(&px, VIEW / 2, VIEW - 1), [1, 0, 0], "seed {seed}");
            // Facing east in the 3-wide start room, walls hide part of the square ahead.
            let unseen = (0..VIEW * VIEW)
                .filter(|&c| code(&px, c / VIEW, c % VIEW) == [0, 0, 0])
                .count();
            assert!(unseen > 0, "seed {seed}");
        }
    }

    #[test]
    fn walking_to_the_matching_object_pays_and_the_other_does_not() {
        // S7: four steps east reach the split (a wall stops the rest), then one turn (left:
        // north, right: south) and a step onto one end. One end pays 1 - 0.9 * 6 / 245, the
        // other 0; both terminate.
        let mut paid = [0usize; 2];
        for seed in 0..40 {
            for turn in [0i64, 1] {
                let (mut env, mut obs, _) = start("MiniGrid-MemoryS7-v0", seed);
                for a in [2, 2, 2, 2, turn] {
                    let r = env.step(ActionRef::Discrete(a), &mut obs);
                    assert!(
                        !r.terminated && !r.truncated && r.reward == 0.0,
                        "seed {seed}"
                    );
                }
                assert_eq!(obs[if turn == 0 { 3 } else { 1 }], 1.0);
                let r = env.step(ActionRef::Discrete(2), &mut obs);
                assert!(r.terminated && !r.truncated, "seed {seed}");
                if r.reward > 0.0 {
                    assert_eq!(r.reward, 1.0 - 0.9 * (6.0 / 245.0));
                    paid[turn as usize] += 1;
                }
            }
        }
        assert!(paid[0] > 5 && paid[1] > 5, "{paid:?}");
        assert_eq!(paid[0] + paid[1], 40, "exactly one side pays");
    }

    #[test]
    fn standing_still_truncates_at_max_steps() {
        let (mut env, mut obs, _) = start("MiniGrid-MemoryS11-v0", 3);
        for t in 1..=605 {
            let r = env.step(ActionRef::Discrete(6), &mut obs);
            assert_eq!(
                (r.reward, r.terminated, r.truncated),
                (0.0, false, t == 605)
            );
        }
    }

    #[test]
    fn a_saved_state_resumes_the_episode() {
        let (mut a, mut obs, _) = start("MiniGrid-MemoryS13Random-v0", 9);
        for a_t in [1, 2, 2, 0, 2] {
            a.step(ActionRef::Discrete(a_t), &mut obs);
        }
        let state = a.save_state().unwrap();
        let (mut b, mut obs_b, _) = start("MiniGrid-MemoryS13Random-v0", 1);
        b.load_state(&state).unwrap();
        let (mut pa, mut pb) = (vec![0; IMAGE_BYTES], vec![0; IMAGE_BYTES]);
        for a_t in [2, 2, 1, 2, 2, 2, 0, 0, 2] {
            let ra = a.step(ActionRef::Discrete(a_t), &mut obs);
            let rb = b.step(ActionRef::Discrete(a_t), &mut obs_b);
            assert_eq!(ra, rb);
            assert_eq!(obs, obs_b);
            a.pixels(&mut pa);
            b.pixels(&mut pb);
            assert_eq!(pa, pb);
        }
        let other = make("MiniGrid-MemoryS7-v0").unwrap().save_state().unwrap();
        assert!(b.load_state(&other).is_err());
    }
}

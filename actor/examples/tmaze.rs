//! Your own environment in Rust: a T-maze memory task registered next to the built-ins and
//! run by this crate's own actor binary (`actor::main_with`). Point a training config at it:
//!
//! ```toml
//! [run]
//! env = "TMaze-v0"
//! [collector]
//! actor_bin = "target/release/examples/tmaze"
//! ```
//!
//! The task (Bakker 2001, shortened): the first observation shows a cue, left `[1, 0, 0]` or
//! right `[0, 1, 0]`; then `CORRIDOR` steps of an empty corridor `[0, 0, 0]`; at the junction
//! `[0, 0, 1]` the action chosen there (0 = left, 1 = right) ends the episode with reward 1
//! when it matches the cue and 0 otherwise. Actions in the corridor do nothing. Without memory
//! the best mean return is 0.5; a recurrent policy reaches 1.

use actor::Registry;
use common::envs::{ActionRef, Env, Space, StepResult};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Empty corridor steps between the cue and the junction.
const CORRIDOR: u32 = 4;

/// The T-maze: a cue, a corridor, a junction.
struct TMaze {
    rng: StdRng,
    cue_right: bool,
    t: u32,
}

impl TMaze {
    fn new() -> Self {
        TMaze {
            rng: StdRng::seed_from_u64(0),
            cue_right: false,
            t: 0,
        }
    }

    fn observe(&self, obs: &mut [f32]) {
        obs.fill(0.0);
        if self.t == 0 {
            obs[usize::from(self.cue_right)] = 1.0;
        } else if self.t == CORRIDOR + 1 {
            obs[2] = 1.0;
        }
    }
}

impl Env for TMaze {
    fn id(&self) -> &str {
        "TMaze-v0"
    }

    fn observation_space(&self) -> Space {
        Space::Box {
            low: vec![0.0; 3],
            high: vec![1.0; 3],
        }
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: 2 }
    }

    fn reset(&mut self, seed: u64, obs: &mut [f32]) {
        self.rng = StdRng::seed_from_u64(seed);
        self.cue_right = self.rng.random::<bool>();
        self.t = 0;
        self.observe(obs);
    }

    fn step(&mut self, action: ActionRef<'_>, obs: &mut [f32]) -> StepResult {
        let ActionRef::Discrete(a) = action else {
            panic!("TMaze-v0 takes a discrete action, got {action:?}");
        };
        let at_junction = self.t == CORRIDOR + 1;
        self.t += 1;
        self.observe(obs);
        let correct = (a == 1) == self.cue_right;
        StepResult {
            reward: if at_junction && correct { 1.0 } else { 0.0 },
            terminated: at_junction,
            truncated: false,
        }
    }
}

fn main() -> anyhow::Result<()> {
    let mut registry = Registry::builtin();
    registry.register("TMaze-v0", Some(u64::from(CORRIDOR) + 2), TMaze::new)?;
    actor::main_with(registry)
}

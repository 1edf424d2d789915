//! [`EnvSpec`]: what is known of an environment without stepping it (id, spaces, time limit),
//! as the registry and the gymnasium bridge report it.

use serde::{Deserialize, Serialize};

use super::Space;

/// What the registry knows about an environment without stepping it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EnvSpec {
    /// The id the environment is made by.
    pub id: String,
    /// One observation (flat `f32`).
    pub observation_space: Space,
    /// One action.
    pub action_space: Space,
    /// The time limit (`truncated` on that step), if any.
    pub max_episode_steps: Option<u64>,
}

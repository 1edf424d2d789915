//! The policy a run trains: a config's `[policy]` section fitted to its environment (the
//! observation and action sizes come from the environment registry, or from the spaces the
//! actor binary describes), for training and replay configs alike.

use common::envs::EnvSpec;
use common::policy::{policy_config_for, policy_config_for_spec, PolicyConfig};

use super::PolicySection;

/// The policy a `[policy]` section describes, fitted to environment `env` (training and
/// replay configs alike).
pub fn fit_policy(env: &str, p: &PolicySection) -> anyhow::Result<PolicyConfig> {
    Ok(with_section(policy_config_for(env)?, p))
}

/// The policy a `[policy]` section describes, fitted to the spaces of `spec`.
///
/// # Errors
/// An environment whose observation has images: the policy's encoder reads the values lane
/// only so far, and training on images it cannot see would waste the run.
pub fn fit_policy_spec(spec: &EnvSpec, p: &PolicySection) -> anyhow::Result<PolicyConfig> {
    anyhow::ensure!(
        spec.observation_space.pixels() == 0,
        "run.env = {:?} observes images ({}): the learner cannot train a policy on them yet (the \
         policy's encoder reads only the observation's values, so the images would be ignored); \
         record it with `recur-actor --record` in the meantime",
        spec.id,
        spec.observation_space.describe()
    );
    Ok(with_section(policy_config_for_spec(spec), p))
}

/// `fitted` (sized to an environment) with everything else from the `[policy]` section.
fn with_section(fitted: PolicyConfig, p: &PolicySection) -> PolicyConfig {
    fitted
        .with_cell(p.cell)
        .with_hidden_size(p.hidden_size)
        .with_num_layers(p.num_layers)
        .with_encoder(p.encoder.clone())
        .with_backend(p.backend)
        .with_obs_norm(p.obs_norm)
        .with_obs_clip(p.obs_clip)
        .with_critic_core(p.critic_core)
}

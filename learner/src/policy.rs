//! The policy a run trains: a config's `[policy]` section fitted to its environment (the
//! observation and action sizes come from the environment registry).

use common::policy::policy_config_for;
use common::policy::PolicyConfig;

use crate::config::PolicySection;

/// The policy a `[policy]` section describes, fitted to environment `env` (training and
/// replay configs alike).
pub fn fit_policy(env: &str, p: &PolicySection) -> anyhow::Result<PolicyConfig> {
    Ok(policy_config_for(env)?
        .with_cell(p.cell)
        .with_hidden_size(p.hidden_size)
        .with_num_layers(p.num_layers)
        .with_encoder(p.encoder.clone())
        .with_backend(p.backend)
        .with_obs_norm(p.obs_norm)
        .with_obs_clip(p.obs_clip)
        .with_critic_core(p.critic_core))
}

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
/// An observation with images and no `policy.encoder.cnn`, or a cnn and no image, or a cnn
/// that does not fit the images (each names the key, the env and its spaces).
pub fn fit_policy_spec(spec: &EnvSpec, p: &PolicySection) -> anyhow::Result<PolicyConfig> {
    let fitted = with_section(policy_config_for_spec(spec), p);
    let cnn = p.encoder.cnn().ok().flatten();
    let images = spec.observation_space.images();
    if images.is_empty() && cnn.is_some() {
        anyhow::bail!(
            "policy.encoder.cnn is set, but run.env = {:?} observes no image ({}): drop \
             `cnn` from [policy.encoder]",
            spec.id,
            spec.observation_space.describe()
        );
    }
    if !images.is_empty() && cnn.is_none() {
        anyhow::bail!(
            "run.env = {:?} observes images ({}): set `policy.encoder.cnn`, a preset (\"nature\" \
             for 84x84 frames, \"minigrid\" for MiniGrid's 7x7 codes) or a table of layers \
             ([policy.encoder] cnn = \"minigrid\"; docs/images.md)",
            spec.id,
            spec.observation_space.describe()
        );
    }
    // Checks the layers against every image (a kernel larger than its input, ...).
    fitted
        .init::<common::backend::Cpu>(&common::backend::cpu_device())
        .map_err(|e| anyhow::anyhow!("run.env = {:?}: {e}", spec.id))?;
    Ok(fitted)
}

/// `fitted` (sized to an environment) with everything else from the `[policy]` section.
fn with_section(fitted: PolicyConfig, p: &PolicySection) -> PolicyConfig {
    fitted
        .with_cell(p.cell)
        .with_hidden_size(p.hidden_size)
        .with_num_layers(p.num_layers)
        .with_encoder(p.encoder.mlp().to_vec())
        .with_cnn(p.encoder.cnn().ok().flatten())
        .with_backend(p.backend)
        .with_obs_norm(p.obs_norm)
        .with_obs_clip(p.obs_clip)
        .with_critic_core(p.critic_core)
        .with_memory(p.memory)
        .with_forget_bias(p.forget_bias)
}

//! The policy a run trains: a config's `[policy]` section fitted to its environment (the
//! observation and action sizes come from the environment registry).

use std::path::Path;
use std::process::Command;

use anyhow::Context;
use common::envs::EnvSpec;
use common::policy::PolicyConfig;
use common::policy::{policy_config_for, policy_config_for_spec};

use crate::config::{PolicySection, RunSection};

/// The policy a `[policy]` section describes, fitted to environment `env` (training and
/// replay configs alike).
pub fn fit_policy(env: &str, p: &PolicySection) -> anyhow::Result<PolicyConfig> {
    Ok(with_section(policy_config_for(env)?, p))
}

/// The policy a `[policy]` section describes, fitted to the spaces of `spec`.
pub fn fit_policy_spec(spec: &EnvSpec, p: &PolicySection) -> PolicyConfig {
    with_section(policy_config_for_spec(spec), p)
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

/// The actor arguments that select `run.env`'s gymnasium imports and kwargs.
pub fn env_args(run: &RunSection) -> Vec<String> {
    let mut args = Vec::new();
    for m in &run.env_imports {
        args.push("--env-import".to_string());
        args.push(m.clone());
    }
    if let Some(kwargs) = &run.env_kwargs {
        args.push("--env-kwargs".to_string());
        args.push(serde_json::to_string(kwargs).expect("a TOML table is JSON"));
    }
    args
}

/// Asks the actor executable `program` for the spaces of `run.env`
/// (`program --describe-env ENV`): the run's policy is built for what the actors will run,
/// user-registered and gymnasium environments included.
pub fn describe_env(program: &Path, run: &RunSection) -> anyhow::Result<EnvSpec> {
    let output = Command::new(program)
        .arg("--describe-env")
        .arg(&run.env)
        .args(env_args(run))
        .output()
        .with_context(|| format!("starting {} --describe-env", program.display()))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(
        output.status.success(),
        "the actor {} cannot build environment {:?} ({}):\n{}",
        program.display(),
        run.env,
        output.status,
        stderr.trim_end()
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).with_context(|| {
        format!(
            "{} --describe-env {:?} printed {line:?}, expected the spaces as JSON",
            program.display(),
            run.env
        )
    })
}

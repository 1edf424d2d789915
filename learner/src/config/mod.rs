//! Training configuration: TOML files under `configs/`, validated on load. Unknown keys are
//! rejected and every error names the key and the value.
//!
//! - `schema`: the sections and their defaults ([`TrainConfig`], [`ReplayConfig`]);
//! - `validate`: the ranges and combinations every config is checked against;
//! - `environment`: which `run.env` ids a config may name;
//! - `resources`: the memory a config would plan, refused above the machine's RAM;
//! - `policy`: the `[policy]` section fitted to an environment ([`fit_policy`]);
//! - `overrides`: command-line values over the file's (`--set KEY=VALUE` and the dedicated
//!   flags), blamed on the flag that set them.

use std::path::Path;

mod encoder;
mod environment;
mod overrides;
mod policy;
mod resources;
mod schema;
mod validate;

pub use encoder::{CnnSection, CnnTable, EncoderSection, EncoderTable};
pub use overrides::{blame_flags, check_resume_overrides, Override};
pub use policy::{fit_policy, fit_policy_spec};
pub use schema::{
    Algo, AlgoConfig, BcSection, CollectorMode, CollectorSection, DqnSection, EvalSection,
    InitialState, NoveltyCounts, PolicySection, PpoSection, ReplayConfig, ReplaySection,
    RunSection, Schedule, SliceTraining, TrainConfig, UpdatePath,
};

/// A config that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config {path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("config {path}: {message}")]
    Parse { path: String, message: String },
    #[error("command-line flag {flag} {value}: `{key}` = {value} is invalid: {expected} (the flag overrides {path})")]
    Flag {
        path: String,
        flag: String,
        key: String,
        value: String,
        expected: String,
    },
    #[error("command-line --set {arg} (over {path}): {message}")]
    Set {
        path: String,
        arg: String,
        message: String,
    },
    #[error("config {path}: `{key}` = {value} is invalid: {expected}")]
    Invalid {
        path: String,
        key: String,
        value: String,
        expected: String,
    },
}

/// `load`, `parse` and `to_toml` of the config files, which check themselves (`validate`)
/// after parsing, with or without `--set` overrides.
macro_rules! config_file {
    ($($config:ty),*) => {$(
        impl $config {
            /// Reads and validates `path`.
            pub fn load(path: &Path) -> Result<Self, ConfigError> {
                Self::load_with(path, &[])
            }

            /// Reads `path`, applies `overrides` in order to its TOML and validates the result.
            pub fn load_with(path: &Path, overrides: &[Override]) -> Result<Self, ConfigError> {
                let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Io {
                    path: path.display().to_string(),
                    error,
                })?;
                Self::parse_with(&text, &path.display().to_string(), overrides)
            }

            /// Parses and validates TOML text (`origin` names it in errors).
            pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
                Self::parse_with(text, origin, &[])
            }

            /// Parses TOML text, applies `overrides` in order and validates the result; an
            /// error a value of an override causes names the override.
            pub fn parse_with(
                text: &str,
                origin: &str,
                overrides: &[Override],
            ) -> Result<Self, ConfigError> {
                let config: Self = overrides::merged(text, origin, overrides)?;
                overrides::blame_overrides(config.validate(origin), overrides)?;
                Ok(config)
            }

            /// The resolved config as TOML (written into the run directory).
            pub fn to_toml(&self) -> String {
                toml::to_string_pretty(self).expect("a config serialises")
            }
        }
    )*};
}
config_file!(TrainConfig, ReplayConfig);

#[cfg(test)]
mod preset_tests;
#[cfg(test)]
mod tests;

//! Command-line overrides of a config file's values, as Hydra and rl-zoo users expect:
//!
//! - `--set SECTION.KEY=VALUE` ([`Override`], repeatable) is applied to the file's TOML table
//!   before the config is deserialized and validated, so it is checked like the file: an
//!   unknown key, a value of the wrong type and a value out of range are errors naming the
//!   `--set` and the key. VALUE is read as a TOML value (`3e-4`, `true`, `"CartPole-v1"`,
//!   `[64, 64]`, `{ difficulty = 2 }`); a VALUE that is not valid TOML is taken as a string, so
//!   `--set run.env=CartPole-v1` needs no shell quoting (`--set run.env=true` is the boolean:
//!   quote it, `'"true"'`, for the string).
//! - The dedicated flags (`--frames`, `--seed`, ...) are set on the parsed config; an invalid
//!   value a flag set is blamed on the flag ([`blame_flags`]).
//!
//! ```
//! use learner::config::{Override, TrainConfig};
//!
//! let file = std::fs::read_to_string(concat!(
//!     env!("CARGO_MANIFEST_DIR"),
//!     "/../configs/cartpole.toml"
//! ))
//! .unwrap();
//! let set: Override = "ppo.lr=3e-4".parse().unwrap();
//! let config = TrainConfig::parse_with(&file, "cartpole.toml", &[set]).unwrap();
//! assert_eq!(config.ppo.unwrap().lr, 3e-4);
//!
//! let typo: Override = "ppo.lrr=1".parse().unwrap();
//! let err = TrainConfig::parse_with(&file, "cartpole.toml", &[typo]).unwrap_err();
//! assert!(err.to_string().contains("unknown key `ppo.lrr`"));
//! ```

use serde::de::DeserializeOwned;

use super::ConfigError;

/// One `--set KEY=VALUE`: a dotted key into the config's TOML and the value to put there.
#[derive(Clone, Debug, PartialEq)]
pub struct Override {
    /// The dotted key, e.g. `ppo.lr`.
    pub key: String,
    /// VALUE read as TOML (a string where it is not valid TOML).
    pub value: toml::Value,
    /// The argument as given (`ppo.lr=3e-4`), for errors.
    pub text: String,
}

impl std::str::FromStr for Override {
    type Err = String;

    fn from_str(arg: &str) -> Result<Self, String> {
        let Some((key, raw)) = arg.split_once('=') else {
            return Err(format!(
                "{arg:?}: expected SECTION.KEY=VALUE, e.g. ppo.lr=3e-4"
            ));
        };
        let key = key.trim();
        let name_ok = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        if !key.split('.').all(name_ok) {
            return Err(format!(
                "{arg:?}: the key {key:?} must be dotted names of letters, digits, `_` and `-` \
                 (SECTION.KEY, e.g. ppo.lr)"
            ));
        }
        Ok(Override {
            key: key.to_string(),
            value: toml_value(raw.trim()),
            text: arg.to_string(),
        })
    }
}

/// `raw` as one TOML value, or as a string where it is not one.
fn toml_value(raw: &str) -> toml::Value {
    match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(t) if t.len() == 1 => t.into_iter().next().expect("one value").1,
        _ => toml::Value::String(raw.to_string()),
    }
}

impl Override {
    /// Puts the value at the key in `table`, creating the tables on the way that are missing.
    pub fn apply(&self, table: &mut toml::Table, origin: &str) -> Result<(), ConfigError> {
        let mut segments: Vec<&str> = self.key.split('.').collect();
        let last = segments.pop().expect("split yields one segment at least");
        let mut at = table;
        for (i, segment) in segments.iter().enumerate() {
            let entry = at
                .entry(segment.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            at = match entry {
                toml::Value::Table(t) => t,
                other => {
                    let path = segments[..=i].join(".");
                    return Err(self.error(
                        origin,
                        format!("`{path}` is {}, not a table", other.type_str()),
                    ));
                }
            };
        }
        at.insert(last.to_string(), self.value.clone());
        Ok(())
    }

    fn error(&self, origin: &str, message: String) -> ConfigError {
        ConfigError::Set {
            path: origin.to_string(),
            arg: self.text.clone(),
            message,
        }
    }

    /// What deserializing failed on, once this override was applied.
    fn rejected(&self, origin: &str, e: &toml::de::Error) -> ConfigError {
        let message = e.message().trim().replace('\n', " ");
        if message.starts_with("unknown field") {
            // The unknown field is the key itself, or one inside a table given as the value.
            let key = match (&self.value, message.split('`').nth(1)) {
                (toml::Value::Table(_), Some(field)) => format!("{}.{field}", self.key),
                _ => self.key.clone(),
            };
            return self.error(origin, format!("unknown key `{key}`: {message}"));
        }
        self.error(
            origin,
            format!("`{}` = {}: {message}", self.key, self.value),
        )
    }

    /// Whether this override set `key` (or a table holding it, or a key inside it).
    fn sets(&self, key: &str) -> bool {
        let within = |outer: &str, inner: &str| {
            inner == outer
                || inner
                    .strip_prefix(outer)
                    .is_some_and(|rest| rest.starts_with('.'))
        };
        within(&self.key, key) || within(key, &self.key)
    }
}

/// The config in `text` (from `origin`) with `overrides` applied in order. An override that
/// makes a config which deserialized before fail is blamed for it; a file that does not
/// deserialize and is not mended by the overrides gets the file's own error.
pub(super) fn merged<T: DeserializeOwned>(
    text: &str,
    origin: &str,
    overrides: &[Override],
) -> Result<T, ConfigError> {
    let file_error = |e: toml::de::Error| ConfigError::Parse {
        path: origin.to_string(),
        // toml's caret diagram keeps its lines.
        message: e.to_string().trim_end().to_string(),
    };
    let mut table: toml::Table = toml::from_str(text).map_err(file_error)?;
    let mut deserialized = table.clone().try_into::<T>().is_ok();
    for o in overrides {
        o.apply(&mut table, origin)?;
        match table.clone().try_into::<T>() {
            Ok(_) => deserialized = true,
            Err(e) if deserialized => return Err(o.rejected(origin, &e)),
            Err(_) => {}
        }
    }
    // The file's own error, with its line and column.
    table.try_into::<T>().map_err(|e| {
        toml::from_str::<T>(text).err().map_or_else(
            || ConfigError::Parse {
                path: origin.to_string(),
                message: e.message().to_string(),
            },
            file_error,
        )
    })
}

/// What a resumed run keeps whatever `--set` says: what its checkpoint was built for.
const FIXED_ON_RESUME: [&str; 6] = [
    "run.env",
    "run.env_imports",
    "run.env_kwargs",
    "run.env_keys",
    "run.algo",
    "policy",
];

/// `--set` with `--resume`: an override of a key the checkpoint was built for (the
/// environment, the algorithm, the policy) is refused; the others change the run's config from
/// here on, each said in the log.
pub fn check_resume_overrides(overrides: &[Override], origin: &str) -> Result<(), ConfigError> {
    for o in overrides {
        if let Some(key) = FIXED_ON_RESUME.iter().find(|k| o.sets(k)) {
            let why = format!(
                "a resumed run keeps `{key}` (its checkpoint was built for it); start a new run \
                 to change it"
            );
            return Err(o.error(origin, why));
        }
        tracing::info!("--resume: --set {} changes {origin} from here on", o.text);
    }
    Ok(())
}

/// Validation after `--set`: an invalid value an override set is blamed on the override (the
/// last one that set it), not on the file.
pub(super) fn blame_overrides(
    result: Result<(), ConfigError>,
    overrides: &[Override],
) -> Result<(), ConfigError> {
    if let Err(ConfigError::Invalid {
        path,
        key,
        value,
        expected,
    }) = &result
    {
        if let Some(o) = overrides.iter().rev().find(|o| o.sets(key)) {
            return Err(o.error(path, format!("`{key}` = {value} is invalid: {expected}")));
        }
    }
    result
}

/// Validation after command-line overrides: `flags` maps each overriding flag to its key; an
/// invalid value a flag set is blamed on the flag, not on the file.
pub fn blame_flags(
    result: Result<(), ConfigError>,
    flags: &[(&str, &str)],
) -> Result<(), ConfigError> {
    if let Err(ConfigError::Invalid {
        path,
        key,
        value,
        expected,
    }) = &result
    {
        if let Some((flag, _)) = flags.iter().find(|(_, k)| k == key) {
            return Err(ConfigError::Flag {
                path: path.clone(),
                flag: flag.to_string(),
                key: key.clone(),
                value: value.clone(),
                expected: expected.clone(),
            });
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TrainConfig;

    fn set(arg: &str) -> Override {
        arg.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    const CARTPOLE: &str = include_str!("../../../configs/cartpole.toml");

    fn with(args: &[&str]) -> Result<TrainConfig, String> {
        let overrides: Vec<Override> = args.iter().map(|a| set(a)).collect();
        TrainConfig::parse_with(CARTPOLE, "cartpole.toml", &overrides).map_err(|e| e.to_string())
    }

    #[test]
    fn values_parse_as_toml_and_bare_words_as_strings() {
        let cases = [
            ("ppo.lr=3e-4", toml::Value::Float(3e-4)),
            ("run.seed=7", toml::Value::Integer(7)),
            ("run.stop_at_target=false", toml::Value::Boolean(false)),
            (
                "run.env=\"CartPole-v1\"",
                toml::Value::String("CartPole-v1".into()),
            ),
            (
                "run.env=CartPole-v1",
                toml::Value::String("CartPole-v1".into()),
            ),
            ("run.env='\"x\"'", toml::Value::String("\"x\"".into())),
            (
                "policy.encoder=[32, 16]",
                toml::Value::Array(vec![32.into(), 16.into()]),
            ),
            // Two keys smuggled in are one string, not two settings.
            (
                "run.env=1\nframes = 2",
                toml::Value::String("1\nframes = 2".into()),
            ),
            ("run.env=", toml::Value::String(String::new())),
        ];
        for (arg, value) in cases {
            assert_eq!(set(arg).value, value, "{arg}");
        }
        let o = set(" ppo.lr = 1e-3 ");
        assert_eq!(
            (o.key.as_str(), o.text.as_str()),
            ("ppo.lr", " ppo.lr = 1e-3 ")
        );
        let table = set("run.env_kwargs={ difficulty = 2 }").value;
        assert_eq!(table["difficulty"].as_integer(), Some(2));
        for bad in ["ppo.lr", "=1", "ppo..lr=1", "ppo.l r=1", ".lr=1"] {
            let err = bad.parse::<Override>().unwrap_err();
            assert!(
                err.contains(&format!("{bad:?}")) && err.contains("SECTION.KEY"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn overrides_apply_in_order_over_the_file_and_create_missing_tables() {
        let c = with(&[
            "ppo.lr=3e-4",
            "run.seed=1",
            "run.seed=2",
            "collector.mode=sync",
            "eval.every_frames=5000",
        ])
        .unwrap();
        let file = TrainConfig::parse(CARTPOLE, "cartpole.toml").unwrap();
        assert_eq!(c.ppo.as_ref().unwrap().lr, 3e-4);
        assert_ne!(file.ppo.as_ref().unwrap().lr, 3e-4);
        assert_eq!(c.run.seed, 2);
        assert_eq!(c.collector.mode, crate::config::CollectorMode::Sync);
        assert_eq!(c.eval.as_ref().unwrap().every_frames, 5000);
        // The effective config (what a run writes to its config.toml) holds the overrides.
        let written = TrainConfig::parse(&c.to_toml(), "config.toml").unwrap();
        assert_eq!(written, c);
        assert!(c.to_toml().contains("lr = 0.0003"), "{}", c.to_toml());
        // Nested keys in a free table.
        let gym = set("run.env=gymnasium:CartPole-v1");
        let kwargs = set("run.env_kwargs.max_episode_steps=50");
        let c = TrainConfig::parse_with(CARTPOLE, "x.toml", &[gym, kwargs]).unwrap();
        let kwargs = c.run.env_kwargs.unwrap();
        assert_eq!(kwargs["max_episode_steps"].as_integer(), Some(50));
    }

    #[test]
    fn replay_configs_take_overrides_too() {
        let bc = include_str!("../../../configs/replay/bc.toml");
        let c =
            crate::config::ReplayConfig::parse_with(bc, "bc.toml", &[set("bc.lr=1e-4")]).unwrap();
        assert_eq!(c.bc.unwrap().lr, 1e-4);
        let err = crate::config::ReplayConfig::parse_with(bc, "bc.toml", &[set("bc.lrr=1")])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("command-line --set bc.lrr=1 (over bc.toml): unknown key `bc.lrr`"),
            "{err}"
        );
    }

    #[test]
    fn bad_overrides_name_the_set_the_key_and_the_value() {
        let err = with(&["ppo.lrr=1"]).unwrap_err();
        assert!(
            err.starts_with(
                "command-line --set ppo.lrr=1 (over cartpole.toml): unknown key `ppo.lrr`"
            ),
            "{err}"
        );
        let err = with(&["runn.seed=1"]).unwrap_err();
        assert!(err.contains("unknown key `runn.seed`"), "{err}");
        let err = with(&["ppo={ lrr = 1 }"]).unwrap_err();
        assert!(err.contains("unknown key `ppo.lrr`"), "{err}");
        let err = with(&["ppo.lr=fast"]).unwrap_err();
        assert!(
            err.contains("--set ppo.lr=fast") && err.contains("`ppo.lr` = \"fast\""),
            "{err}"
        );
        let err = with(&["run.frames=-5"]).unwrap_err();
        assert!(err.contains("`run.frames` = -5"), "{err}");
        let err = with(&["run.env.id=1"]).unwrap_err();
        assert!(
            err.contains("--set run.env.id=1") && err.contains("`run.env` is string, not a table"),
            "{err}"
        );
        // Validation blames the override that set the value, even after a good override.
        let err = with(&["ppo.lr=1e-3", "ppo.gamma=1.5"]).unwrap_err();
        assert!(
            err.starts_with("command-line --set ppo.gamma=1.5 (over cartpole.toml)")
                && err.contains("`ppo.gamma` = 1.5 is invalid: in [0, 1]"),
            "{err}"
        );
        // A value the file has stays blamed on the file.
        let bad_file = CARTPOLE.replace("gamma = 0.99", "gamma = 1.5");
        let err = TrainConfig::parse_with(&bad_file, "x.toml", &[set("ppo.lr=1e-3")])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("config x.toml: `ppo.gamma` = 1.5"), "{err}");
        // A file that does not deserialize keeps its own error (with its line)...
        let typo = CARTPOLE.replace("[ppo]", "[ppo]\nepoch = 3");
        let err = TrainConfig::parse_with(&typo, "x.toml", &[set("ppo.lr=1e-3")])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("config x.toml: ") && err.contains("unknown field `epoch`"),
            "{err}"
        );
        // ... unless an override mends it.
        let no_frames = CARTPOLE.replace("frames = ", "# frames = ");
        assert!(TrainConfig::parse(&no_frames, "x.toml").is_err());
        let c = TrainConfig::parse_with(&no_frames, "x.toml", &[set("run.frames=1000")]).unwrap();
        assert_eq!(c.run.frames, 1000);
    }
}

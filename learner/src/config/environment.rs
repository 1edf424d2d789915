//! Which environments a config may name: `run.env` (a built-in id, `gymnasium:<id>`, or any id
//! a user's actor builds) and the gymnasium bridge's imports and kwargs.

use super::schema::{CollectorSection, RunSection};
use super::validate::Checker;
use super::ConfigError;

impl Checker<'_> {
    /// `run.env` (a built-in id, `gymnasium:<id>`, or any id when `collector.actor_bin` names
    /// the user's actor, which reports the spaces), `run.env_imports` and `run.env_kwargs`
    /// (gymnasium ids only), `collector.actor_bin`.
    pub(super) fn environment(
        &self,
        run: &RunSection,
        collector: &CollectorSection,
    ) -> Result<(), ConfigError> {
        use common::envs::{is_gymnasium, GYMNASIUM_PREFIX};
        let env = run.env.as_str();
        if collector.actor_bin.as_deref().map(str::trim) == Some("") {
            return self.fail(
                "collector.actor_bin",
                "\"\"",
                "a path to an actor executable",
            );
        }
        if is_gymnasium(env) {
            if env[GYMNASIUM_PREFIX.len()..].trim().is_empty() {
                return self.fail(
                    "run.env",
                    format!("{env:?}"),
                    "gymnasium:<id>, e.g. gymnasium:CartPole-v1",
                );
            }
        } else {
            if !run.env_imports.is_empty() {
                return self.fail(
                    "run.env_imports",
                    format!("{:?}", run.env_imports),
                    "imports only with a gymnasium:<id> env",
                );
            }
            if run.env_kwargs.is_some() {
                return self.fail(
                    "run.env_kwargs",
                    "a table",
                    "kwargs only with a gymnasium:<id> env",
                );
            }
            if let Some(keys) = &run.env_keys {
                return self.fail(
                    "run.env_keys",
                    format!("{keys:?}"),
                    "keys only with a gymnasium:<id> env",
                );
            }
            let known = common::envs::Registry::builtin();
            if collector.actor_bin.is_none() && !known.contains(env) {
                return self.fail(
                    "run.env",
                    format!("{env:?}"),
                    &format!(
                        "{}a registered id (`recur-actor --list-envs` lists them, each also with \
                         the +prev-action suffix), gymnasium:<id>, or an id registered by the \
                         actor named in collector.actor_bin",
                        common::envs::did_you_mean(env, &known.ids())
                            .map_or(String::new(), |m| format!("{m} Expected "))
                    ),
                );
            }
        }
        if let Some(m) = run
            .env_imports
            .iter()
            .find(|m| m.trim().is_empty() || m.contains(char::is_whitespace))
        {
            return self.fail("run.env_imports", format!("{m:?}"), "Python module names");
        }
        Ok(())
    }
}

//! Command-line overrides of a config file's values: an invalid value a flag set is blamed on
//! the flag ([`blame_flags`]).

use super::ConfigError;

/// Validation after command-line overrides: `flags` maps each overriding flag to its key; an
/// invalid value a flag set is blamed on the flag, not on the file.
pub fn blame_flags(
    result: Result<(), ConfigError>,
    flags: &[(&str, &str)],
) -> Result<(), ConfigError> {
    match result {
        Err(ConfigError::Invalid {
            path,
            key,
            value,
            expected,
        }) => match flags.iter().find(|(_, k)| *k == key) {
            Some((flag, _)) => Err(ConfigError::Flag {
                path,
                flag: flag.to_string(),
                key,
                value,
                expected,
            }),
            None => Err(ConfigError::Invalid {
                path,
                key,
                value,
                expected,
            }),
        },
        other => other,
    }
}

//! Segment names: the `recur-` prefix of every segment recur creates, the checks a name
//! passes before it is created or opened, and run-unique ids to build names from.

use std::time::SystemTime;

use super::ShmError;

/// Every segment recur creates is named `recur-...`; [`reclaim_stale`](super::reclaim_stale)
/// looks only at these.
pub const SEGMENT_PREFIX: &str = "recur-";
/// Longest segment name accepted (NAME_MAX is 255; leave room).
pub const MAX_NAME_LEN: usize = 200;

/// A run-unique id, `"<pid>-<nanoseconds since the epoch, hex>"`, safe in segment names.
pub fn unique_run_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos:x}", std::process::id())
}

pub(super) fn validate_name(name: &str, creating: bool) -> Result<(), ShmError> {
    let bad = |reason| {
        Err(ShmError::Name {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("longer than 200 bytes");
    }
    if name.starts_with('.') {
        return bad("starts with '.'");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return bad("only ASCII letters, digits, '-', '_' and '.' are allowed");
    }
    if creating && !name.starts_with(SEGMENT_PREFIX) {
        return bad("segments recur creates start with \"recur-\" (so reclaim_stale finds them)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(validate_name("recur-abc_1.x", true).is_ok());
        assert!(validate_name("other", false).is_ok());
        for (name, creating) in [
            ("", false),
            ("a/b", false),
            (".hidden", false),
            ("sp ace", false),
            ("other", true),
        ] {
            let err = validate_name(name, creating).unwrap_err();
            assert!(err.to_string().contains(&format!("{name:?}")), "{err}");
        }
        let long = format!("recur-{}", "x".repeat(MAX_NAME_LEN));
        assert!(validate_name(&long, true).is_err());
    }

    #[test]
    fn run_ids_are_valid_names_and_distinct() {
        let a = unique_run_id();
        std::thread::sleep(Duration::from_micros(10));
        let b = unique_run_id();
        assert_ne!(a, b);
        assert!(a.starts_with(&format!("{}-", std::process::id())));
        validate_name(&format!("{SEGMENT_PREFIX}{a}"), true).unwrap();
    }
}

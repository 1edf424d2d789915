//! Removing the segments a crashed run left behind ([`reclaim_stale`]): each `recur-*` file in
//! `/dev/shm` is judged by the owner its header names, read through the file (no mapping).

use std::fs::File;
use std::io::Read;
use std::time::Duration;

use super::header::{parse_owner, HEADER_LEN};
use super::{SEGMENT_PREFIX, SHM_DIR};

/// A `recur-*` file in [`SHM_DIR`] without a valid header is someone's segment being created
/// (microseconds) until it is this old; after that [`reclaim_stale`] treats it as debris.
pub const UNINITIALIZED_GRACE: Duration = Duration::from_secs(60);

/// Removes the segments named [`SEGMENT_PREFIX`]`*` in `/dev/shm` that a crashed run left
/// behind: those whose owner process is dead (or whose pid now belongs to a process that
/// started later), and files that never got a valid header and are older than
/// [`UNINITIALIZED_GRACE`]. Segments of live owners, and files this user cannot open, are left
/// alone. Returns the names removed, for the caller to log. Never fails: a segment that
/// cannot be judged or removed is skipped.
pub fn reclaim_stale() -> Vec<String> {
    let mut removed = Vec::new();
    let Ok(dir) = std::fs::read_dir(SHM_DIR) else {
        return removed;
    };
    for entry in dir.flatten() {
        let file_name = entry.file_name();
        let Some(name) = file_name.to_str() else {
            continue;
        };
        if !name.starts_with(SEGMENT_PREFIX) {
            continue;
        }
        let path = entry.path();
        if is_stale(&path) && std::fs::remove_file(&path).is_ok() {
            removed.push(name.to_string());
        }
    }
    removed.sort();
    removed
}

/// Reads the header through the file (no mapping needed) and judges it.
fn is_stale(path: &std::path::Path) -> bool {
    // Opening fails for other users' segments (mode 0600): never ours to judge.
    let Ok(mut file) = File::open(path) else {
        return false;
    };
    let Ok(meta) = file.metadata() else {
        return false;
    };
    if !meta.is_file() {
        return false;
    }
    let mut header = [0u8; HEADER_LEN];
    let owner = match file.read_exact(&mut header) {
        Ok(()) => parse_owner(&header),
        Err(_) => None,
    };
    match owner {
        Some(owner) => !owner.alive(),
        None => meta
            .modified()
            .ok()
            .and_then(|m| m.elapsed().ok())
            .is_some_and(|age| age > UNINITIALIZED_GRACE),
    }
}

//! Crash-safe writes: a new file written and fsynced ([`write_synced`]), a directory fsynced
//! ([`sync_dir`]), a file replaced atomically ([`write_atomic`]), and the `.tmp` / `.old`
//! paths beside a file or directory ([`sibling`]).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// `dir` with `.tmp` / `.old` appended to its last component.
pub(super) fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    dir.with_file_name(name)
}

/// Writes `bytes` to a new file `path` (mode 0600 whatever the umask) and fsyncs it; errors
/// name the path.
pub(super) fn write_synced(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("setting the mode of {}", path.display()))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {} ({} bytes)", path.display(), bytes.len()))
}

/// Fsyncs directory `dir` (so that the renames and creations in it are durable).
pub fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing directory {}", dir.display()))
}

pub(super) fn parent_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Writes `bytes` to `path` atomically: a temporary file beside it (mode 0600), fsynced,
/// renamed over `path`, the directory fsynced. A crash leaves the old file or the new one,
/// never a torn or empty one. Errors name the path.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = sibling(path, ".tmp");
    if let Err(e) = write_synced(&tmp, bytes) {
        // A failed write (a full disk) leaves no temporary file behind, and its space back.
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    sync_dir(parent_of(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::tests::temp;

    #[test]
    fn atomic_writes_replace_whole_files_and_name_the_path_on_a_full_disk() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp("atomic");
        let path = dir.join("config.toml");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert!(!dir.join("config.toml.tmp").exists());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // A full disk (the temporary file is /dev/full): the error names it, and the old
        // file is untouched.
        std::os::unix::fs::symlink("/dev/full", dir.join("config.toml.tmp")).unwrap();
        let err = format!("{:#}", write_atomic(&path, b"three").unwrap_err());
        assert!(
            err.contains("config.toml.tmp") && err.contains("No space left on device"),
            "{err}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

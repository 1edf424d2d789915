//! The run directory and the names a run gives its resources: the directory itself (created
//! with mode 0700, so only the run's user reaches the control socket inside it; an existing
//! directory is never chmod'ed, and one every user can write to is refused), its lock (`run.lock`,
//! an exclusive `flock` held for the run's life and released by the kernel when the process
//! dies, so two runs never share a directory), the control socket, and the
//! shared-memory segments (`recur-<run id>-weights`, `recur-<run id>-ring-<actor>-<incarnation>`,
//! unique per run), and the files every run writes there first and last (`config.toml`,
//! `summary.json`). Segments left by a crashed run are reclaimed before a new run creates its own.

use std::path::{Path, PathBuf};

use anyhow::Context;
use common::checkpoint::write_atomic;
use common::shm::unique_run_id;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::run::metrics::{plot_learning_curve, read_curve, Axes};

/// A run's directory, its lock and the run-unique id in its segment names.
pub struct RunDir {
    names: RunNames,
    /// Holds the exclusive lock on `run.lock` while the run lives.
    _lock: std::fs::File,
}

/// The names a run gives its resources (its directory, control socket, segments, token file),
/// without the lock: a transport keeps a copy while the run holds the [`RunDir`].
#[derive(Clone, Debug)]
pub struct RunNames {
    path: PathBuf,
    run_id: String,
}

/// The files that say a directory holds a run (a new run there would overwrite them).
const RUN_FILES: [&str; 5] = [
    "config.toml",
    "checkpoint",
    "checkpoint.old",
    "metrics.csv",
    "summary.json",
];

impl RunDir {
    /// Takes `path` for a run: creates it (parents too) with mode 0700 if it does not exist,
    /// else checks that it is ours and not world-writable (it is never chmod'ed); locks it; and,
    /// unless `resume`, refuses a directory that already holds a run. Draws a fresh run id.
    pub fn create(path: &Path, resume: bool) -> anyhow::Result<Self> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        match std::fs::metadata(path) {
            Ok(meta) => {
                anyhow::ensure!(
                    meta.is_dir(),
                    "run directory {} exists and is not a directory",
                    path.display()
                );
                let mode = meta.mode() & 0o7777;
                let me = nix::unistd::Uid::effective().as_raw();
                anyhow::ensure!(
                    meta.uid() == me && mode & 0o002 == 0,
                    "run directory {} {} (mode {mode:o}); recur does not change the mode of a \
                     directory it did not create: pass a new directory inside it (e.g. {}), \
                     which recur creates with mode 0700",
                    path.display(),
                    if meta.uid() != me {
                        format!("belongs to uid {}, not to this user ({me})", meta.uid())
                    } else {
                        "can be written by every user".to_string()
                    },
                    path.join("run").display()
                );
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(parent)
                        .with_context(|| format!("creating {}", parent.display()))?;
                }
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(path)
                    .with_context(|| format!("creating run directory {}", path.display()))?;
                // Ours: the umask cannot have widened it, but make 0700 exact.
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))?;
            }
            Err(e) => {
                return Err(e).with_context(|| format!("reading run directory {}", path.display()))
            }
        }
        let lock = lock(path)?;
        if !resume {
            let held: Vec<&str> = RUN_FILES
                .into_iter()
                .filter(|f| path.join(f).exists())
                .collect();
            anyhow::ensure!(
                held.is_empty(),
                "run directory {} already holds a run ({}): continue it with `--resume {}`, or \
                 start the new run in another --run-dir",
                path.display(),
                held.join(", "),
                path.display()
            );
        }
        Ok(RunDir {
            names: RunNames {
                path: path.to_path_buf(),
                run_id: unique_run_id(),
            },
            _lock: lock,
        })
    }

    /// The names of the run's resources.
    pub fn names(&self) -> &RunNames {
        &self.names
    }
}

impl RunNames {
    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The control plane's Unix socket.
    pub fn control_socket(&self) -> PathBuf {
        self.path.join("control.sock")
    }

    /// The shared-memory segment the weights are published in.
    pub fn weights_segment(&self) -> String {
        format!("recur-{}-weights", self.run_id)
    }

    /// The shared-memory ring of one actor incarnation.
    pub fn ring_segment(&self, actor_id: u32, incarnation: u32) -> String {
        format!("recur-{}-ring-{actor_id}-{incarnation}", self.run_id)
    }

    /// The run token remote actors present (`RUN_DIR/token`, mode 0600: 64 hex digits, then
    /// the `fingerprint` of the learner's TLS certificate when it serves TLS). The token of a
    /// token file the run directory already holds (a resumed run's, so that the actors' copies
    /// stay valid) is kept if the file is a regular file of this user, mode 0600, and valid;
    /// otherwise a fresh 256-bit token from the operating system replaces it. The file is
    /// rewritten (atomically) only when its content changes.
    pub fn token(
        &self,
        fingerprint: Option<common::tls::Fingerprint>,
    ) -> anyhow::Result<[u8; common::remote::TOKEN_BYTES]> {
        use common::remote::TokenFile;
        let path = self.path.join("token");
        let old = private_file(&path)
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .and_then(|text| TokenFile::parse(&text).ok());
        let token = match old {
            Some(old) => {
                tracing::info!("remote actors: keeping the run token in {}", path.display());
                if old.fingerprint == fingerprint {
                    return Ok(old.token);
                }
                old.token
            }
            None => common::remote::new_token()
                .map_err(|e| anyhow::anyhow!("drawing a run token from the OS: {e}"))?,
        };
        let file = TokenFile { token, fingerprint };
        write_atomic(&path, file.text().as_bytes())?;
        Ok(token)
    }

    /// The run's TLS certificate (self-signed, for [`common::tls::SERVER_NAME`]) and its
    /// PKCS#8 key, in `RUN_DIR/tls-cert.der` and `RUN_DIR/tls-key.der` (mode 0600). A pair
    /// the run directory already holds (a resumed run's: the fingerprint the actors' token
    /// files pin stays valid) is kept if both are regular files of this user, mode 0600, and
    /// make a valid TLS configuration; otherwise a new pair replaces them.
    pub fn tls_identity(&self) -> anyhow::Result<TlsIdentity> {
        let cert_path = self.path.join("tls-cert.der");
        let key_path = self.path.join("tls-key.der");
        if let (Some(cert_der), Some(key_der)) = (private_file(&cert_path), private_file(&key_path))
        {
            if common::tls::server_config(cert_der.clone(), key_der.clone()).is_ok() {
                tracing::info!(
                    "remote actors: keeping the TLS certificate in {}",
                    cert_path.display()
                );
                return Ok(TlsIdentity { cert_der, key_der });
            }
        }
        let made = rcgen::generate_simple_self_signed(vec![common::tls::SERVER_NAME.to_string()])
            .context("making the run's TLS certificate")?;
        let identity = TlsIdentity {
            cert_der: made.cert.der().to_vec(),
            key_der: made.signing_key.serialize_der(),
        };
        // The key first: a certificate is never kept without its key.
        write_atomic(&key_path, &identity.key_der)?;
        write_atomic(&cert_path, &identity.cert_der)?;
        Ok(identity)
    }
}

/// A run's TLS certificate and key (DER).
pub struct TlsIdentity {
    pub cert_der: Vec<u8>,
    /// PKCS#8.
    pub key_der: Vec<u8>,
}

/// The content of `path` if it is a regular file (not a link) of this user with mode 0600.
fn private_file(path: &Path) -> Option<Vec<u8>> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).ok()?;
    let me = nix::unistd::Uid::effective().as_raw();
    if !(meta.is_file() && meta.uid() == me && meta.mode() & 0o777 == 0o600) {
        return None;
    }
    std::fs::read(path).ok()
}

/// Takes the exclusive lock on `dir/run.lock` (and writes our pid into it, for the message a
/// second run gets).
fn lock(dir: &Path) -> anyhow::Result<std::fs::File> {
    use std::io::{Seek, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("run.lock");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            anyhow::bail!(
                "run directory {} is in use by another recur process (pid {}, holding {}): \
                 wait for it to end, or pass another --run-dir",
                dir.display(),
                holder.trim(),
                path.display()
            );
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
    file.set_len(0)?;
    file.rewind()?;
    writeln!(file, "{}", std::process::id())?;
    Ok(file)
}

/// Writes a run's outcome to `dir/summary.json` (atomically).
pub fn write_summary(dir: &Path, summary: &impl Serialize) -> anyhow::Result<()> {
    write_atomic(
        &dir.join("summary.json"),
        (serde_json::to_string_pretty(summary)? + "\n").as_bytes(),
    )
}

/// Draws `dir/learning_curve.png` from `dir/metrics.csv` and `dir/eval.csv` when there is one
/// (a missing font is logged, not an error).
pub fn plot_curve(dir: &Path, title: &str, axes: Axes, target: Option<f64>) -> anyhow::Result<()> {
    let curve = read_curve(&dir.join("metrics.csv"))?;
    let eval: Vec<(f64, f64)> = crate::eval::read_eval_rows(&dir.join("eval.csv"))
        .iter()
        .map(|r| (r.frames as f64, r.eval_return_mean))
        .collect();
    let out = dir.join("learning_curve.png");
    if let Some(note) = plot_learning_curve(&curve, &eval, title, axes, target, &out)? {
        tracing::warn!("{note}");
    }
    Ok(())
}

/// A progress bar of `len` (`count` renders its position), or a hidden one when `!show`.
pub fn progress_bar(show: bool, len: u64, count: &str) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let template = format!("{{elapsed_precise}} {{bar:30}} {count}  {{msg}}");
    let bar = ProgressBar::new(len);
    bar.set_style(ProgressStyle::with_template(&template).expect("a valid template"));
    bar
}

/// The default run directory of a new run, in the current directory:
/// `runs/<name>-<unix time>-s<seed>-<4 hex digits>`. The digits (from the clock's nanoseconds
/// and the pid) keep runs started in the same second apart, a seed sweep's included.
pub fn default_path(name: &str, seed: u64) -> PathBuf {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mixed = (now.subsec_nanos() ^ std::process::id().rotate_left(16)) as u64;
    let tag = (mixed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 48) as u16;
    PathBuf::from(format!("runs/{name}-{}-s{seed}-{tag:04x}", now.as_secs()))
}

/// Checks that `path` holds a run `--resume` can continue, before anything there is touched:
/// its `config.toml` is there ("not a run directory" otherwise), and a run whose
/// `summary.json` says it ended (not by a failed write) still has a checkpoint: resuming it
/// from update 0 would drop its `metrics.csv`.
pub fn check_resumable(path: &Path) -> anyhow::Result<()> {
    anyhow::ensure!(
        path.join("config.toml").is_file(),
        "--resume {}: not a run directory ({}); a new run takes --run-dir",
        path.display(),
        if path.is_dir() {
            "it holds no config.toml"
        } else {
            "no such directory"
        }
    );
    if ["checkpoint", "checkpoint.old"]
        .iter()
        .any(|c| path.join(c).exists())
    {
        return Ok(());
    }
    let summary: Option<serde_json::Value> = std::fs::read(path.join("summary.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    if let Some(s) = summary.filter(|s| s["failed"].is_null() && s["updates"].as_u64() > Some(0)) {
        anyhow::bail!(
            "--resume {}: the run ended ({} frames, {} updates in summary.json) but its \
             checkpoint/ and checkpoint.old/ are gone: there is nothing to continue from, and \
             starting over would drop its metrics.csv; start a new run with --run-dir",
            path.display(),
            s["frames"],
            s["updates"]
        );
    }
    Ok(())
}

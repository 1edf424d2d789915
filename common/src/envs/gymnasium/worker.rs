//! One Python worker of the gymnasium bridge: its process (`gym_worker.py` run with
//! `python -c`), the command/answer bytes on its pipes with timeouts, and what it answers.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::ops::Range;
use std::os::fd::AsFd;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use serde::Deserialize;

use super::options::GymnasiumOptions;
use crate::envs::EnvError;
use crate::shm::bridge::BridgeArrays;

/// The worker's source, run with `python -c`.
const WORKER_SOURCE: &str = include_str!("../gym_worker.py");

/// The worker's first answer.
#[derive(Deserialize)]
pub(super) struct Hello {
    pub(super) ok: bool,
    #[serde(default)]
    pub(super) kind: String,
    #[serde(default)]
    pub(super) error: String,
    pub(super) observation_space: Option<ObsDesc>,
    pub(super) action_space: Option<ActionDesc>,
    pub(super) max_episode_steps: Option<u64>,
}

/// An observation space as the worker reports it: the values lane's parts flattened to boxes,
/// images kept whole, a dict's parts by key.
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub(super) enum ObsDesc {
    Box { low: Vec<f32>, high: Vec<f32> },
    Image { shape: [usize; 3] },
    Dict { parts: Vec<(String, ObsDesc)> },
}

impl ObsDesc {
    pub(super) fn space(self) -> super::Space {
        use super::Space;
        match self {
            ObsDesc::Box { low, high } => Space::Box { low, high },
            ObsDesc::Image { shape } => Space::Image { shape },
            ObsDesc::Dict { parts } => Space::Dict {
                parts: parts.into_iter().map(|(k, d)| (k, d.space())).collect(),
            },
        }
    }
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub(super) enum ActionDesc {
    Discrete { n: usize },
    Box { low: Vec<f32>, high: Vec<f32> },
    Multidiscrete { nvec: Vec<usize> },
}

/// One Python worker: its process, pipes, arrays and the environments it steps.
pub(super) struct Worker {
    pub(super) child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    pub(super) arrays: Option<BridgeArrays>,
    /// The environments it steps (a contiguous range of the vector's).
    pub(super) envs: Range<usize>,
    /// The (vector) ranges of the step commands sent and not yet answered, oldest first.
    pub(super) outstanding: VecDeque<Range<usize>>,
}

impl Worker {
    /// Starts a worker for `num_envs` environments of `gym_id`.
    pub(super) fn spawn(
        id: &str,
        gym_id: &str,
        options: &GymnasiumOptions,
        envs: Range<usize>,
    ) -> Result<Self, EnvError> {
        let config = serde_json::json!({
            "id": gym_id,
            "imports": options.imports,
            "kwargs": options.kwargs.clone().unwrap_or(serde_json::json!({})),
            "keys": options.keys,
            "num_envs": envs.len(),
            "spin_us": options.worker_spin.as_micros() as u64,
        });
        let mut child = Command::new(&options.python)
            .arg("-c")
            .arg(WORKER_SOURCE)
            .arg(config.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| EnvError::PythonMissing {
                id: id.to_string(),
                python: options.python.clone(),
                error: e.to_string(),
            })?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        Ok(Worker {
            child,
            stdin,
            stdout,
            arrays: None,
            envs,
            outstanding: VecDeque::new(),
        })
    }

    pub(super) fn arrays(&self) -> &BridgeArrays {
        self.arrays
            .as_ref()
            .expect("arrays exist after the handshake")
    }

    pub(super) fn arrays_mut(&mut self) -> &mut BridgeArrays {
        self.arrays
            .as_mut()
            .expect("arrays exist after the handshake")
    }

    pub(super) fn send(&mut self, id: &str, bytes: &[u8], what: What) -> Result<(), EnvError> {
        self.stdin
            .write_all(bytes)
            .and_then(|_| self.stdin.flush())
            .map_err(|_| self.dead(id, what))
    }

    /// Waits for the answer to the command sent last.
    pub(super) fn answer(
        &mut self,
        id: &str,
        what: What,
        timeout: Duration,
        spin: Duration,
    ) -> Result<(), EnvError> {
        let mut answer = [0u8; 1];
        read_exact_timeout(&mut self.stdout, &mut answer, timeout, spin)
            .map_err(|e| self.failure(id, e, what, timeout))?;
        match answer[0] {
            b'K' => Ok(()),
            b'E' => {
                let line = self.read_line(id, what, timeout)?;
                let text = serde_json::from_slice::<Hello>(&line)
                    .map(|h| h.error)
                    .unwrap_or_else(|_| String::from_utf8_lossy(&line).into_owned());
                Err(EnvError::Gymnasium {
                    id: id.to_string(),
                    message: format!("{what} raised in the worker:\n{}", text.trim_end()),
                })
            }
            other => Err(EnvError::Gymnasium {
                id: id.to_string(),
                message: format!("{what}: the worker answered {other:#x}, expected K or E"),
            }),
        }
    }

    pub(super) fn read_line(
        &mut self,
        id: &str,
        what: What,
        timeout: Duration,
    ) -> Result<Vec<u8>, EnvError> {
        read_line(&mut self.stdout, timeout).map_err(|e| self.failure(id, e, what, timeout))
    }

    fn failure(&mut self, id: &str, e: ReadError, what: What, timeout: Duration) -> EnvError {
        match e {
            ReadError::Eof => self.dead(id, what),
            ReadError::Timeout => {
                self.kill();
                EnvError::WorkerFailed {
                    id: id.to_string(),
                    message: format!(
                        "the Python worker (pid {}) did not answer {what} within {:.1} s \
                         ({}); it was killed",
                        self.child.id(),
                        timeout.as_secs_f64(),
                        match what {
                            What::Starting => "RECUR_GYM_START_TIMEOUT_S",
                            _ => "RECUR_GYM_TIMEOUT_S",
                        }
                    ),
                }
            }
            ReadError::Io(e) => EnvError::WorkerFailed {
                id: id.to_string(),
                message: format!("reading the worker's answer to {what}: {e}"),
            },
        }
    }

    fn dead(&mut self, id: &str, what: What) -> EnvError {
        let status = wait_briefly(&mut self.child);
        EnvError::WorkerFailed {
            id: id.to_string(),
            message: format!(
                "the Python worker (pid {}) exited during {what} ({status}); its stderr is above",
                self.child.id()
            ),
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    /// Asks the worker to quit, then makes sure it is gone (no orphans).
    fn drop(&mut self) {
        let _ = self.stdin.write_all(b"Q");
        let _ = self.stdin.flush();
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(20));
            if !matches!(self.child.try_wait(), Ok(Some(_))) {
                self.kill();
            }
        }
    }
}

/// What a command was, for error messages (formatted only when one fails).
#[derive(Clone, Copy, Debug)]
pub(super) enum What {
    Starting,
    Handshake,
    Reset,
    /// Vector step `n` (counting from 1).
    Step(u64),
}

impl std::fmt::Display for What {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            What::Starting => f.write_str("starting"),
            What::Handshake => f.write_str("handshake"),
            What::Reset => f.write_str("reset"),
            What::Step(n) => write!(f, "step {n}"),
        }
    }
}

#[derive(Debug)]
enum ReadError {
    Eof,
    Timeout,
    Io(std::io::Error),
}

/// Fills `buf` from `r`, waiting at most `timeout` in total, the first `spin` of it without
/// sleeping.
fn read_exact_timeout(
    r: &mut ChildStdout,
    buf: &mut [u8],
    timeout: Duration,
    spin: Duration,
) -> Result<(), ReadError> {
    let start = Instant::now();
    let deadline = start + timeout;
    let spin_until = start + spin.min(timeout);
    let mut filled = 0;
    while filled < buf.len() {
        while !readable_now(r)? && Instant::now() < spin_until {
            std::thread::yield_now();
        }
        wait_readable(r, deadline)?;
        match r.read(&mut buf[filled..]) {
            Ok(0) => return Err(ReadError::Eof),
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
    Ok(())
}

/// Reads one `\n`-terminated line (without it), byte by byte so nothing after it is consumed.
fn read_line(r: &mut ChildStdout, timeout: Duration) -> Result<Vec<u8>, ReadError> {
    let deadline = Instant::now() + timeout;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        wait_readable(r, deadline)?;
        match r.read(&mut byte) {
            Ok(0) => return Err(ReadError::Eof),
            Ok(_) if byte[0] == b'\n' => return Ok(line),
            Ok(_) => line.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
}

/// Whether `r` has bytes (or its writer is gone) now, without waiting.
fn readable_now(r: &ChildStdout) -> Result<bool, ReadError> {
    let mut fds = [PollFd::new(r.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(n) => Ok(n > 0),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(ReadError::Io(e.into())),
    }
}

/// Waits until `r` has bytes (or its writer is gone), at most until `deadline`.
fn wait_readable(r: &ChildStdout, deadline: Instant) -> Result<(), ReadError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        let mut fds = [PollFd::new(r.as_fd(), PollFlags::POLLIN)];
        match poll(
            &mut fds,
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(0) => return Err(ReadError::Timeout),
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(ReadError::Io(e.into())),
        }
    }
}

/// The worker's exit status, waiting up to a second for it.
fn wait_briefly(child: &mut Child) -> String {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.to_string(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => return "still running".into(),
            Err(e) => return format!("status unknown: {e}"),
        }
    }
}

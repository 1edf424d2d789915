//! The learner's side of the control plane: a tokio runtime on its own thread serving the run's
//! Unix socket (mode 0600 in the run directory). Registrations are handed to the learner's
//! main loop (which owns the shared-memory segments) and answered with its reply; heartbeats,
//! stats and shutdown requests are answered here (signals are [`crate::run::signals`]'s).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::control::{
    decode_frame, encode_frame, frame_len, FrameError, LearnerStats, Register, Request, Response,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;

use crate::actors::lock;

/// A registration waiting for the main loop's answer.
pub struct Registration {
    pub request: Register,
    pub reply: oneshot::Sender<Response>,
}

/// State shared between the main loop and the server.
#[derive(Default)]
pub struct Shared {
    /// The run is ending: heartbeats answer `shutdown = true`.
    pub shutdown: AtomicBool,
    /// A `Shutdown` request asked the learner to stop.
    pub stop_requested: AtomicBool,
    pub stats: Mutex<LearnerStats>,
    /// Last heartbeat per (actor, incarnation).
    pub heartbeats: Mutex<HashMap<(u32, u32), Instant>>,
}

/// The running server; dropping it stops the runtime and removes the socket file.
pub struct ControlServer {
    pub shared: Arc<Shared>,
    pub registrations: crossbeam_channel::Receiver<Registration>,
    path: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ControlServer {
    /// Binds `path` (mode 0600) and starts serving.
    pub fn start(path: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::remove_file(path);
        let std_listener = std::os::unix::net::UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        std_listener.set_nonblocking(true)?;
        let shared = Arc::new(Shared::default());
        let (tx, rx) = crossbeam_channel::unbounded();
        let (stop_tx, stop_rx) = oneshot::channel();
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("control".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a tokio runtime");
                runtime.block_on(serve(std_listener, thread_shared, tx, stop_rx));
            })?;
        Ok(ControlServer {
            shared,
            registrations: rx,
            path: path.to_path_buf(),
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

async fn serve(
    listener: std::os::unix::net::UnixListener,
    shared: Arc<Shared>,
    registrations: crossbeam_channel::Sender<Registration>,
    mut stop: oneshot::Receiver<()>,
) {
    let listener = UnixListener::from_std(listener).expect("a non-blocking listener");
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let (shared, registrations) = (Arc::clone(&shared), registrations.clone());
                    tokio::spawn(async move {
                        if let Err(e) = connection(stream, shared, registrations).await {
                            tracing::debug!("control connection closed: {e}");
                        }
                    });
                }
                Err(e) => tracing::warn!("control socket accept failed: {e}"),
            },
        }
    }
}

async fn connection(
    mut stream: UnixStream,
    shared: Arc<Shared>,
    registrations: crossbeam_channel::Sender<Registration>,
) -> Result<(), FrameError> {
    loop {
        let mut prefix = [0u8; 4];
        stream.read_exact(&mut prefix).await?;
        let mut rest = vec![0u8; frame_len(prefix)?];
        stream.read_exact(&mut rest).await?;
        let response = match decode_frame::<Request>(&rest) {
            Err(e) => Response::Refused {
                reason: e.to_string(),
            },
            Ok(Request::Register(request)) => {
                let (reply, answered) = oneshot::channel();
                let reg = Registration { request, reply };
                let answer = match registrations.send(reg) {
                    Ok(()) => answered.await.ok(),
                    Err(_) => None,
                };
                answer.unwrap_or(Response::Refused {
                    reason: "the learner is shutting down".into(),
                })
            }
            Ok(Request::Heartbeat {
                actor_id,
                incarnation,
                ..
            }) => {
                lock(&shared.heartbeats).insert((actor_id, incarnation), Instant::now());
                Response::Ack {
                    shutdown: shared.shutdown.load(Ordering::SeqCst),
                }
            }
            Ok(Request::Stats) => Response::Stats(lock(&shared.stats).clone()),
            Ok(Request::Shutdown) => {
                shared.stop_requested.store(true, Ordering::SeqCst);
                Response::Ack { shutdown: true }
            }
        };
        let frame = encode_frame(&response)?;
        stream.write_all(&frame).await?;
    }
}

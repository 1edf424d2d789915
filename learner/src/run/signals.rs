//! SIGINT and SIGTERM: the first ends the run cleanly (the run loop sees [`StopFlag::raised`],
//! writes its final checkpoint and summary, stops its actors), a second one ends the process at
//! once (exit code 130, its last line saying how to continue: [`set_exit_hint`]; segments it leaves are reclaimed by the next run, its actors exit when
//! they notice the learner is gone).
//!
//! The handlers are installed once per process, on their own thread, by the first
//! [`install`] — the first thing a run does, so that a signal during setup (before the control
//! socket or the actors exist) is already a clean stop and not the default death.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Set by the first SIGINT/SIGTERM; shared by every caller of [`install`].
#[derive(Clone, Debug)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    /// A stop was asked for by a signal.
    pub fn raised(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

static FLAG: Mutex<Option<StopFlag>> = Mutex::new(None);
static EXIT_HINT: Mutex<String> = Mutex::new(String::new());

/// Whether a signal asked this process's run to stop (a run it ended exits 130).
pub fn raised() -> bool {
    let flag = FLAG.lock().unwrap_or_else(|e| e.into_inner());
    flag.as_ref().is_some_and(StopFlag::raised)
}

/// What the exit on a second signal adds to its line (how to continue the run).
pub fn set_exit_hint(hint: String) {
    *EXIT_HINT.lock().unwrap_or_else(|e| e.into_inner()) = hint;
}

/// Installs the SIGINT/SIGTERM handlers (once per process) and returns the flag they set.
pub fn install() -> anyhow::Result<StopFlag> {
    let mut installed = FLAG.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(flag) = installed.as_ref() {
        return Ok(flag.clone());
    }
    let flag = StopFlag(Arc::new(AtomicBool::new(false)));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let raised = Arc::clone(&flag.0);
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.to_string()));
                    return;
                }
            };
            runtime.block_on(async move {
                use tokio::signal::unix::{signal, SignalKind};
                let (mut int, mut term) =
                    match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
                        (Ok(i), Ok(t)) => (i, t),
                        (Err(e), _) | (_, Err(e)) => {
                            let _ = ready_tx.send(Err(e.to_string()));
                            return;
                        }
                    };
                let _ = ready_tx.send(Ok(()));
                loop {
                    let name = tokio::select! {
                        _ = int.recv() => "SIGINT",
                        _ = term.recv() => "SIGTERM",
                    };
                    if raised.swap(true, Ordering::SeqCst) {
                        let hint = EXIT_HINT.lock().unwrap_or_else(|e| e.into_inner()).clone();
                        tracing::error!(
                            "{name} again: exiting now, without a final checkpoint{}{hint}",
                            if hint.is_empty() { "" } else { "; " }
                        );
                        std::process::exit(130);
                    }
                    tracing::warn!(
                        "{name}: ending the run (final checkpoint and summary; a second signal exits at once)"
                    );
                }
            });
        })?;
    ready_rx
        .recv()
        .map_err(|_| anyhow::anyhow!("the signal thread did not start"))?
        .map_err(|e| anyhow::anyhow!("installing SIGINT/SIGTERM handlers: {e}"))?;
    *installed = Some(flag.clone());
    Ok(flag)
}

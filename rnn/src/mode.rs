//! The thread-local recurrent mode switch.
//!
//! ```
//! use recur_rnn::{current_recurrent_mode, set_recurrent_mode, RecurrentMode};
//!
//! assert_eq!(current_recurrent_mode(), None); // modules use their `default_recurrent_mode`
//! {
//!     let _guard = set_recurrent_mode(RecurrentMode::Recurrent);
//!     assert_eq!(current_recurrent_mode(), Some(RecurrentMode::Recurrent));
//!     {
//!         let _inner = set_recurrent_mode(false); // `false` = sequential, as in TorchRL
//!         assert_eq!(current_recurrent_mode(), Some(RecurrentMode::Sequential));
//!     }
//!     assert_eq!(current_recurrent_mode(), Some(RecurrentMode::Recurrent));
//! }
//! assert_eq!(current_recurrent_mode(), None);
//! ```
//!
//! The mode is the only global state in recur, and it is per thread: an actor thread that
//! steps environments is never switched by a learner thread computing losses. Actor
//! processes never set it; learner code sets it around recurrent-mode calls.

use std::cell::Cell;
use std::marker::PhantomData;

use serde::{Deserialize, Serialize};

/// How a recurrent module interprets its leading axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RecurrentMode {
    /// One step per call: every row is a different environment; the incoming state is read
    /// from the input and zeroed where `is_init` is true. Used by actors.
    #[default]
    Sequential,
    /// A whole time axis per call: at every `is_init` the state is replaced by the state
    /// stored at that position. Used by the learner.
    Recurrent,
}

impl From<bool> for RecurrentMode {
    /// `true` is recurrent mode, `false` sequential mode (TorchRL's `set_recurrent_mode(True)`).
    fn from(recurrent: bool) -> Self {
        if recurrent {
            RecurrentMode::Recurrent
        } else {
            RecurrentMode::Sequential
        }
    }
}

thread_local! {
    static MODE: Cell<Option<RecurrentMode>> = const { Cell::new(None) };
}

/// The mode set on this thread by [`set_recurrent_mode`], or `None` when no guard is alive
/// (modules then use their `default_recurrent_mode`).
pub fn current_recurrent_mode() -> Option<RecurrentMode> {
    MODE.with(Cell::get)
}

/// Sets this thread's recurrent mode until the returned guard is dropped; the previous mode is
/// restored then. Guards nest. Other threads are not affected.
#[must_use = "the mode is reset as soon as the guard is dropped"]
pub fn set_recurrent_mode(mode: impl Into<RecurrentMode>) -> RecurrentModeGuard {
    let previous = MODE.with(|m| m.replace(Some(mode.into())));
    RecurrentModeGuard {
        previous,
        _not_send: PhantomData,
    }
}

/// Restores the previous thread-local mode when dropped. Not `Send`: it belongs to the thread
/// whose mode it changed.
#[derive(Debug)]
pub struct RecurrentModeGuard {
    previous: Option<RecurrentMode>,
    _not_send: PhantomData<*const ()>,
}

impl Drop for RecurrentModeGuard {
    fn drop(&mut self) {
        MODE.with(|m| m.set(self.previous));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    #[test]
    fn guards_nest_and_restore() {
        assert_eq!(current_recurrent_mode(), None);
        let outer = set_recurrent_mode(true);
        let inner = set_recurrent_mode(RecurrentMode::Sequential);
        assert_eq!(current_recurrent_mode(), Some(RecurrentMode::Sequential));
        drop(inner);
        assert_eq!(current_recurrent_mode(), Some(RecurrentMode::Recurrent));
        drop(outer);
        assert_eq!(current_recurrent_mode(), None);
    }

    #[test]
    fn one_threads_mode_never_changes_anothers() {
        // Both threads hold their guards at the same time (the barriers make the overlap
        // certain) and each must keep seeing its own mode.
        let barrier = Arc::new(Barrier::new(2));
        let spawn = |mode: RecurrentMode| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let _guard = set_recurrent_mode(mode);
                barrier.wait();
                let seen_while_other_set = current_recurrent_mode();
                barrier.wait();
                seen_while_other_set
            })
        };
        let a = spawn(RecurrentMode::Recurrent);
        let b = spawn(RecurrentMode::Sequential);
        assert_eq!(a.join().unwrap(), Some(RecurrentMode::Recurrent));
        assert_eq!(b.join().unwrap(), Some(RecurrentMode::Sequential));
        // And neither leaked into this thread.
        assert_eq!(current_recurrent_mode(), None);
    }
}

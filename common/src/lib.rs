//! Code shared by recur's actor and learner processes.
//!
//! - [`recurrent`]: LSTM/GRU modules with sequential and recurrent modes, `is_init` resets,
//!   the thread-local [`recurrent::set_recurrent_mode`] switch, the `pad` and `scan` backends
//!   and the [`recurrent::Primer`] that describes the recurrent-state entries.
//! - [`backend`]: the CPU tensor backends recur runs on.
//! - [`reference`]: where the reference data (`RECUR_REFERENCE_DIR`) lives.

pub mod backend;
pub mod recurrent;
pub mod reference;

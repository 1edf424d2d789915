//! Code shared by recur's actor and learner processes.
//!
//! - [`recurrent`]: LSTM/GRU modules with sequential and recurrent modes, `is_init` resets,
//!   the thread-local [`recurrent::set_recurrent_mode`] switch, the `pad` and `scan` backends
//!   and the [`recurrent::Primer`] that describes the recurrent-state entries.
//! - [`backend`]: the CPU tensor backends recur runs on.
//! - [`envs`]: the built-in environments (CartPole, MaskedCartPole, Pendulum, RepeatPrevious),
//!   the `TimeLimit` wrapper and the auto-resetting `VecEnv` the actor steps.
//! - [`chunk`]: the trajectory chunk (schema, columns, encoding) that crosses processes.
//! - [`dataset`]: recorded datasets of chunks (append-only, crash-safe prefix).
//! - [`policy`]: the policy network (encoder -> recurrent core -> heads) and its distributions.
//! - [`reference`]: where the reference data (`RECUR_REFERENCE_DIR`) lives.

pub mod backend;
pub mod chunk;
pub mod dataset;
pub mod envs;
pub mod policy;
pub mod recurrent;
pub mod reference;

//! Code shared by recur's actor and learner processes.
//!
//! The recurrent modules (LSTM, GRU and minGRU with sequential and recurrent modes, `is_init`
//! resets, the thread-local `set_recurrent_mode` switch, the `pad`, `scan` and `fused` backends
//! and the `Primer`) are their own crate, `recur_rnn` (`rnn/`), which this crate builds on.
//!
//! - [`backend`]: the tensor backends recur runs on (recur-rnn's, re-exported: CPU; CUDA for the
//!   learner in a build with the `cuda` feature) and the learner's training device.
//! - [`envs`]: the built-in environments (CartPole, Pendulum and their masked variants,
//!   RepeatPrevious, the POPGym ids natively), the gymnasium bridge, the `TimeLimit` and
//!   previous-action wrappers, the registry of ids and the auto-resetting `VecEnv` the actor
//!   steps.
//! - [`chunk`]: the trajectory chunk (schema, columns, encoding) that crosses processes.
//! - [`checkpoint`]: the checkpoint directory (save, load, its files).
//! - [`actor_args`]: what the learner decides for its actors ([`actor_args::ActorArgs`]: env,
//!   policy architecture, seed, exploration), one serde value sent whole.
//! - [`control`]: the control-plane protocol (register, heartbeat, stats, shutdown) and its frames.
//! - [`dataset`]: recorded datasets of chunks (append-only, crash-safe prefix).
//! - [`fuzz`]: the fuzz targets' entry points, every decoder of bytes from disk or the network
//!   (`fuzz/`; replayed as tests).
//! - [`shm`]: the shared-memory transport: per-actor trajectory rings and the weight double
//!   buffer, in `/dev/shm/recur-*` segments the learner owns (the crate's only `unsafe`).
//! - [`policy`]: the policy network (encoder -> recurrent core -> heads), its distributions,
//!   and the policy config and chunk schema that fit an environment.
//! - [`reference`]: where the reference data (`RECUR_REFERENCE_DIR`) lives.
//! - [`remote`]: the wire protocol of remote actors over authenticated TCP (frames, limits,
//!   the run token).
//! - [`rollout`]: the actor loop ([`rollout::Actor`]) that steps the environments with the
//!   policy and fills chunks: run by the actor process, the learner's evaluation and the
//!   benchmarks.
//! - [`tls`]: TLS 1.3 on the remote-actor port (the certificate fingerprint actors pin, the
//!   learner's [`tls::TlsMode`]).
//! - [`weights`]: weight blobs (a policy's parameters, versioned) for broadcast and checkpoints.

#![deny(unsafe_code)]

pub mod actor_args;
pub mod backend;
pub mod checkpoint;
pub mod chunk;
pub mod control;
pub mod dataset;
pub mod envs;
pub mod fuzz;
pub mod hash;
pub mod policy;
pub mod reference;
pub mod remote;
pub mod rollout;
#[allow(unsafe_code)]
pub mod shm;
pub mod tls;
pub mod weights;

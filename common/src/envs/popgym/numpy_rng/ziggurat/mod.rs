//! Ziggurat tables for the standard normal, copied verbatim from numpy's
//! `numpy/random/src/distributions/ziggurat_constants.h` (identical in numpy
//! 1.26.4 and 2.4.0). Generated mechanically; do not edit by hand.
//!
//! Rust parses decimal float literals with correct rounding, as C compilers
//! do, so these are the same `f64` values numpy uses.

#![allow(clippy::excessive_precision, clippy::unreadable_literal)]

mod fi;
mod ki;
mod wi;

pub(crate) use fi::FI_DOUBLE;
pub(crate) use ki::KI_DOUBLE;
pub(crate) use wi::WI_DOUBLE;

/// numpy `ziggurat_nor_r`.
pub(crate) const ZIGGURAT_NOR_R: f64 = 3.6541528853610087963519472518;
/// numpy `ziggurat_nor_inv_r` (1 / ziggurat_nor_r, as a literal).
pub(crate) const ZIGGURAT_NOR_INV_R: f64 = 0.27366123732975827203338247596;

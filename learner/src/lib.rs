//! recur's learner: replay storage, slice sampling, recurrent-mode losses and training, and
//! the benchmarks of those paths ([`bench`], run by the `recur-bench` binary).

pub mod bench;

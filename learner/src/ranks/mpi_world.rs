//! MPI's world communicator behind [`super::World`] (the `mpi` feature): rsmpi over the
//! system's MPI, initialized once per process with funneled threading. Every collective is
//! preceded by the arrival notices of [`super::arrival`], so that a lost rank is named instead
//! of blocking the group.

use std::any::{Any, TypeId};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use mpi::collective::SystemOperation;
use mpi::datatype::{Equivalence, PartitionMut};
use mpi::environment::Universe;
use mpi::point_to_point::{Destination, Source};
use mpi::request::{Request, StaticScope};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::{CommunicatorCollectives, Root};
use mpi::{Count, Threading};

use super::arrival::Notices;

/// The byte an arrival notice carries (its tag says which collective).
static NOTICE: u8 = 1;

pub(super) struct MpiWorld {
    world: SimpleCommunicator,
    /// This rank's arrival notices still in flight (completed after their collective).
    sent: RefCell<Vec<Request<'static, u8>>>,
    /// The number of collectives begun so far, the same on every rank.
    seq: Cell<u64>,
    /// The all-reduce's send buffers, one per element type, kept between calls: rsmpi has no
    /// in-place all-reduce, and a fresh copy of a gradient each minibatch (past the
    /// allocator's mmap threshold) page-faulted its whole length in, which cost about as much
    /// as the all-reduce itself.
    send: RefCell<HashMap<TypeId, Box<dyn Any>>>,
    // Finalizes MPI when dropped, after `world`.
    _universe: Universe,
}

impl MpiWorld {
    pub(super) fn init() -> anyhow::Result<MpiWorld> {
        let (universe, _) = mpi::initialize_with_threading(Threading::Funneled)
            .ok_or_else(|| anyhow::anyhow!("MPI was already initialized in this process"))?;
        Ok(MpiWorld {
            world: universe.world(),
            sent: RefCell::new(Vec::new()),
            seq: Cell::new(0),
            send: RefCell::new(HashMap::new()),
            _universe: universe,
        })
    }

    pub(super) fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    pub(super) fn size(&self) -> usize {
        self.world.size() as usize
    }

    /// The next collective's sequence number (its notices' tag).
    pub(super) fn next_seq(&self) -> u64 {
        let seq = self.seq.get() + 1;
        self.seq.set(seq);
        seq
    }

    /// Completes the notices sent for collectives every rank has entered (their receivers took
    /// them before entering).
    fn complete_notices(&self) {
        for request in self.sent.borrow_mut().drain(..) {
            request.wait();
        }
    }

    pub(super) fn all_reduce_sum<T: Equivalence + Copy + 'static>(&self, buf: &mut [T]) {
        let mut kept = self.send.borrow_mut();
        let send = (kept.entry(TypeId::of::<T>()))
            .or_insert_with(|| Box::new(Vec::<T>::new()))
            .downcast_mut::<Vec<T>>()
            .expect("kept under its own type's id");
        send.clear();
        send.extend_from_slice(buf);
        (self.world).all_reduce_into(&send[..], buf, SystemOperation::sum());
        self.complete_notices();
    }

    pub(super) fn broadcast(&self, bytes: &mut Vec<u8>) {
        let root = self.world.process_at_rank(0);
        let mut len = bytes.len() as u64;
        root.broadcast_into(&mut len);
        bytes.resize(len as usize, 0);
        root.broadcast_into(&mut bytes[..]);
        self.complete_notices();
    }

    /// Every rank's `bytes`, in rank order, on rank 0 (empty on the others).
    pub(super) fn gather(&self, bytes: &[u8]) -> Vec<Vec<u8>> {
        let n = self.size();
        let mut lens = vec![0u64; n];
        lens[self.rank()] = bytes.len() as u64;
        let send = lens.clone();
        (self.world).all_reduce_into(&send[..], &mut lens[..], SystemOperation::sum());
        let root = self.world.process_at_rank(0);
        let parts = if self.rank() == 0 {
            let counts: Vec<Count> = lens.iter().map(|&l| l as Count).collect();
            let displs: Vec<Count> = (counts.iter())
                .scan(0, |at, &c| {
                    let d = *at;
                    *at += c;
                    Some(d)
                })
                .collect();
            let mut all = vec![0u8; lens.iter().sum::<u64>() as usize];
            {
                let mut part = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
                root.gather_varcount_into_root(bytes, &mut part);
            }
            let mut at = 0;
            (lens.iter())
                .map(|&l| {
                    let part = all[at..at + l as usize].to_vec();
                    at += l as usize;
                    part
                })
                .collect()
        } else {
            root.gather_varcount_into(bytes);
            Vec::new()
        };
        self.complete_notices();
        parts
    }
}

/// The tag of collective `seq`'s notices (MPI guarantees tags up to 32767; a rank is never more
/// than one collective ahead of another, so the wrap never mixes two).
fn tag(seq: u64) -> mpi::Tag {
    (seq % 32_767) as mpi::Tag
}

impl Notices for MpiWorld {
    fn announce(&self, seq: u64) {
        let mut sent = self.sent.borrow_mut();
        for r in (0..self.size()).filter(|&r| r != self.rank()) {
            let to = self.world.process_at_rank(r as i32);
            sent.push(to.immediate_send_with_tag(StaticScope, &NOTICE, tag(seq)));
        }
    }

    fn arrived(&self, from: usize, seq: u64) -> bool {
        let source = self.world.process_at_rank(from as i32);
        match source.immediate_matched_probe_with_tag(tag(seq)) {
            Some((message, _)) => {
                let mut byte = 0u8;
                message.matched_receive_into(&mut byte);
                true
            }
            None => false,
        }
    }
}

impl MpiWorld {
    /// Leaves MPI without finalizing it: after a lost rank, finalizing would wait on it (the
    /// process exits next; the notices still in flight have `'static` buffers).
    pub(super) fn abandon(self) {
        for request in self.sent.take() {
            std::mem::forget(request);
        }
        std::mem::forget(self);
    }
}

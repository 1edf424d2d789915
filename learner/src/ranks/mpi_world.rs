//! MPI's world communicator behind [`super::World`] (the `mpi` feature): rsmpi over the
//! system's MPI, initialized once per process with funneled threading.

use mpi::collective::SystemOperation;
use mpi::datatype::Equivalence;
use mpi::environment::Universe;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::{CommunicatorCollectives, Root};
use mpi::Threading;

pub(super) struct MpiWorld {
    world: SimpleCommunicator,
    // Finalizes MPI when dropped, after `world`.
    _universe: Universe,
}

impl MpiWorld {
    pub(super) fn init() -> anyhow::Result<MpiWorld> {
        let (universe, _) = mpi::initialize_with_threading(Threading::Funneled)
            .ok_or_else(|| anyhow::anyhow!("MPI was already initialized in this process"))?;
        Ok(MpiWorld {
            world: universe.world(),
            _universe: universe,
        })
    }

    pub(super) fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    pub(super) fn size(&self) -> usize {
        self.world.size() as usize
    }

    pub(super) fn all_reduce_sum<T: Equivalence + Copy>(&self, buf: &mut [T]) {
        let send = buf.to_vec();
        (self.world).all_reduce_into(&send[..], buf, SystemOperation::sum());
    }

    pub(super) fn broadcast(&self, bytes: &mut Vec<u8>) {
        let root = self.world.process_at_rank(0);
        let mut len = bytes.len() as u64;
        root.broadcast_into(&mut len);
        bytes.resize(len as usize, 0);
        root.broadcast_into(&mut bytes[..]);
    }
}

//! MPI's world communicator behind [`super::World`] (the `mpi` feature): rsmpi over the
//! system's MPI, initialized once per process with funneled threading (only the learner's
//! main thread calls MPI; rayon's workers never do).

use mpi::collective::SystemOperation;
use mpi::environment::Universe;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::{Root, *};
use mpi::Threading;

pub(super) struct MpiWorld {
    // Finalizes MPI when dropped, after `world`.
    _universe: Universe,
    world: SimpleCommunicator,
}

impl MpiWorld {
    pub(super) fn init() -> anyhow::Result<MpiWorld> {
        let (universe, _) = mpi::initialize_with_threading(Threading::Funneled)
            .ok_or_else(|| anyhow::anyhow!("MPI was already initialized in this process"))?;
        let world = universe.world();
        Ok(MpiWorld {
            _universe: universe,
            world,
        })
    }

    pub(super) fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    pub(super) fn size(&self) -> usize {
        self.world.size() as usize
    }

    pub(super) fn all_reduce_sum(&self, buf: &mut [f32]) {
        let send = buf.to_vec();
        self.world
            .all_reduce_into(&send[..], buf, SystemOperation::sum());
    }

    pub(super) fn broadcast(&self, bytes: &mut Vec<u8>) {
        let root = self.world.process_at_rank(0);
        let mut len = bytes.len() as u64;
        root.broadcast_into(&mut len);
        bytes.resize(len as usize, 0);
        root.broadcast_into(&mut bytes[..]);
    }

    pub(super) fn all_gather(&self, value: u64) -> Vec<u64> {
        let mut all = vec![0u64; self.size()];
        self.world.all_gather_into(&value, &mut all[..]);
        all
    }
}

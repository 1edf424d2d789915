//! Learner ranks: one run trained by N data-parallel learner processes started by a cluster
//! launcher (`mpirun -n N`, `srun -n N`), through MPI (the `mpi` cargo feature, off by default:
//! MPI is a system library, Debian's `openmpi-bin` and `libopenmpi-dev`).
//!
//! [`World::init`] is the first thing a training or replay command does. It reads what the
//! launcher says of the process group ([`Launch::from_env`]) and refuses a group it cannot
//! join: a build without the `mpi` feature launched as one of several ranks, or an MPI that
//! reports one rank where the launcher started several (an MPI without PMIx support under
//! `srun`). Either would otherwise train N unrelated runs into one run directory.

use std::fmt;

#[cfg(feature = "mpi")]
mod mpi_world;

/// What a launcher says of the process group this process was started in: the environment
/// variables Open MPI's `mpirun` (`OMPI_COMM_WORLD_SIZE`), a PMI launcher such as MPICH's
/// Hydra (`PMI_SIZE`) and Slurm's `srun` (`SLURM_STEP_NUM_TASKS`, or `SLURM_NTASKS` inside a
/// job step) set in every process they start.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    /// The variable that said so, e.g. `OMPI_COMM_WORLD_SIZE`.
    pub var: &'static str,
    /// The number of processes the launcher started.
    pub size: usize,
}

/// The variables read, in order; a Slurm job's batch script has `SLURM_NTASKS` without being a
/// task of a step, so that one counts only beside `SLURM_STEP_ID`.
const SIZE_VARS: [&str; 4] = [
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_NTASKS",
];

impl Launch {
    /// The launcher's process group from the process environment, `None` where no launcher
    /// variable is set. A variable that is set but not a positive integer is an error naming it.
    pub fn from_env() -> anyhow::Result<Option<Launch>> {
        Launch::from_vars(|k| std::env::var(k).ok())
    }

    /// [`from_env`](Self::from_env) over any variable lookup (tests).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> anyhow::Result<Option<Launch>> {
        for var in SIZE_VARS {
            if var == "SLURM_NTASKS" && get("SLURM_STEP_ID").is_none() {
                continue;
            }
            let Some(v) = get(var) else { continue };
            let size = v.trim().parse::<usize>().ok().filter(|&n| n > 0);
            let size = size.ok_or_else(|| {
                anyhow::anyhow!(
                    "{var}={v:?}: a launcher's process count must be a positive integer"
                )
            })?;
            return Ok(Some(Launch { var, size }));
        }
        Ok(None)
    }
}

/// Why a process group cannot form one run.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum RankError {
    /// Launched as one of several ranks by a build without MPI.
    #[error(
        "launched as one of {} ranks ({}={}) but this recur-learner was built without MPI: \
         build it with `cargo build --release --features mpi` (Open MPI: Debian's openmpi-bin \
         and libopenmpi-dev), or start one process",
        .0.size, .0.var, .0.size
    )]
    NotBuilt(Launch),
    /// The launcher started several processes but MPI sees each as a group of its own.
    #[error(
        "the launcher started {} ranks ({}={}) but MPI reports {mpi}: this MPI cannot join the \
         launcher's group (under srun, an MPI built without PMIx or PMI-2 support; try \
         `srun --mpi=pmix` or `mpirun`)",
        .launch.size, .launch.var, .launch.size
    )]
    SizeMismatch {
        /// What the launcher said.
        launch: Launch,
        /// The world size MPI reports.
        mpi: usize,
    },
}

/// This process's place in the run's group of learner ranks.
pub struct World {
    rank: usize,
    size: usize,
    #[cfg(feature = "mpi")]
    mpi: Option<mpi_world::MpiWorld>,
}

impl fmt::Debug for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {} of {}", self.rank, self.size)
    }
}

impl World {
    /// A group of one: no launcher, no MPI.
    pub fn single() -> World {
        World {
            rank: 0,
            size: 1,
            #[cfg(feature = "mpi")]
            mpi: None,
        }
    }

    /// Joins the launcher's group: a group of one where no launcher started this process (or
    /// one started it alone), MPI's world otherwise (refused in a build without MPI).
    pub fn init() -> anyhow::Result<World> {
        World::join(Launch::from_env()?)
    }

    fn join(launch: Option<Launch>) -> anyhow::Result<World> {
        #[cfg(feature = "mpi")]
        {
            let Some(launch) = launch else {
                return Ok(World::single());
            };
            let mpi = mpi_world::MpiWorld::init()?;
            let (rank, size) = (mpi.rank(), mpi.size());
            if size != launch.size {
                return Err(RankError::SizeMismatch { launch, mpi: size }.into());
            }
            Ok(World {
                rank,
                size,
                mpi: Some(mpi),
            })
        }
        #[cfg(not(feature = "mpi"))]
        match launch {
            Some(launch) if launch.size > 1 => Err(RankError::NotBuilt(launch).into()),
            _ => Ok(World::single()),
        }
    }

    /// This process's rank, `0..size`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether this is rank 0, the one that owns the run directory.
    pub fn is_root(&self) -> bool {
        self.rank == 0
    }

    /// Sums `buf` element-wise over every rank, in place on each (a no-op for one rank).
    pub fn all_reduce_sum(&self, buf: &mut [f32]) {
        #[cfg(feature = "mpi")]
        if let Some(mpi) = &self.mpi {
            mpi.all_reduce_sum(buf);
        }
        let _ = buf;
    }

    /// Rank 0's `bytes` on every rank (a no-op for one rank).
    pub fn broadcast(&self, bytes: &mut Vec<u8>) {
        #[cfg(feature = "mpi")]
        if let Some(mpi) = &self.mpi {
            mpi.broadcast(bytes);
        }
        let _ = bytes;
    }

    /// Every rank's `value`, in rank order (`[value]` for one rank).
    pub fn all_gather(&self, value: u64) -> Vec<u64> {
        #[cfg(feature = "mpi")]
        if let Some(mpi) = &self.mpi {
            return mpi.all_gather(value);
        }
        vec![value]
    }

    /// Checks that every rank holds the same `hash` of `what`; a rank that differs from rank 0
    /// is an error naming it (on every rank).
    pub fn check_same(&self, what: &str, hash: u64) -> anyhow::Result<()> {
        let all = self.all_gather(hash);
        match all.iter().position(|&h| h != all[0]) {
            None => Ok(()),
            Some(r) => anyhow::bail!(
                "rank {r} of {}: its {what} differs from rank 0's (hash {:016x} against {:016x})",
                self.size,
                all[r],
                all[0]
            ),
        }
    }
}

#[cfg(test)]
mod tests;

//! Learner ranks: one run trained by N data-parallel learner processes started by a cluster
//! launcher (`mpirun -n N`, `srun -n N`), through MPI (the `mpi` cargo feature, off by default:
//! MPI is a system library, Debian's `openmpi-bin` and `libopenmpi-dev`).
//!
//! [`World::init`] is the first thing a training or replay command does. It reads what the
//! launcher says of the process group ([`Launch::from_env`]) and refuses a group it cannot
//! join: a build without the `mpi` feature launched as one of several ranks, or an MPI that
//! reports one rank where the launcher started several (an MPI without PMIx support under
//! `srun`). Either would otherwise train N unrelated runs into one run directory.
//!
//! The group is process-wide, as MPI's world is: [`world`] says which rank this is, and the
//! collectives ([`all_reduce_sum`], [`broadcast`], [`check_same`]) act on it from the thread
//! that called [`World::init`] (MPI runs funneled: only that thread calls it, rayon's workers
//! never do). For a group of one they are no-ops, so single-process code calls them freely.
//!
//! A rank never blocks on a lost one: each collective is entered once every rank's arrival
//! notice is in ([`arrival`]), so a rank killed, hung or cut off is an error naming it
//! ([`RankLost`], in every later collective too) within `RECUR_RANK_TIMEOUT_S` (at once for one
//! gone from this machine); the [`watchdog`] bounds a loss inside a collective. A command that
//! fails leaves MPI unfinalized ([`World`]) and the launcher ends the rest.

pub mod arrival;
#[cfg(feature = "mpi")]
mod mpi_world;
pub mod watchdog;

pub use arrival::RankLost;

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rank {
    /// `0..size`; rank 0 owns the run directory.
    pub rank: usize,
    /// The number of ranks.
    pub size: usize,
}

impl Rank {
    /// A group of one.
    pub const SINGLE: Rank = Rank { rank: 0, size: 1 };

    /// Whether this is rank 0, the one that owns the run directory.
    pub fn is_root(&self) -> bool {
        self.rank == 0
    }
}

impl std::fmt::Display for Rank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rank {} of {}", self.rank, self.size)
    }
}

thread_local! {
    /// The joined group on the thread that joined it (MPI's handles are that thread's).
    static JOINED: std::cell::RefCell<Option<Joined>> = const { std::cell::RefCell::new(None) };
}

struct Joined {
    rank: Rank,
    #[cfg(feature = "mpi")]
    mpi: mpi_world::MpiWorld,
    /// Every rank's process, by rank (their liveness is checked while waiting for them).
    #[cfg(feature = "mpi")]
    peers: Vec<arrival::Peer>,
    /// How long a rank waits for the others to reach a collective.
    #[cfg(feature = "mpi")]
    timeout: std::time::Duration,
    /// Set once a rank was lost: every later collective fails alike, and MPI is left without
    /// finalizing (which would wait on the lost rank).
    #[cfg(feature = "mpi")]
    lost: std::cell::RefCell<Option<RankLost>>,
    /// When [`check_peers`] last looked.
    #[cfg(feature = "mpi")]
    checked: std::cell::Cell<std::time::Instant>,
}

/// The process's membership of its launcher's group, held by `main` for the process's life.
/// [`finish`](World::finish) leaves the group cleanly (MPI is finalized, which waits for every
/// rank); dropped without it (the command failed, or panicked) it leaves MPI unfinalized, since
/// the other ranks may be waiting for this one in a collective: the process exits, and the
/// launcher ends the rest.
#[must_use = "the group is left when this is dropped"]
pub struct World {
    rank: Rank,
    finished: bool,
}

impl World {
    /// Joins the launcher's group: a group of one where no launcher started this process (or
    /// one started it alone), MPI's world otherwise (refused in a build without MPI).
    pub fn init() -> anyhow::Result<World> {
        World::join(Launch::from_env()?)
    }

    fn join(launch: Option<Launch>) -> anyhow::Result<World> {
        let Some(launch) = launch.filter(|l| l.size > 1) else {
            return Ok(World {
                rank: Rank::SINGLE,
                finished: false,
            });
        };
        #[cfg(feature = "mpi")]
        {
            let mpi = mpi_world::MpiWorld::init()?;
            let rank = Rank {
                rank: mpi.rank(),
                size: mpi.size(),
            };
            if rank.size != launch.size {
                return Err(RankError::SizeMismatch {
                    launch,
                    mpi: rank.size,
                }
                .into());
            }
            let timeout = watchdog::timeout_from_env()?;
            let peers = exchange_peers(&mpi, rank);
            watchdog::start(rank, timeout, peers.clone());
            tracing::info!("{rank} (pid {})", std::process::id());
            let joined = Joined {
                rank,
                mpi,
                peers,
                timeout,
                lost: Default::default(),
                checked: std::cell::Cell::new(std::time::Instant::now()),
            };
            JOINED.with(|j| *j.borrow_mut() = Some(joined));
            Ok(World {
                rank,
                finished: false,
            })
        }
        #[cfg(not(feature = "mpi"))]
        Err(RankError::NotBuilt(launch).into())
    }

    /// This process's rank.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Leaves the group after the command succeeded on this rank: MPI is finalized (waiting
    /// for every rank to do the same) unless a rank was lost.
    pub fn finish(mut self) {
        self.finished = true;
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let (clean, joined) = (self.finished, JOINED.with(|j| j.borrow_mut().take()));
        #[cfg(feature = "mpi")]
        if let Some(joined) = joined {
            if !clean || joined.lost.borrow().is_some() {
                joined.mpi.abandon();
            }
        }
        // Without MPI the group is one process: nothing to leave.
        #[cfg(not(feature = "mpi"))]
        let _ = (clean, joined.is_some());
    }
}

/// Every rank's [`arrival::Peer`], by rank (a plain all-reduce: the group has just formed).
#[cfg(feature = "mpi")]
fn exchange_peers(mpi: &mpi_world::MpiWorld, rank: Rank) -> Vec<arrival::Peer> {
    let me = arrival::Peer::this();
    let mut all = vec![0u64; 2 * rank.size];
    all[2 * rank.rank] = u64::from(me.pid);
    all[2 * rank.rank + 1] = me.machine;
    mpi.all_reduce_sum(&mut all);
    (all.chunks_exact(2))
        .map(|p| arrival::Peer {
            pid: p[0] as u32,
            machine: p[1],
        })
        .collect()
}

/// Runs collective `what` on the joined group (`None` in a group of one) once every rank has
/// reached it ([`arrival`]); a rank lost on the way is [`RankLost`], here and in every later
/// collective.
#[cfg(feature = "mpi")]
fn collective<T>(
    what: &'static str,
    run: impl FnOnce(&mpi_world::MpiWorld) -> T,
) -> Result<Option<T>, RankLost> {
    with_joined(|j| {
        if let Some(lost) = j.lost.borrow().as_ref() {
            return Err(lost.clone());
        }
        let seq = j.mpi.next_seq();
        fault_point(j.rank, seq);
        if let Err(lost) = arrival::wait_for_all(&j.mpi, j.rank, &j.peers, seq, what, j.timeout) {
            tracing::error!("{lost}");
            *j.lost.borrow_mut() = Some(lost.clone());
            return Err(lost);
        }
        let _wait = watchdog::waiting(what);
        Ok(run(&j.mpi))
    })
    .transpose()
}

/// This process's rank: [`Rank::SINGLE`] unless this thread joined a group of several.
pub fn world() -> Rank {
    with_joined(|j| j.rank).unwrap_or(Rank::SINGLE)
}

/// Runs `f` on the joined group of several ranks, `None` in a group of one.
fn with_joined<T>(f: impl FnOnce(&Joined) -> T) -> Option<T> {
    JOINED.with(|j| j.borrow().as_ref().map(f))
}

/// Checks, between collectives, that no other rank on this machine is gone (at most every
/// [`arrival::LIVENESS_EVERY`]; always `Ok` for one rank): a rank that cannot reach its next
/// collective (its actors gone, say) still names a lost rank at once. A lost one is
/// [`RankLost`], and every later collective fails alike.
pub fn check_peers() -> Result<(), RankLost> {
    #[cfg(feature = "mpi")]
    with_joined(|j| {
        if let Some(lost) = j.lost.borrow().as_ref() {
            return Err(lost.clone());
        }
        if j.checked.get().elapsed() < arrival::LIVENESS_EVERY {
            return Ok(());
        }
        j.checked.set(std::time::Instant::now());
        let me = &j.peers[j.rank.rank];
        let gone: Vec<usize> = (0..j.rank.size)
            .filter(|&r| r != j.rank.rank && j.peers[r].gone_from(me))
            .collect();
        if gone.is_empty() {
            return Ok(());
        }
        let lost = RankLost {
            me: j.rank,
            why: arrival::Why::Gone {
                pids: gone.iter().map(|&r| j.peers[r].pid).collect(),
            },
            lost: gone,
            what: "its training loop",
        };
        tracing::error!("{lost}");
        *j.lost.borrow_mut() = Some(lost.clone());
        Err(lost)
    })
    .transpose()?;
    Ok(())
}

/// Fault injection for the tests: `RECUR_FAULT_RANK=<rank>:<seq>` makes rank `<rank>` SIGKILL
/// itself as it reaches its `<seq>`-th collective (from 1: the start's config check and
/// broadcast are 1 and 2, then each PPO update is its agreement, one gradient all-reduce per
/// minibatch and the observation normalizer's), so that a test loses a rank mid-update without
/// relying on timing.
#[cfg(feature = "mpi")]
fn fault_point(rank: Rank, seq: u64) {
    let Ok(spec) = std::env::var("RECUR_FAULT_RANK") else {
        return;
    };
    let at = spec.split_once(':').and_then(|(r, s)| {
        Some((
            r.trim().parse::<usize>().ok()?,
            s.trim().parse::<u64>().ok()?,
        ))
    });
    if at == Some((rank.rank, seq)) {
        eprintln!(
            "RECUR_FAULT_RANK: {rank} (pid {}) SIGKILLs itself at collective {seq}",
            std::process::id()
        );
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}

/// Sums `buf` element-wise over every rank, in place on each (a no-op for one rank). Waits for
/// every rank to reach it; a lost rank is [`RankLost`] naming it (see [`arrival`]).
#[cfg_attr(not(feature = "mpi"), allow(unused_variables))]
pub fn all_reduce_sum<T: Reducible>(buf: &mut [T]) -> Result<(), RankLost> {
    #[cfg(feature = "mpi")]
    collective("an all-reduce", |m| m.all_reduce_sum(buf))?;
    Ok(())
}

/// The environment variable that makes one rank corrupt its gradient before the gradient
/// all-reduce, for the tests that show the replay equality test catches a rank's gradient
/// dropped or counted twice: `RANK:zero` or `RANK:double` (e.g. `1:double`). Test-only; it
/// acts only in a group of several ranks.
pub const FAULT_VAR: &str = "RECUR_TEST_RANK_GRADIENT";

/// Sums a minibatch's gradient `grads` over every rank, in place (a no-op for one rank), timed
/// as the profile phase `ranks.all_reduce`: each rank's loss divides by the *group's* count of
/// steps, so the sum is the gradient of the whole group's minibatch. [`FAULT_VAR`] may corrupt
/// this rank's part first.
pub fn all_reduce_gradient(grads: &mut [f32]) -> Result<(), RankLost> {
    if world().size == 1 {
        return Ok(());
    }
    match gradient_fault(world().rank) {
        Some(Fault::Zero) => grads.iter_mut().for_each(|g| *g = 0.0),
        Some(Fault::Double) => grads.iter_mut().for_each(|g| *g *= 2.0),
        None => {}
    }
    crate::run::profile::time("ranks.all_reduce", || all_reduce_sum(grads))
}

/// What [`FAULT_VAR`] does to a rank's gradient.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    Zero,
    Double,
}

/// [`FAULT_VAR`]'s fault for `rank`, read once; a value that does not parse panics naming it
/// (a test's typo must not pass as "no fault").
fn gradient_fault(rank: usize) -> Option<Fault> {
    static FAULT: std::sync::OnceLock<Option<(usize, Fault)>> = std::sync::OnceLock::new();
    let fault = FAULT.get_or_init(|| {
        let v = std::env::var(FAULT_VAR).ok()?;
        let parsed = v.split_once(':').and_then(|(r, f)| {
            let f = match f {
                "zero" => Fault::Zero,
                "double" => Fault::Double,
                _ => return None,
            };
            Some((r.parse().ok()?, f))
        });
        Some(
            parsed
                .unwrap_or_else(|| panic!("{FAULT_VAR}={v:?}: expected RANK:zero or RANK:double")),
        )
    });
    fault.filter(|&(r, _)| r == rank).map(|(_, f)| f)
}

/// The seed rank `rank` of a group trains with where the run's seed is `seed`: its samplers
/// (and, in `train`, its actors' environments) differ from every other rank's.
pub fn rank_seed(seed: u64, rank: usize) -> u64 {
    seed.wrapping_add((rank as u64) << 40)
}

/// The launchers' variables for a process's rank among the ranks on its own machine, in order:
/// Open MPI's `mpirun`, MPICH's Hydra, Slurm's `srun`.
const LOCAL_RANK_VARS: [&str; 3] = [
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "SLURM_LOCALID",
];

/// Set to 1, every rank of a machine trains on the GPU its config names (ranks sharing one GPU,
/// as a one-GPU machine tests a group); otherwise local rank `k` takes the GPU `k` after it.
pub const SHARE_GPU_VAR: &str = "RECUR_RANKS_SHARE_GPU";

/// The device this rank trains on: `device` itself for one rank or the CPU; on several ranks,
/// `cuda:N` is GPU `N + k` for the rank `k`-th on its machine (the launcher's local rank;
/// `cuda` and `cuda:0` give local rank k GPU k), unless [`SHARE_GPU_VAR`] is 1.
pub fn rank_device(device: common::backend::TrainDevice) -> common::backend::TrainDevice {
    rank_device_from(device, world(), |k| std::env::var(k).ok())
}

/// [`rank_device`] over any variable lookup (tests).
pub fn rank_device_from(
    device: common::backend::TrainDevice,
    rank: Rank,
    get: impl Fn(&str) -> Option<String>,
) -> common::backend::TrainDevice {
    use common::backend::TrainDevice;
    let TrainDevice::Cuda(first) = device else {
        return device;
    };
    if rank.size == 1 || get(SHARE_GPU_VAR).as_deref() == Some("1") {
        return device;
    }
    let local = (LOCAL_RANK_VARS.iter()).find_map(|v| get(v)?.trim().parse::<usize>().ok());
    let local = local.unwrap_or_else(|| {
        tracing::warn!(
            "{rank}: no local rank from the launcher ({}): training on {device}",
            LOCAL_RANK_VARS.join(", ")
        );
        0
    });
    TrainDevice::Cuda(first + local)
}

/// Element types the collectives sum.
#[cfg(feature = "mpi")]
pub trait Reducible: mpi::datatype::Equivalence + Copy + 'static {}
/// Element types the collectives sum.
#[cfg(not(feature = "mpi"))]
pub trait Reducible: Copy {}
impl Reducible for f32 {}
impl Reducible for f64 {}
impl Reducible for u64 {}

/// Rank 0's `bytes` on every rank (a no-op for one rank); a lost rank is [`RankLost`].
// A Vec: the other ranks' is resized to rank 0's length (only with MPI).
#[cfg_attr(not(feature = "mpi"), allow(unused_variables, clippy::ptr_arg))]
pub fn broadcast(bytes: &mut Vec<u8>) -> Result<(), RankLost> {
    #[cfg(feature = "mpi")]
    collective("a broadcast", |m| m.broadcast(bytes))?;
    Ok(())
}

/// Every rank's `bytes` on rank 0, in rank order (`[bytes]` for one rank; empty on the other
/// ranks); a lost rank is [`RankLost`].
pub fn gather(bytes: Vec<u8>) -> Result<Vec<Vec<u8>>, RankLost> {
    #[cfg(feature = "mpi")]
    if let Some(parts) = collective("a gather", |m| m.gather(&bytes))? {
        return Ok(parts);
    }
    Ok(vec![bytes])
}

/// Checks that every rank holds the same `hash` of `what`; a rank that differs from rank 0 is
/// an error naming it, on every rank.
pub fn check_same(what: &str, hash: u64) -> anyhow::Result<()> {
    let size = world().size;
    let mut all = vec![0u64; size];
    all[world().rank] = hash;
    all_reduce_sum(&mut all)?;
    match all.iter().position(|&h| h != all[0]) {
        None => Ok(()),
        Some(r) => anyhow::bail!(
            "rank {r} of {size}: its {what} differs from rank 0's (hash {:016x} against {:016x})",
            all[r],
            all[0]
        ),
    }
}

#[cfg(test)]
mod tests;

//! A named POSIX shared-memory segment (`/dev/shm/<name>`) with recur's header: the one place
//! that maps memory. `ring` and `weights` lay their own data
//! out in the segment's body.
//!
//! # Header
//!
//! Every segment opens with a 64-byte header (magic, layout version, kind, owner pid and start
//! time, size, body offset), laid out in `segment/header.rs`. The magic is stored last, with
//! Release: a process that sees it sees the whole header and the body's initial layout.
//!
//! # Ownership
//!
//! The creator ([`Segment::create`]) owns the name: dropping its `Segment` (also while a panic
//! unwinds) unmaps and unlinks it. Handles from [`Segment::open`] only unmap. Unlinking removes
//! the name; processes that still have it mapped keep valid memory until they drop it. A run
//! killed before it could drop its segments leaves them behind; the next run's
//! [`reclaim_stale`] removes those whose owner is dead.
//!
//! Segments are created mode 0600: only processes of the same user can open them. Their pages
//! are reserved on creation (`posix_fallocate`), so a full `/dev/shm` is an error from
//! `create`, not a `SIGBUS` on first touch.
//!
//! # Where each part lives
//!
//! This file holds [`Segment`] (create, open, the owner, access to the body) and [`ShmError`];
//! `header.rs` the header's layout and kind codes, `name.rs` the names and run ids,
//! `reclaim.rs` the removal of stale segments, `layout.rs` the checks of the layout words the
//! ring and weight bodies begin with.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use shared_memory::{Shmem, ShmemConf, ShmemError};

use super::process::ProcessId;

mod header;
mod layout;
mod name;
mod reclaim;

pub use header::{
    SegmentKind, HEADER_LEN, OWNER_PID_OFFSET, OWNER_START_OFFSET, SEGMENT_MAGIC, SEGMENT_VERSION,
};
use header::{BODY_OFFSET_OFFSET, KIND_OFFSET, MAGIC_OFFSET, TOTAL_SIZE_OFFSET, VERSION_OFFSET};
use name::validate_name;
pub use name::{unique_run_id, MAX_NAME_LEN, SEGMENT_PREFIX};
pub use reclaim::{reclaim_stale, UNINITIALIZED_GRACE};

/// Where POSIX shared memory lives on Linux.
pub const SHM_DIR: &str = "/dev/shm";

/// What went wrong creating, opening or using a segment. Every message names the segment.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    #[error("shared-memory segment name {name:?} is invalid: {reason}")]
    Name { name: String, reason: &'static str },
    #[error(
        "shared-memory segment {name:?} already exists (another live run, or a stale one: \
         reclaim_stale removes segments of dead owners)"
    )]
    Exists { name: String },
    #[error("shared-memory segment {name:?} does not exist (in {SHM_DIR})")]
    NotFound { name: String },
    #[error(
        "shared-memory segment {name:?}: permission denied (segments are mode 0600: only the \
         user that created it can open it)"
    )]
    PermissionDenied { name: String },
    #[error("shared-memory segment {name:?}: {SHM_DIR} has no room for {bytes} bytes")]
    NoSpace { name: String, bytes: usize },
    #[error("shared-memory segment {name:?}: {op} failed: {detail}")]
    Os {
        name: String,
        op: &'static str,
        detail: String,
    },
    #[error(
        "shared-memory segment {name:?}: magic {got:#018x} is not recur's ({SEGMENT_MAGIC:#018x}): \
         not a recur segment, or its creator has not finished initialising it"
    )]
    Magic { name: String, got: u64 },
    #[error(
        "shared-memory segment {name:?}: header field `{field}` = {value}, expected {expected}"
    )]
    Header {
        name: String,
        field: &'static str,
        value: u64,
        expected: String,
    },
    #[error("shared-memory segment {name:?}: layout field `{field}` = {value}: {reason}")]
    Layout {
        name: String,
        field: &'static str,
        value: u64,
        reason: String,
    },
    #[error("{field} = {value} is invalid: {reason}")]
    Config {
        field: &'static str,
        value: u64,
        reason: &'static str,
    },
    #[error(
        "ring {name:?} already has a writer (pid {pid}, {}); a ring serves one writer for its \
         lifetime: a restarted actor gets a new ring",
        if *alive { "alive" } else { "dead" }
    )]
    WriterAttached { name: String, pid: u32, alive: bool },
    #[error("weights {name:?}: a blob of {len} bytes exceeds the segment's max_bytes {max}")]
    TooLarge {
        name: String,
        len: usize,
        max: usize,
    },
    #[error(
        "weights {name:?}: version {version} must be greater than the last published {last} \
         (and below 2^63)"
    )]
    VersionOrder {
        name: String,
        version: u64,
        last: u64,
    },
    #[error("weights {name:?}: no consistent copy after {retries} tries")]
    Contended { name: String, retries: u32 },
}

fn os_error(name: &str, op: &'static str, detail: impl std::fmt::Display) -> ShmError {
    ShmError::Os {
        name: name.to_string(),
        op,
        detail: detail.to_string(),
    }
}

fn errno_error(name: &str, op: &'static str, errno: u32) -> ShmError {
    os_error(name, op, std::io::Error::from_raw_os_error(errno as i32))
}

/// A mapped segment. Send (the mapping is process-wide), not Sync: the ring and weight types
/// built on it are single-owner handles.
pub struct Segment {
    shmem: Shmem,
    name: String,
    kind: SegmentKind,
}

// SAFETY: `Shmem` is !Send only because it holds the mapping's raw pointer. The mapping belongs
// to the process, not to a thread: it stays valid until `Shmem` is dropped (munmap, and
// shm_unlink for the owner), which may happen on any thread. All shared access goes through
// atomics or the copy protocols of `ring` and `weights`.
unsafe impl Send for Segment {}

impl Segment {
    /// Creates segment `name` with `size` usable body bytes after the 64-byte header; fails
    /// with [`ShmError::Exists`] if the name is taken. `name` must start with
    /// [`SEGMENT_PREFIX`]. The file is mode 0600; its pages are reserved up front. This
    /// process owns the segment and unlinks it when the `Segment` is dropped.
    pub fn create(name: &str, size: usize) -> Result<Segment, ShmError> {
        Self::create_with(name, SegmentKind::Raw, size, |_| {})
    }

    /// [`create`](Self::create) for a `kind`, running `init` on the zeroed body before the
    /// header's magic is published (so an opener never sees a half-initialised body).
    pub(crate) fn create_with(
        name: &str,
        kind: SegmentKind,
        body_len: usize,
        init: impl FnOnce(&Segment),
    ) -> Result<Segment, ShmError> {
        validate_name(name, true)?;
        let total = HEADER_LEN.checked_add(body_len).ok_or(ShmError::Config {
            field: "segment size",
            value: body_len as u64,
            reason: "overflows usize",
        })?;
        let shmem = ShmemConf::new()
            .os_id(format!("/{name}"))
            .size(total)
            .create()
            .map_err(|e| match e {
                ShmemError::MappingIdExists => ShmError::Exists {
                    name: name.to_string(),
                },
                ShmemError::MapCreateFailed(errno) | ShmemError::UnknownOsError(errno) => {
                    match errno as i32 {
                        nix::libc::EACCES | nix::libc::EPERM => ShmError::PermissionDenied {
                            name: name.to_string(),
                        },
                        nix::libc::ENOSPC | nix::libc::ENOMEM => ShmError::NoSpace {
                            name: name.to_string(),
                            bytes: total,
                        },
                        _ => errno_error(name, "shm_open/ftruncate/mmap", errno),
                    }
                }
                other => os_error(name, "create", other),
            })?;
        // From here on, dropping `shmem` unlinks the name again (it is the owner).
        reserve_pages(name, total)?;
        let segment = Segment {
            shmem,
            name: name.to_string(),
            kind,
        };
        let me = ProcessId::current();
        // Relaxed: none of these is visible to an opener before the Release store of the magic
        // below, which orders them (and everything `init` wrote) before it.
        for (offset, value) in [
            (VERSION_OFFSET, SEGMENT_VERSION),
            (KIND_OFFSET, kind.code()),
            (OWNER_PID_OFFSET, me.pid),
        ] {
            segment.atomic_u32(offset).store(value, Ordering::Relaxed);
        }
        for (offset, value) in [
            (OWNER_START_OFFSET, me.start),
            (TOTAL_SIZE_OFFSET, total as u64),
            (BODY_OFFSET_OFFSET, HEADER_LEN as u64),
        ] {
            segment.atomic_u64(offset).store(value, Ordering::Relaxed);
        }
        init(&segment);
        // Release: publishes the header and the initialised body to openers, whose Acquire
        // load of the magic synchronises with this store.
        segment
            .atomic_u64(MAGIC_OFFSET)
            .store(SEGMENT_MAGIC, Ordering::Release);
        Ok(segment)
    }

    /// Opens an existing segment of any kind, checking its header (magic, version, size)
    /// against the mapping. Errors name the segment.
    pub fn open(name: &str) -> Result<Segment, ShmError> {
        Self::open_kind(name, None)
    }

    /// [`open`](Self::open), also requiring the body to be of `kind`.
    pub(crate) fn open_kind(name: &str, kind: Option<SegmentKind>) -> Result<Segment, ShmError> {
        validate_name(name, false)?;
        let header_err = |field, value: u64, expected: String| ShmError::Header {
            name: name.to_string(),
            field,
            value,
            expected,
        };
        let too_small = |len| header_err("total size", len, format!("at least {HEADER_LEN} bytes"));
        let shmem = ShmemConf::new()
            .os_id(format!("/{name}"))
            .open()
            .map_err(|e| match e {
                ShmemError::MapOpenFailed(errno) => match errno as i32 {
                    nix::libc::ENOENT => ShmError::NotFound {
                        name: name.to_string(),
                    },
                    nix::libc::EACCES | nix::libc::EPERM => ShmError::PermissionDenied {
                        name: name.to_string(),
                    },
                    // mmap of an empty file: the creator crashed between shm_open and
                    // ftruncate, or is still there.
                    nix::libc::EINVAL => too_small(0),
                    _ => errno_error(name, "shm_open/mmap", errno),
                },
                other => os_error(name, "open", other),
            })?;
        let mapped = shmem.len();
        if mapped < HEADER_LEN {
            return Err(too_small(mapped as u64));
        }
        let mut segment = Segment {
            shmem,
            name: name.to_string(),
            kind: SegmentKind::Raw,
        };
        // Acquire: synchronises with the creator's Release store of the magic, so the header
        // and the body's initial layout read below are complete.
        let magic = segment.atomic_u64(MAGIC_OFFSET).load(Ordering::Acquire);
        if magic != SEGMENT_MAGIC {
            return Err(ShmError::Magic {
                name: name.to_string(),
                got: magic,
            });
        }
        // Relaxed (here and below): ordered after the Acquire load of the magic.
        let version = segment.atomic_u32(VERSION_OFFSET).load(Ordering::Relaxed);
        if version != SEGMENT_VERSION {
            return Err(header_err(
                "layout version",
                version as u64,
                format!("{SEGMENT_VERSION} (this build's)"),
            ));
        }
        let code = segment.atomic_u32(KIND_OFFSET).load(Ordering::Relaxed);
        let found = SegmentKind::from_code(code).ok_or_else(|| {
            header_err(
                "kind",
                code as u64,
                "0 (raw), 1 (ring) or 2 (weights)".into(),
            )
        })?;
        if let Some(want) = kind {
            if found != want {
                return Err(header_err(
                    "kind",
                    code as u64,
                    format!(
                        "{} ({}); this is a {} segment",
                        want.code(),
                        want.name(),
                        found.name()
                    ),
                ));
            }
        }
        segment.kind = found;
        let total = segment
            .atomic_u64(TOTAL_SIZE_OFFSET)
            .load(Ordering::Relaxed);
        if total != mapped as u64 {
            return Err(header_err(
                "total size",
                total,
                format!("{mapped} (the size of the mapping)"),
            ));
        }
        let body = segment
            .atomic_u64(BODY_OFFSET_OFFSET)
            .load(Ordering::Relaxed);
        if body != HEADER_LEN as u64 {
            return Err(header_err("body offset", body, HEADER_LEN.to_string()));
        }
        Ok(segment)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn kind(&self) -> SegmentKind {
        self.kind
    }

    /// Whether this handle created the segment (and unlinks it on drop).
    pub fn is_owner(&self) -> bool {
        self.shmem.is_owner()
    }

    /// The pid of the process that created the segment, as its header says.
    pub fn owner_pid(&self) -> u32 {
        self.owner().pid
    }

    /// Whether the creating process still runs (not a zombie, not a later process that reuses
    /// its pid).
    pub fn owner_alive(&self) -> bool {
        self.owner().alive()
    }

    pub(crate) fn owner(&self) -> ProcessId {
        // Relaxed: read-only after creation; a concurrent rewrite (fault injection) is just
        // another value.
        ProcessId {
            pid: self.atomic_u32(OWNER_PID_OFFSET).load(Ordering::Relaxed),
            start: self.atomic_u64(OWNER_START_OFFSET).load(Ordering::Relaxed),
        }
    }

    /// Bytes mapped, header included.
    pub fn len(&self) -> usize {
        self.shmem.len()
    }

    /// Always false: a segment holds at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Usable bytes after the header.
    pub fn body_len(&self) -> usize {
        self.shmem.len() - HEADER_LEN
    }

    /// The first body byte. Valid for [`body_len`](Self::body_len) bytes while `self` lives.
    pub(crate) fn body_ptr(&self) -> *mut u8 {
        // SAFETY: the mapping holds at least HEADER_LEN bytes (checked by create/open), so
        // the offset stays inside it.
        unsafe { self.shmem.as_ptr().add(HEADER_LEN) }
    }

    /// The `AtomicU64` at body offset `offset`. `offset` comes from this crate's own layout
    /// computations (never from shared memory): out-of-range or misaligned is a bug here.
    pub(crate) fn body_u64(&self, offset: usize) -> &AtomicU64 {
        self.atomic_u64(HEADER_LEN + offset)
    }

    /// The `AtomicU32` at body offset `offset` (see [`body_u64`](Self::body_u64)).
    pub(crate) fn body_u32(&self, offset: usize) -> &AtomicU32 {
        self.atomic_u32(HEADER_LEN + offset)
    }

    fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        assert!(
            offset.is_multiple_of(8) && offset + 8 <= self.shmem.len(),
            "internal: u64 at offset {offset} of a {}-byte mapping",
            self.shmem.len()
        );
        // SAFETY: in bounds and 8-aligned (the mapping is page-aligned; checked above).
        // AtomicU64 has the layout of u64 and every bit pattern is valid; shared references to
        // atomics may alias concurrent atomic accesses from this or other processes.
        unsafe { &*(self.shmem.as_ptr().add(offset) as *const AtomicU64) }
    }

    fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        assert!(
            offset.is_multiple_of(4) && offset + 4 <= self.shmem.len(),
            "internal: u32 at offset {offset} of a {}-byte mapping",
            self.shmem.len()
        );
        // SAFETY: as in `atomic_u64`, for 4 bytes with 4-byte alignment.
        unsafe { &*(self.shmem.as_ptr().add(offset) as *const AtomicU32) }
    }
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("len", &self.len())
            .field("owner", &self.is_owner())
            .finish()
    }
}

/// Reserves the pages of the new segment so that touching them later cannot raise SIGBUS when
/// /dev/shm fills up.
fn reserve_pages(name: &str, total: usize) -> Result<(), ShmError> {
    #[cfg(target_os = "linux")]
    {
        let path = format!("{SHM_DIR}/{name}");
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        {
            Ok(f) => f,
            // Not where glibc puts POSIX shared memory: nothing to reserve through.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(os_error(name, "open for fallocate", e)),
        };
        use std::os::fd::AsRawFd;
        // SAFETY: `file` is open for the whole call, so its descriptor is valid; offset and
        // length describe the file's own size (it was sized to `total` by ftruncate).
        let errno =
            unsafe { nix::libc::posix_fallocate(file.as_raw_fd(), 0, total as nix::libc::off_t) };
        match errno {
            0 => Ok(()),
            nix::libc::ENOSPC => Err(ShmError::NoSpace {
                name: name.to_string(),
                bytes: total,
            }),
            // Filesystems without fallocate support: keep the sparse file.
            nix::libc::EOPNOTSUPP => Ok(()),
            e => Err(errno_error(name, "posix_fallocate", e as u32)),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (name, total);
        Ok(())
    }
}

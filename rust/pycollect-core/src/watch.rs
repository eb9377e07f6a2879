//! Reading a collection's control blocks: its metrics, each worker's state and ring, nothing else.
//!
//! A [`Watch`] is what `pycollect top` holds on another process's segment: it maps only the
//! segment's front (header, global control, worker control blocks and rings, never the batch
//! data), read-only, so watching can neither change a collection nor cost it memory. The
//! collector's own `stats()` reads through the same type over its own mapping.

use std::sync::Arc;

use rustix::fd::{BorrowedFd, OwnedFd};

use crate::consts::{
    FIELD_RECORD, HEADER_FIXED, MAX_FIELDS, TRAINER_METRICS_OFFSET, WORKER_ERROR_TEXT_OFFSET,
};
use crate::header::{self, STATE_READY};
use crate::layout::Layout;
use crate::metrics::TrainerMetricsMem;
use crate::ring::RingCtl;
use crate::segment::{Segment, SegmentError};
use crate::shared::{Owner, SharedRef, ShmSafe};
use crate::sync::Ordering;
use crate::worker::{WorkerCtl, WorkerCtlMem};

/// A read-only mapping of a segment's front, kept alive by the references made from it.
struct FrontMapping {
    _map: memmap2::Mmap, // unmapped when the last reference goes
    _fd: OwnedFd,
}

/// Read access to a segment's control blocks (see the module docs).
#[derive(Clone)]
pub struct Watch {
    owner: Owner,
    base: *const u8,
    /// Bytes readable from `base`.
    len: usize,
    layout: Layout,
    creator_pid: u64,
    creator_start_time: u64,
}

// SAFETY: `base` points into the mapping `owner` keeps alive; everything read through it is
// atomics (control blocks) or bytes copied out with `ptr::copy` (error text).
unsafe impl Send for Watch {}
// SAFETY: as for Send.
unsafe impl Sync for Watch {}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("creator_pid", &self.creator_pid)
            .field("n_workers", &self.layout.n_workers())
            .finish()
    }
}

fn map_front(fd: &OwnedFd, len: usize) -> Result<memmap2::Mmap, SegmentError> {
    // SAFETY: a read-only shared mapping; the bytes may change under us (the collection runs),
    // which is why they are only ever read as atomics or copied out, never borrowed as slices.
    unsafe { memmap2::MmapOptions::new().len(len).map(fd) }
        .map_err(|err| SegmentError::Os { op: "mmap", err })
}

impl Watch {
    /// Watches the segment behind `fd` (opened read-only, e.g. `/proc/<pid>/fd/<n>`; it is
    /// duplicated, so the caller may close its copy).
    ///
    /// Refuses, naming the value, a file too small to be a segment, a segment not yet ready,
    /// and a foreign magic or ABI version.
    pub fn open(fd: BorrowedFd<'_>) -> Result<Self, SegmentError> {
        let fd = rustix::io::fcntl_dupfd_cloexec(fd, 0).map_err(|e| SegmentError::Os {
            op: "dup",
            err: e.into(),
        })?;
        let need = HEADER_FIXED + MAX_FIELDS * FIELD_RECORD;
        let len = rustix::fs::fstat(&fd)
            .map_err(|e| SegmentError::Os {
                op: "fstat",
                err: e.into(),
            })?
            .st_size as u64;
        if len < need as u64 || len > isize::MAX as u64 {
            return Err(SegmentError::TooSmall { len, need });
        }
        let header = map_front(&fd, need)?;
        // SAFETY: the mapping holds the header's `need` bytes and outlives `state`.
        let state = unsafe { header::state(header.as_ptr()) };
        // SYNC POINT: Acquire pairs with the creator's Release of READY.
        if state.load(Ordering::Acquire) != STATE_READY {
            return Err(SegmentError::NotReady {
                waited: std::time::Duration::ZERO,
            });
        }
        // SAFETY: READY was acquired above and the mapping covers the whole header.
        let decoded = unsafe { header::decode(header.as_ptr(), len as usize) }
            .map_err(SegmentError::Header)?;
        drop(header);
        let front = decoded.layout.control_end().min(len as usize);
        let map = map_front(&fd, front)?;
        let base = map.as_ptr();
        Ok(Self {
            owner: Arc::new(FrontMapping { _map: map, _fd: fd }),
            base,
            len: front,
            layout: decoded.layout,
            creator_pid: decoded.creator_pid,
            creator_start_time: decoded.creator_start_time,
        })
    }

    /// Watches a segment this process holds (the collector's own `stats()`).
    pub fn of(segment: &Segment) -> Self {
        let mapping = segment.mapping();
        Self {
            base: mapping.base_ptr(),
            len: mapping.len(),
            owner: mapping,
            layout: segment.layout().clone(),
            creator_pid: segment.creator_pid(),
            creator_start_time: 0,
        }
    }

    /// The segment's layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Pid of the process that made the segment (the trainer).
    pub fn creator_pid(&self) -> u64 {
        self.creator_pid
    }

    /// The creator's start time (clock ticks since boot; 0 for [`Watch::of`]), which tells a
    /// trainer from a later process that reused its pid.
    pub fn creator_start_time(&self) -> u64 {
        self.creator_start_time
    }

    /// # Safety
    /// `off + size_of::<T>() ≤ self.len`, `off` aligned for T, and the bytes there are a `T`.
    unsafe fn shared<T: ShmSafe>(&self, off: usize) -> SharedRef<T> {
        assert!(
            off + std::mem::size_of::<T>() <= self.len,
            "offset {off} outside the front"
        );
        // SAFETY: in range (asserted); the caller vouches for alignment and type.
        unsafe {
            SharedRef::from_raw(
                std::ptr::NonNull::new_unchecked(self.base.add(off).cast_mut().cast::<T>()),
                Arc::clone(&self.owner),
            )
        }
    }

    fn check_worker(&self, worker: usize) -> Result<(), SegmentError> {
        let n_workers = self.layout.n_workers();
        if worker >= n_workers {
            return Err(SegmentError::NoSuchWorker { worker, n_workers });
        }
        Ok(())
    }

    /// The trainer's metrics.
    pub fn trainer_metrics(&self) -> SharedRef<TrainerMetricsMem> {
        // SAFETY: as Segment::trainer_metrics: inside the global control region, in the front.
        unsafe { self.shared(self.layout.global_ctl_offset() + TRAINER_METRICS_OFFSET) }
    }

    /// Worker `w`'s control block, to read (its state, heartbeat, error text and metrics).
    ///
    /// Only reading methods may be called on it: the front is mapped read-only.
    pub fn worker(&self, w: usize) -> Result<WorkerCtl, SegmentError> {
        self.check_worker(w)?;
        let off = self.layout.worker_ctl_offset(w);
        // SAFETY: as Segment::worker; the whole control block lies in the front (control_end).
        unsafe {
            let mem = self.shared::<WorkerCtlMem>(off);
            let text = self.base.add(off + WORKER_ERROR_TEXT_OFFSET).cast_mut();
            Ok(WorkerCtl::from_raw(mem, text, w))
        }
    }

    /// Rollouts worker `w` has handed over that the trainer has not taken yet.
    pub fn ring_filled(&self, w: usize) -> Result<u64, SegmentError> {
        self.check_worker(w)?;
        // SAFETY: a data ring region starts with its RingCtl (layout.rs), inside the front.
        let ctl = unsafe { self.shared::<RingCtl>(self.layout.data_ring_offset(w)) };
        Ok(ctl.tail().saturating_sub(ctl.head()))
    }
}

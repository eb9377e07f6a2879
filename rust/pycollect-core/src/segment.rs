//! The shared-memory segment: creation, sealing, mapping, attach, and typed access.
//!
//! One segment per collector. It is a memfd (no name, so a crash leaves nothing behind),
//! sized with `ftruncate` + `fallocate` so a full tmpfs or memory cgroup fails *here* rather
//! than with SIGBUS on first touch, sealed against shrinking and growing, and mapped with
//! `MAP_POPULATE`. Where memfd is unavailable a named `shm_open` segment (mode 0600) is the
//! fallback; its name encodes the creator's pid and start time so stale ones can be swept.
//!
//! The mapping sits in an `Arc<Mapping>` that every handle and view holds, so the memory is
//! unmapped only when the last user is gone (a numpy/torch view can outlive the collector).
//!
//! A handle acts on the segment as a whole (shutdown flag, unlinking the name) only in the
//! process that made it: a copy inherited through `fork()` reads and writes the shared memory
//! like any other, but its [`Segment::shutdown`], [`Segment::unlink_name`] and drop do nothing,
//! so a forked child cannot stop its parent's workers or take its segment's name.

use crate::consts::TRAINER_METRICS_OFFSET;
use crate::eventcount::EventCount;
use crate::exchange::{ShmMailbox, StepChannelMem, StepCtl, StepTrainer, StepWorker};
use crate::header::{self, HeaderError, STATE_READY};
use crate::layout::{Layout, LayoutError, LINE, RING_CTL_SIZE, WORKER_ERROR_TEXT_OFFSET};
use crate::metrics::TrainerMetricsMem;
use crate::ring::{Consumer, Producer, RingCtl, RingError, RingMem, SlotHeader};
use crate::shared::{Owner, SharedRef, SharedSlice, ShmSafe};
use crate::sync::{AtomicU32, AtomicU64, Ordering, Padded};
use crate::weights::{ShmBuffers, WeightsError, WeightsMem, WeightsReader, WeightsWriter, NO_PIN};
use crate::worker::{WorkerCtl, WorkerCtlMem};
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Name given to the memfd (shows up as `/memfd:pycollect` in `/proc/<pid>/fd`).
pub const MEMFD_NAME: &str = "pycollect";
/// Prefix of named fallback segments in `/dev/shm`.
pub const SHM_PREFIX: &str = "pycollect-";

/// Errors from creating, attaching or addressing a segment; each names the bad value.
#[derive(Debug)]
pub enum SegmentError {
    /// A system call failed.
    Os {
        /// What we were doing.
        op: &'static str,
        /// The OS error.
        err: std::io::Error,
    },
    /// Memory for the segment could not be reserved (full tmpfs / memory cgroup).
    Allocate {
        /// Bytes requested.
        len: usize,
        /// The OS error.
        err: std::io::Error,
    },
    /// The file behind the fd is too small to be a segment.
    TooSmall {
        /// Its size.
        len: u64,
        /// The minimum.
        need: usize,
    },
    /// The creator did not mark the segment READY in time.
    NotReady {
        /// How long we waited.
        waited: Duration,
    },
    /// The header is not ours (magic, ABI) or is corrupt.
    Header(HeaderError),
    /// The segment's layout is not the one the attacher expects.
    LayoutMismatch {
        /// Hash the attacher expects.
        expected: u64,
        /// Hash stored in the segment.
        found: u64,
    },
    /// The layout is invalid.
    Layout(LayoutError),
    /// A worker index out of range.
    NoSuchWorker {
        /// The index passed in.
        worker: usize,
        /// Number of workers.
        n_workers: usize,
    },
    /// A ring could not be assembled.
    Ring(RingError),
    /// The weights store could not be assembled.
    Weights(WeightsError),
    /// A segment name that is not `/pycollect-…` without further slashes.
    BadName(String),
    /// The segment was made without step channels (`mailbox_bytes` 0).
    NoStepChannels,
}

impl fmt::Display for SegmentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Os { op, err } => write!(f, "{op} failed: {err}"),
            Self::Allocate { len, err } => write!(
                f,
                "cannot reserve {len} bytes of shared memory ({err}); /dev/shm or the memory \
                 cgroup is too small for this layout"
            ),
            Self::TooSmall { len, need } => {
                write!(
                    f,
                    "shared memory of {len} bytes is too small for a segment (need {need})"
                )
            }
            Self::NotReady { waited } => {
                write!(f, "segment was not marked ready within {waited:?}")
            }
            Self::Header(e) => write!(f, "{e}"),
            Self::LayoutMismatch { expected, found } => write!(
                f,
                "segment layout hash {found:#018x} differs from the expected {expected:#018x} \
                 (trainer and worker disagree on fields or sizes)"
            ),
            Self::Layout(e) => write!(f, "{e}"),
            Self::NoSuchWorker { worker, n_workers } => {
                write!(
                    f,
                    "worker {worker} does not exist (the segment has {n_workers} workers)"
                )
            }
            Self::Ring(e) => write!(f, "{e}"),
            Self::Weights(e) => write!(f, "{e}"),
            Self::BadName(n) => write!(f, "bad segment name {n:?}: expected /{SHM_PREFIX}…"),
            Self::NoStepChannels => f.write_str(
                "this segment has no step channels: it was created with mailbox_bytes=0",
            ),
        }
    }
}

impl std::error::Error for SegmentError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Os { err, .. } | Self::Allocate { err, .. } => Some(err),
            _ => None,
        }
    }
}

impl From<LayoutError> for SegmentError {
    fn from(e: LayoutError) -> Self {
        Self::Layout(e)
    }
}

fn os(op: &'static str) -> impl FnOnce(rustix::io::Errno) -> SegmentError {
    move |e| SegmentError::Os { op, err: e.into() }
}

/// Which kind of shared memory backs a new segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backing {
    /// memfd, falling back to a named segment if memfd_create is unavailable.
    #[default]
    Auto,
    /// memfd only.
    Memfd,
    /// Named `shm_open` segment only.
    Named,
}

/// Options for [`Segment::attach`].
#[derive(Debug, Clone, Copy)]
pub struct AttachOptions {
    /// How long to wait for the creator to mark the segment READY.
    pub ready_timeout: Duration,
    /// Reject the segment unless its layout hash equals this.
    pub expected_layout_hash: Option<u64>,
}

impl Default for AttachOptions {
    fn default() -> Self {
        Self {
            ready_timeout: Duration::from_secs(10),
            expected_layout_hash: None,
        }
    }
}

/// A mapped segment file. Dropping the last `Arc<Mapping>` unmaps it and closes the fd.
#[derive(Debug)]
pub struct Mapping {
    map: memmap2::MmapRaw,
    fd: OwnedFd,
}

impl Mapping {
    /// First byte of the mapping.
    pub fn base_ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True for an empty mapping (never the case for a segment).
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }
}

/// A collector's shared-memory segment (creator or attacher side).
#[derive(Debug)]
pub struct Segment {
    map: Arc<Mapping>,
    layout: Layout,
    creator_pid: u64,
    /// `Some` for a named segment until it is unlinked.
    name: Mutex<Option<String>>,
    is_creator: bool,
    /// The process that made this handle (by creating or attaching); see
    /// [`in_home_process`](Self::in_home_process).
    home: u32,
}

/// Distinguishes the named segments one process creates.
// clippy.toml exception: a process-local counter, never in shared memory and part of no
// cross-process protocol, so loom has nothing to model (and `segment` is not built under loom).
#[allow(clippy::disallowed_types)]
static NAME_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Start time of process `pid` in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and ')', so parse after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn map_fd(fd: &OwnedFd, len: usize) -> Result<memmap2::MmapRaw, SegmentError> {
    memmap2::MmapOptions::new()
        .len(len)
        .populate()
        .map_raw(fd.as_raw_fd())
        .map_err(|err| SegmentError::Os { op: "mmap", err })
}

fn size_file(fd: &OwnedFd, len: usize) -> Result<(), SegmentError> {
    rustix::fs::ftruncate(fd, len as u64).map_err(os("ftruncate"))?;
    // fallocate charges every page now: a full tmpfs / memcg fails here, not with SIGBUS.
    rustix::fs::fallocate(fd, rustix::fs::FallocateFlags::empty(), 0, len as u64)
        .map_err(|e| SegmentError::Allocate { len, err: e.into() })
}

impl Segment {
    /// Creates a memfd-backed segment (falling back to a named one) for `layout`.
    pub fn create(layout: Layout) -> Result<Self, SegmentError> {
        Self::create_with(layout, Backing::Auto)
    }

    /// Creates a segment with the given backing.
    pub fn create_with(layout: Layout, backing: Backing) -> Result<Self, SegmentError> {
        let len = layout.total_len();
        let (fd, name) = match backing {
            Backing::Memfd => (Self::new_memfd(len)?, None),
            Backing::Named => {
                let (fd, name) = Self::new_named(len)?;
                (fd, Some(name))
            }
            Backing::Auto => match Self::new_memfd(len) {
                Ok(fd) => (fd, None),
                Err(SegmentError::Os {
                    op: "memfd_create", ..
                }) => {
                    let (fd, name) = Self::new_named(len)?;
                    (fd, Some(name))
                }
                Err(e) => return Err(e),
            },
        };
        let map = Arc::new(Mapping {
            map: map_fd(&fd, len)?,
            fd,
        });
        let pid = std::process::id();
        let start = process_start_time(pid).unwrap_or(0);
        let seg = Self {
            map,
            layout,
            creator_pid: u64::from(pid),
            name: Mutex::new(name),
            is_creator: true,
            home: pid,
        };
        seg.initialise(start);
        Ok(seg)
    }

    fn new_memfd(len: usize) -> Result<OwnedFd, SegmentError> {
        use rustix::fs::{MemfdFlags, SealFlags};
        let fd =
            rustix::fs::memfd_create(MEMFD_NAME, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
                .map_err(os("memfd_create"))?;
        size_file(&fd, len)?;
        // Sealed: no party can shrink the file under another's mapping (SIGBUS) or grow it.
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
            .map_err(os("fcntl(F_ADD_SEALS)"))?;
        Ok(fd)
    }

    fn new_named(len: usize) -> Result<(OwnedFd, String), SegmentError> {
        use rustix::shm;
        let pid = std::process::id();
        let start = process_start_time(pid).unwrap_or(0);
        let n = NAME_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("/{SHM_PREFIX}{pid}-{start}-{n}");
        let fd = shm::open(
            name.as_str(),
            shm::OFlags::CREATE | shm::OFlags::EXCL | shm::OFlags::RDWR,
            shm::Mode::RUSR | shm::Mode::WUSR,
        )
        .map_err(os("shm_open"))?;
        if let Err(e) = size_file(&fd, len) {
            let _ = shm::unlink(name.as_str());
            return Err(e);
        }
        Ok((fd, name))
    }

    /// Writes the header and the non-zero initial words, then publishes READY last.
    fn initialise(&self, start_time: u64) {
        let base = self.map.base_ptr();
        // SAFETY: the mapping is at least total_len bytes (we sized it), page-aligned, and
        // nobody else has the fd yet, so the header is ours to write.
        unsafe { header::write_header(base, &self.layout, self.creator_pid, start_time) };
        let wm = self.weights_mem_raw();
        for r in 0..self.layout.n_workers() {
            wm.1.get(r).store(NO_PIN, Ordering::Relaxed);
        }
        // SAFETY: base is the mapped header (see above).
        unsafe { header::publish_ready(base) };
    }

    /// Attaches to a segment whose fd this process received (e.g. as fd 3 from the parent).
    ///
    /// The fd is duplicated (close-on-exec), so the caller may close its copy afterwards.
    /// Waits up to `opts.ready_timeout` for READY, then rejects a foreign magic, another ABI
    /// version or an unexpected layout hash, naming both values.
    pub fn attach(fd: BorrowedFd<'_>, opts: AttachOptions) -> Result<Self, SegmentError> {
        let fd = rustix::io::fcntl_dupfd_cloexec(fd, 0).map_err(os("dup"))?;
        Self::attach_owned(fd, None, opts)
    }

    /// Attaches to a named segment (the fallback), e.g. `/pycollect-123-456-0`.
    pub fn attach_named(name: &str, opts: AttachOptions) -> Result<Self, SegmentError> {
        let ok = name
            .strip_prefix('/')
            .is_some_and(|n| n.starts_with(SHM_PREFIX) && !n.contains('/'));
        if !ok {
            return Err(SegmentError::BadName(name.to_owned()));
        }
        let fd = rustix::shm::open(name, rustix::shm::OFlags::RDWR, rustix::shm::Mode::empty())
            .map_err(os("shm_open"))?;
        Self::attach_owned(fd, Some(name.to_owned()), opts)
    }

    fn attach_owned(
        fd: OwnedFd,
        name: Option<String>,
        opts: AttachOptions,
    ) -> Result<Self, SegmentError> {
        let need =
            crate::layout::HEADER_FIXED + crate::layout::MAX_FIELDS * crate::layout::FIELD_RECORD;
        let st = rustix::fs::fstat(&fd).map_err(os("fstat"))?;
        let len = st.st_size as u64;
        if len < need as u64 || len > isize::MAX as u64 {
            return Err(SegmentError::TooSmall { len, need });
        }
        let map = Arc::new(Mapping {
            map: map_fd(&fd, len as usize)?,
            fd,
        });
        let base = map.base_ptr();
        // SAFETY: the mapping is at least `need` bytes (checked) and page-aligned; `map`
        // outlives `state`, which is dropped at the end of this function.
        let state = unsafe { header::state(base) };
        let t0 = Instant::now();
        // SYNC POINT: Acquire pairs with the creator's Release of READY: every byte it wrote
        // during initialisation is visible once we see READY.
        while state.load(Ordering::Acquire) != STATE_READY {
            if t0.elapsed() >= opts.ready_timeout {
                return Err(SegmentError::NotReady {
                    waited: t0.elapsed(),
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // SAFETY: READY was acquired above and the mapping covers `len ≥ need` bytes.
        let decoded =
            unsafe { header::decode(base, len as usize) }.map_err(SegmentError::Header)?;
        if let Some(expected) = opts.expected_layout_hash {
            if expected != decoded.layout.hash() {
                return Err(SegmentError::LayoutMismatch {
                    expected,
                    found: decoded.layout.hash(),
                });
            }
        }
        Ok(Self {
            map,
            layout: decoded.layout,
            creator_pid: decoded.creator_pid,
            name: Mutex::new(name),
            is_creator: false,
            home: std::process::id(),
        })
    }

    /// The segment's fd (pass it to a child; clear close-on-exec on a dup for that).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.map.fd.as_fd()
    }

    /// First byte of the mapping (for building zero-copy views; keep [`mapping`] alive).
    ///
    /// [`mapping`]: Self::mapping
    pub fn base_ptr(&self) -> *mut u8 {
        self.map.base_ptr()
    }

    /// The mapping, to keep it alive from views that outlive this handle.
    pub fn mapping(&self) -> Arc<Mapping> {
        Arc::clone(&self.map)
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Pid of the process that created the segment.
    pub fn creator_pid(&self) -> u64 {
        self.creator_pid
    }

    /// True in the process that made this handle (created or attached the segment); false in
    /// a process forked from it, where [`shutdown`](Self::shutdown),
    /// [`unlink_name`](Self::unlink_name) and drop do nothing.
    pub fn in_home_process(&self) -> bool {
        std::process::id() == self.home
    }

    /// Name of a named segment that has not been unlinked yet.
    pub fn name(&self) -> Option<String> {
        self.name.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Removes the name of a named segment (call once every party attached). No-op for memfd,
    /// when already unlinked, and in a process forked from the one that made this handle.
    pub fn unlink_name(&self) -> Result<(), SegmentError> {
        if !self.in_home_process() {
            return Ok(());
        }
        let mut guard = self.name.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(name) = guard.take() {
            match rustix::shm::unlink(name.as_str()) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                Err(e) => {
                    return Err(SegmentError::Os {
                        op: "shm_unlink",
                        err: e.into(),
                    })
                }
            }
        }
        Ok(())
    }

    fn owner(&self) -> Owner {
        self.map.clone()
    }

    /// # Safety
    /// `off + size_of::<T>() ≤ total_len`, `off` aligned for T, and the bytes there belong to
    /// a `T` (all-zero bytes are a valid [`ShmSafe`] value).
    unsafe fn shared<T: ShmSafe>(&self, off: usize) -> SharedRef<T> {
        debug_assert!(off + std::mem::size_of::<T>() <= self.layout.total_len());
        // SAFETY: caller's contract; the base is non-null and the offset is in range.
        unsafe {
            let p = NonNull::new_unchecked(self.base_ptr().add(off).cast::<T>());
            SharedRef::from_raw(p, self.owner())
        }
    }

    /// # Safety
    /// As for `shared`, for `len` consecutive elements.
    unsafe fn shared_slice<T: ShmSafe>(&self, off: usize, len: usize) -> SharedSlice<T> {
        debug_assert!(off + len * std::mem::size_of::<T>() <= self.layout.total_len());
        // SAFETY: caller's contract.
        unsafe {
            let p = NonNull::new_unchecked(self.base_ptr().add(off).cast::<T>());
            SharedSlice::from_raw(p, len, self.owner())
        }
    }

    fn check_worker(&self, worker: usize) -> Result<(), SegmentError> {
        let n_workers = self.layout.n_workers();
        if worker >= n_workers {
            return Err(SegmentError::NoSuchWorker { worker, n_workers });
        }
        Ok(())
    }

    /// The "any worker produced" doorbell the trainer waits on.
    pub fn doorbell(&self) -> SharedRef<EventCount> {
        // SAFETY: the global control region starts with a 128-byte line holding the doorbell
        // (layout.rs), 4 KiB aligned and inside the segment; zero bytes are a valid EventCount.
        unsafe { self.shared(self.layout.global_ctl_offset()) }
    }

    fn shutdown_word(&self) -> SharedRef<AtomicU32> {
        // SAFETY: the second line of the global control region holds the shutdown flag.
        unsafe { self.shared(self.layout.global_ctl_offset() + LINE) }
    }

    /// The trainer's heartbeat word (`monotonic_ns` of its last beat); workers watch it.
    pub fn trainer_heartbeat(&self) -> SharedRef<AtomicU64> {
        // SAFETY: the third line of the global control region holds the trainer heartbeat.
        unsafe { self.shared(self.layout.global_ctl_offset() + 2 * LINE) }
    }

    /// The trainer's metrics (it adds to them; anyone reads them).
    pub fn trainer_metrics(&self) -> SharedRef<TrainerMetricsMem> {
        // SAFETY: the trainer metrics start TRAINER_METRICS_OFFSET bytes into the global
        // control region, which is GLOBAL_CTL_SIZE bytes, large enough (static assert in
        // metrics.rs); 128-byte aligned; zero bytes are valid metrics.
        unsafe { self.shared(self.layout.global_ctl_offset() + TRAINER_METRICS_OFFSET) }
    }

    /// Sets the shutdown flag and wakes every waiter (trainer, producers).
    ///
    /// Does nothing in a process forked from the one that made this handle: the workers are
    /// the parent's, and only the parent stops them.
    pub fn shutdown(&self) {
        if !self.in_home_process() {
            return;
        }
        // SYNC POINT: Release; waiters recheck the flag after the wake-ups below.
        self.shutdown_word().store(1, Ordering::Release);
        self.doorbell().notify_all();
        for w in 0..self.layout.n_workers() {
            if let Ok(ring) = self.data_ring(w) {
                ring.ctl().space_bell().notify_all();
            }
            if let Ok(channel) = self.step_channel(w) {
                channel.bell().notify_all();
            }
        }
    }

    /// True once [`shutdown`](Self::shutdown) was called by any party.
    pub fn is_shutdown(&self) -> bool {
        // SYNC POINT: Acquire pairs with shutdown's Release.
        self.shutdown_word().load(Ordering::Acquire) != 0
    }

    /// Worker `w`'s control block.
    pub fn worker(&self, w: usize) -> Result<WorkerCtl, SegmentError> {
        self.check_worker(w)?;
        let off = self.layout.worker_ctl_offset(w);
        // SAFETY: worker control blocks are WORKER_CTL_SIZE bytes at 4 KiB-aligned offsets
        // inside the segment; WorkerCtlMem fits its first 4 KiB (static assert in worker.rs)
        // and the error text follows at WORKER_ERROR_TEXT_OFFSET.
        unsafe {
            let mem = self.shared::<WorkerCtlMem>(off);
            let text = self.base_ptr().add(off + WORKER_ERROR_TEXT_OFFSET);
            Ok(WorkerCtl::from_raw(mem, text, w))
        }
    }

    /// Worker `w`'s data ring (its producer rings the global doorbell).
    pub fn data_ring(&self, w: usize) -> Result<RingMem, SegmentError> {
        self.check_worker(w)?;
        let off = self.layout.data_ring_offset(w);
        let slots = self.layout.params().slots_per_worker;
        // SAFETY: a data ring region is RingCtl (RING_CTL_SIZE bytes) followed by `slots`
        // 64-byte SlotHeaders, all inside the 4 KiB-aligned ring region (layout.rs).
        let (ctl, hdrs) = unsafe {
            (
                self.shared::<RingCtl>(off),
                self.shared_slice::<SlotHeader>(off + RING_CTL_SIZE, slots),
            )
        };
        RingMem::new(ctl, hdrs, self.doorbell()).map_err(SegmentError::Ring)
    }

    /// The producing end of worker `w`'s data ring, stamped with its current generation.
    pub fn producer(&self, w: usize) -> Result<Producer, SegmentError> {
        let gen = self.worker(w)?.generation();
        Ok(Producer::new(self.data_ring(w)?, gen))
    }

    /// The consuming end of worker `w`'s data ring.
    pub fn consumer(&self, w: usize) -> Result<Consumer, SegmentError> {
        Ok(Consumer::new(self.data_ring(w)?))
    }

    fn weights_mem_raw(
        &self,
    ) -> (
        SharedRef<Padded<AtomicU64>>,
        SharedSlice<Padded<AtomicU64>>,
        SharedSlice<AtomicU64>,
    ) {
        let off = self.layout.weights_ctl_offset();
        let nb = self.layout.params().weight_buffers;
        let lens_bytes = (8 * nb).div_ceil(LINE) * LINE;
        // SAFETY: the weights control region is one line for `latest`, `nb` u64 lengths
        // rounded up to whole lines, then one line per worker pin (layout.rs).
        unsafe {
            (
                self.shared(off),
                self.shared_slice(off + LINE + lens_bytes, self.layout.n_workers()),
                self.shared_slice(off + LINE, nb),
            )
        }
    }

    /// The weights store's shared parts.
    pub fn weights(&self) -> Result<WeightsMem<ShmBuffers>, SegmentError> {
        let (latest, pins, lens) = self.weights_mem_raw();
        let (off, stride) = self.layout.weights_buffers();
        let p = self.layout.params();
        // SAFETY: weight_buffers buffers of `stride ≥ capacity` bytes start at `off`, inside
        // the mapping kept alive by the owner.
        let bufs = unsafe {
            ShmBuffers::from_raw(
                self.base_ptr().add(off),
                stride,
                p.weight_buffers,
                p.weights_capacity,
                self.owner(),
            )
        };
        WeightsMem::new(latest, lens, pins, bufs).map_err(SegmentError::Weights)
    }

    /// Worker `w`'s step channel (its control words, mailbox and the global doorbell).
    pub fn step_channel(&self, w: usize) -> Result<StepChannelMem<ShmMailbox>, SegmentError> {
        self.check_worker(w)?;
        let (Some(off), Some((req, resp))) = (
            self.layout.step_channel_offset(w),
            self.layout.mailbox_offsets(w),
        ) else {
            return Err(SegmentError::NoStepChannels);
        };
        let capacity = self.layout.params().mailbox_bytes;
        // SAFETY: a step channel region is a StepCtl (STEP_CTL_SIZE bytes, 4 KiB aligned)
        // followed by two disjoint mailbox areas of `capacity` bytes at line boundaries, all
        // inside the segment (layout.rs); the owner keeps the mapping alive.
        let (ctl, mailbox) = unsafe {
            (
                self.shared::<StepCtl>(off),
                ShmMailbox::from_raw(
                    self.base_ptr().add(req),
                    self.base_ptr().add(resp),
                    capacity,
                    self.owner(),
                ),
            )
        };
        Ok(StepChannelMem::new(ctl, self.doorbell(), mailbox, w))
    }

    /// The trainer's end of worker `w`'s step channel.
    pub fn step_trainer(&self, w: usize) -> Result<StepTrainer<ShmMailbox>, SegmentError> {
        Ok(StepTrainer::new(self.step_channel(w)?))
    }

    /// The worker's end of worker `w`'s step channel, for the generation in its control block.
    pub fn step_worker(&self, w: usize) -> Result<StepWorker<ShmMailbox>, SegmentError> {
        let generation = self.worker(w)?.generation();
        Ok(StepWorker::new(self.step_channel(w)?, generation))
    }

    /// The single weights writer (the trainer).
    pub fn weights_writer(&self) -> Result<WeightsWriter<ShmBuffers>, SegmentError> {
        Ok(WeightsWriter::new(self.weights()?))
    }

    /// Worker `w`'s weights reader.
    pub fn weights_reader(&self, w: usize) -> Result<WeightsReader<ShmBuffers>, SegmentError> {
        self.check_worker(w)?;
        WeightsReader::new(self.weights()?, w).map_err(SegmentError::Weights)
    }

    /// Address of worker `worker`'s block of `field` in `slot` (see `Layout::field_offset`).
    pub fn field_ptr(&self, field: usize, slot: usize, worker: usize) -> *mut u8 {
        let off = self.layout.field_offset(field, slot, worker);
        // SAFETY: Layout places every field block inside total_len bytes.
        unsafe { self.base_ptr().add(off) }
    }

    /// Address and length of slot `slot` of `field` across all workers (one sync batch).
    pub fn field_block_ptr(&self, field: usize, slot: usize) -> (*mut u8, usize) {
        let (off, len) = self.layout.field_block(field, slot);
        // SAFETY: as for field_ptr.
        (unsafe { self.base_ptr().add(off) }, len)
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // A named segment must not outlive its creator; errors cannot be reported here. A
        // creator's copy in a forked child leaves the name alone (`unlink_name` checks).
        if self.is_creator {
            let _ = self.unlink_name();
        }
    }
}

/// Removes `/dev/shm/pycollect-<pid>-<start>-<n>` segments whose creator is gone (the pid
/// is dead or now belongs to a process with another start time). Returns the removed names.
pub fn sweep_stale_named_segments() -> std::io::Result<Vec<String>> {
    let mut removed = Vec::new();
    for entry in std::fs::read_dir("/dev/shm")? {
        let Ok(entry) = entry else { continue };
        let file = entry.file_name();
        let Some(file) = file.to_str() else { continue };
        let Some(rest) = file.strip_prefix(SHM_PREFIX) else {
            continue;
        };
        let mut parts = rest.split('-');
        let (Some(pid), Some(start)) = (parts.next(), parts.next()) else {
            continue;
        };
        let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
            continue;
        };
        let alive = process_start_time(pid).is_some_and(|s| s == start);
        if !alive && rustix::shm::unlink(format!("/{file}").as_str()).is_ok() {
            removed.push(file.to_owned());
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{DType, Field, LayoutParams};
    use crate::weights::WeightBuffers;

    fn layout(slots: usize) -> Layout {
        Layout::new(
            LayoutParams::new(
                vec![
                    Field::new("obs", DType::F32, &[3]),
                    Field::new("rew", DType::F32, &[]),
                ],
                2,
                4,
                8,
                slots,
            )
            .with_weights(100, 3),
        )
        .unwrap()
    }

    #[test]
    fn create_attach_and_hand_off() {
        let seg = Segment::create_with(layout(4), Backing::Memfd).unwrap();
        assert!(seg.name().is_none());
        let other = Segment::attach(seg.fd(), AttachOptions::default()).unwrap();
        assert_eq!(other.layout(), seg.layout());
        assert_ne!(other.base_ptr(), seg.base_ptr());
        let gen = seg.worker(1).unwrap().begin_generation();
        let mut p = other.producer(1).unwrap();
        assert_eq!(p.generation(), gen);
        let mut c = seg.consumer(1).unwrap();
        let obs = seg.layout().field_index("obs").unwrap();
        let claim = p.claim().unwrap();
        let dst = other.field_ptr(obs, claim.index, 1).cast::<f32>();
        // SAFETY: the claimed slot's block of 4*8*3 floats is ours until commit.
        unsafe { dst.write(1.5) };
        p.commit(claim).unwrap();
        let s = c.try_pop().unwrap().unwrap();
        // SAFETY: the popped slot is ours until release; the same memory via another mapping.
        let got = unsafe { seg.field_ptr(obs, s.index, 1).cast::<f32>().read() };
        assert_eq!(got, 1.5);
        assert_eq!(s.generation, gen);
        c.release(s.seq).unwrap();
    }

    #[test]
    fn wrong_expected_hash_is_rejected_naming_both() {
        let seg = Segment::create(layout(4)).unwrap();
        let opts = AttachOptions {
            expected_layout_hash: Some(0x1234),
            ..Default::default()
        };
        let e = Segment::attach(seg.fd(), opts).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("0x0000000000001234"), "{msg}");
        assert!(
            msg.contains(&format!("{:#018x}", seg.layout().hash())),
            "{msg}"
        );
    }

    #[test]
    fn foreign_fd_is_rejected() {
        let fd = rustix::fs::memfd_create("not-ours", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, 65536).unwrap();
        let opts = AttachOptions {
            ready_timeout: Duration::from_millis(20),
            ..Default::default()
        };
        assert!(matches!(
            Segment::attach(fd.as_fd(), opts),
            Err(SegmentError::NotReady { .. })
        ));
        rustix::fs::ftruncate(&fd, 100).unwrap();
        assert!(matches!(
            Segment::attach(fd.as_fd(), opts),
            Err(SegmentError::TooSmall { len: 100, .. })
        ));
    }

    #[test]
    fn sealed_against_resize() {
        let seg = Segment::create_with(layout(2), Backing::Memfd).unwrap();
        assert!(rustix::fs::ftruncate(seg.fd(), 4096).is_err());
        assert!(rustix::fs::ftruncate(seg.fd(), 1 << 30).is_err());
    }

    #[test]
    fn named_fallback_unlink_and_sweep() {
        let seg = Segment::create_with(layout(2), Backing::Named).unwrap();
        let name = seg.name().unwrap();
        let path = format!("/dev/shm{name}");
        assert!(std::path::Path::new(&path).exists());
        let mode = std::fs::metadata(&path).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.permissions().mode() & 0o777, 0o600);
        let other = Segment::attach_named(&name, AttachOptions::default()).unwrap();
        assert_eq!(other.layout().hash(), seg.layout().hash());
        seg.unlink_name().unwrap();
        assert!(!std::path::Path::new(&path).exists());
        assert!(matches!(
            Segment::attach_named("/etc-passwd", AttachOptions::default()),
            Err(SegmentError::BadName(_))
        ));
        // A live creator's name survives a sweep; a dead one's is removed.
        let live = Segment::create_with(layout(2), Backing::Named).unwrap();
        let dead = "pycollect-4194999-1-0"; // above any pid_max
        let fd = rustix::shm::open(
            format!("/{dead}").as_str(),
            rustix::shm::OFlags::CREATE | rustix::shm::OFlags::RDWR,
            rustix::shm::Mode::RUSR | rustix::shm::Mode::WUSR,
        )
        .unwrap();
        drop(fd);
        let removed = sweep_stale_named_segments().unwrap();
        assert!(removed.contains(&dead.to_owned()), "{removed:?}");
        let live_name = live.name().unwrap();
        assert!(std::path::Path::new(&format!("/dev/shm{live_name}")).exists());
        drop(live); // the creator unlinks on drop
        assert!(!std::path::Path::new(&format!("/dev/shm{live_name}")).exists());
    }

    #[test]
    fn weights_errors_and_shutdown() {
        let seg = Segment::create(layout(2)).unwrap();
        let att = Segment::attach(seg.fd(), AttachOptions::default()).unwrap();
        let mut w = seg.weights_writer().unwrap();
        let mut r = att.weights_reader(1).unwrap();
        let v = w.publish(&[7u8; 100]).unwrap();
        let mut dst = [0u8; 100];
        assert_eq!(r.read_latest(&mut dst).unwrap(), Some((v, 100)));
        assert_eq!(dst, [7u8; 100]);
        assert_eq!(r.mem().buffers().capacity(), 100);
        assert!(w.publish(&[0u8; 101]).is_err());

        let ctl = att.worker(0).unwrap();
        ctl.write_error("Traceback …\nValueError: boom");
        assert_eq!(
            seg.worker(0).unwrap().read_error().unwrap(),
            "Traceback …\nValueError: boom"
        );
        let long = "é".repeat(5000); // 10000 bytes, truncated at a char boundary
        assert_eq!(ctl.write_error(&long), 8192);
        assert!(matches!(
            seg.worker(2),
            Err(SegmentError::NoSuchWorker {
                worker: 2,
                n_workers: 2
            })
        ));

        assert!(!att.is_shutdown());
        seg.shutdown();
        assert!(att.is_shutdown());
    }

    #[test]
    fn step_channels_across_mappings_and_shutdown() {
        use crate::exchange::{wait_answers, CMD_STEP, STATUS_OK, STATUS_RESTARTED};
        use crate::wait::{WaitPolicy, Waited};
        let plain = Segment::create(layout(2)).unwrap();
        assert!(matches!(
            plain.step_channel(0),
            Err(SegmentError::NoStepChannels)
        ));
        let l = Layout::new(layout(2).params().clone().with_mailbox(100)).unwrap();
        let seg = Segment::create_with(l, Backing::Memfd).unwrap();
        let att = Segment::attach(seg.fd(), AttachOptions::default()).unwrap();
        assert_eq!(att.layout().params().mailbox_bytes, 100);
        assert!(matches!(
            seg.step_channel(2),
            Err(SegmentError::NoSuchWorker { worker: 2, .. })
        ));
        let ctl = seg.worker(1).unwrap();
        assert_eq!(ctl.begin_generation(), 1);
        let mut trainer = seg.step_trainer(1).unwrap();
        let mut worker = att.step_worker(1).unwrap();
        assert_eq!(worker.skip_pending().unwrap(), None);
        let seq = trainer
            .post(ctl.generation(), CMD_STEP, 9, &[5; 100])
            .unwrap();
        let policy = WaitPolicy::BLOCKING;
        let Waited::Ready(req) = worker.wait_request(&policy, None, || false).unwrap() else {
            panic!("no request");
        };
        assert_eq!((req.seq, req.arg, req.len), (seq, 9, 100));
        assert_eq!(worker.payload(&req).unwrap(), vec![5; 100]);
        worker.respond(STATUS_OK, b"done").unwrap();
        let ch = seg.step_channel(1).unwrap();
        let got = wait_answers(&[(&ch, seq)], false, &policy, None, || false).unwrap();
        assert_eq!(got, Waited::Ready(vec![0]));
        assert_eq!(trainer.response_bytes().unwrap().1, b"done");
        // Worker 0's channel is separate; a restarted worker 1 skips a request left pending.
        assert_eq!(att.step_channel(0).unwrap().requested(), 0);
        trainer.post(ctl.generation(), CMD_STEP, 0, b"").unwrap();
        assert_eq!(ctl.begin_generation(), 2);
        let mut restarted = att.step_worker(1).unwrap();
        assert_eq!(restarted.skip_pending().unwrap(), Some(seq + 1));
        let resp = trainer.response().unwrap();
        assert_eq!((resp.generation, resp.status), (2, STATUS_RESTARTED));
        // Shutdown ends a worker's wait (and rings its bell, so a sleeper wakes at once).
        let waiter = std::thread::spawn(move || {
            let outcome = restarted.wait_request(&policy, None, || att.is_shutdown());
            (outcome, att)
        });
        seg.shutdown();
        let (outcome, _att) = waiter.join().unwrap();
        assert_eq!(outcome.unwrap(), Waited::Aborted);
    }
}

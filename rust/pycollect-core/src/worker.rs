//! Per-worker control block: state, pid, generation, heartbeat, error text.
//!
//! Written by the worker (state, pid, heartbeat, error) and by the supervisor (generation,
//! resets). All words are atomics; the error text is plain bytes published by a Release store
//! of its length and read only after an Acquire load of it.

use crate::consts::ERROR_TEXT_CAP;
use crate::metrics::WorkerMetricsMem;
use crate::shared::SharedRef;
use crate::sync::{AtomicU32, AtomicU64, Ordering, Padded};

/// Lifecycle state of a worker, as the worker reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum WorkerState {
    /// No process attached yet (zeroed memory).
    Empty = 0,
    /// Process started, initialising (importing, building envs).
    Starting = 1,
    /// Ready and producing.
    Running = 2,
    /// Shutting down cleanly (3 is unused: it was a paused state that nothing set).
    Exiting = 4,
    /// Failed; the error text holds the reason.
    Failed = 5,
}

impl WorkerState {
    /// Decodes a stored value (`None` for garbage).
    pub fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::Empty,
            1 => Self::Starting,
            2 => Self::Running,
            4 => Self::Exiting,
            5 => Self::Failed,
            _ => return None,
        })
    }
}

/// The shared words of a worker control block (first 4 KiB; error text follows).
#[repr(C)]
#[derive(Debug, Default)]
pub struct WorkerCtlMem {
    /// state, pid (line 0).
    ident: Padded<Ident>,
    /// Heartbeat (line 1, written every step, so alone on its line).
    heartbeat: Padded<Heartbeat>,
    /// Bytes of valid error text (line 2).
    error_len: Padded<AtomicU32>,
    /// What the worker counts as it steps (lines 3 and up; see `metrics`).
    metrics: WorkerMetricsMem,
}

#[repr(C)]
#[derive(Debug, Default)]
struct Ident {
    state: AtomicU32,
    pid: AtomicU32,
    generation: AtomicU64,
}

#[repr(C)]
#[derive(Debug, Default)]
struct Heartbeat {
    ns: AtomicU64,
    count: AtomicU64,
}

// SAFETY: `#[repr(C)]`, Padded lines that hold only AtomicU32 and AtomicU64 words, and the
// metrics, which are ShmSafe themselves.
#[cfg(not(loom))]
unsafe impl crate::shared::ShmSafe for WorkerCtlMem {}

// The worker block's atomics fit before its error text.
#[cfg(not(loom))]
const _: () =
    assert!(std::mem::size_of::<WorkerCtlMem>() <= crate::consts::WORKER_ERROR_TEXT_OFFSET);

/// Current `CLOCK_MONOTONIC` time in nanoseconds (comparable across processes).
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Handle on one worker's control block.
#[derive(Debug, Clone)]
pub struct WorkerCtl {
    mem: SharedRef<WorkerCtlMem>,
    /// Start of the error text (`ERROR_TEXT_CAP` bytes), inside the same mapping.
    error_text: *mut u8,
    index: usize,
}

// SAFETY: the raw error-text pointer points into the mapping kept alive by `mem`'s owner; all
// access to it goes through methods that follow the length-publish protocol.
unsafe impl Send for WorkerCtl {}
// SAFETY: as for Send.
unsafe impl Sync for WorkerCtl {}

impl WorkerCtl {
    /// Wraps a control block.
    ///
    /// # Safety
    /// `error_text` must point to `ERROR_TEXT_CAP` bytes kept mapped by `mem`'s owner.
    pub unsafe fn from_raw(
        mem: SharedRef<WorkerCtlMem>,
        error_text: *mut u8,
        index: usize,
    ) -> Self {
        Self {
            mem,
            error_text,
            index,
        }
    }

    /// Worker index.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Reported state (`None` if the word holds garbage).
    pub fn state(&self) -> Option<WorkerState> {
        // SYNC POINT: Acquire pairs with set_state's Release.
        WorkerState::from_u32(self.mem.ident.state.load(Ordering::Acquire))
    }

    /// Reports a new state (Release: everything written before is visible with it).
    pub fn set_state(&self, s: WorkerState) {
        // SYNC POINT: Release publishes the worker's prior writes (e.g. error text).
        self.mem.ident.state.store(s as u32, Ordering::Release);
    }

    /// Reported pid (0: none).
    pub fn pid(&self) -> u32 {
        self.mem.ident.pid.load(Ordering::Relaxed)
    }

    /// Records the worker's pid.
    pub fn set_pid(&self, pid: u32) {
        self.mem.ident.pid.store(pid, Ordering::Relaxed);
    }

    /// Current generation (bumped by the supervisor on every restart).
    pub fn generation(&self) -> u64 {
        // SYNC POINT: Acquire pairs with the supervisor's Release in begin_generation.
        self.mem.ident.generation.load(Ordering::Acquire)
    }

    /// Supervisor: starts a new generation for a (re)started worker and returns it.
    ///
    /// Resets state, pid, heartbeat and error text. Call only while no process of this worker
    /// is alive.
    pub fn begin_generation(&self) -> u64 {
        let m = &self.mem;
        m.ident
            .state
            .store(WorkerState::Empty as u32, Ordering::Relaxed);
        m.ident.pid.store(0, Ordering::Relaxed);
        m.heartbeat.ns.store(0, Ordering::Relaxed);
        m.heartbeat.count.store(0, Ordering::Relaxed);
        m.error_len.store(0, Ordering::Relaxed);
        m.metrics.restart_clock(); // totals carry on across generations
                                   // SYNC POINT: Release publishes the resets above with the new generation.
        m.ident.generation.fetch_add(1, Ordering::Release) + 1
    }

    /// The worker's metrics: it adds to them, anyone reads them.
    pub fn metrics(&self) -> &WorkerMetricsMem {
        &self.mem.metrics
    }

    /// Worker: records a heartbeat at `now_ns` ([`monotonic_ns`]).
    #[inline]
    pub fn beat(&self, now_ns: u64) {
        self.mem.heartbeat.ns.store(now_ns, Ordering::Relaxed);
        self.mem.heartbeat.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Time of the last heartbeat (0: never) and the number of beats.
    pub fn last_heartbeat(&self) -> (u64, u64) {
        (
            self.mem.heartbeat.ns.load(Ordering::Relaxed),
            self.mem.heartbeat.count.load(Ordering::Relaxed),
        )
    }

    /// Worker: stores an error text (e.g. a traceback), truncated at a char boundary to
    /// `ERROR_TEXT_CAP` bytes. Returns the number of bytes stored.
    pub fn write_error(&self, text: &str) -> usize {
        let mut n = text.len().min(ERROR_TEXT_CAP);
        while !text.is_char_boundary(n) {
            n -= 1;
        }
        // Withdraw the old text first so a concurrent reader never pairs an old length with
        // new bytes.
        self.mem.error_len.store(0, Ordering::Relaxed);
        // SAFETY: error_text points to ERROR_TEXT_CAP bytes (from_raw) and n ≤ that; the
        // bytes are only read after an Acquire of a non-zero length we publish below.
        unsafe { std::ptr::copy(text.as_ptr(), self.error_text, n) };
        // SYNC POINT: Release publishes the text bytes with their length.
        self.mem.error_len.store(n as u32, Ordering::Release);
        n
    }

    /// Reads the stored error text (`None` if empty). Lossy for invalid UTF-8.
    pub fn read_error(&self) -> Option<String> {
        // SYNC POINT: Acquire pairs with write_error's Release.
        let n = (self.mem.error_len.load(Ordering::Acquire) as usize).min(ERROR_TEXT_CAP);
        if n == 0 {
            return None;
        }
        let mut buf = vec![0u8; n];
        // SAFETY: n ≤ ERROR_TEXT_CAP bytes inside the mapping; copied with ptr::copy, never
        // borrowed as a slice, because the worker process could still write them.
        unsafe { std::ptr::copy(self.error_text, buf.as_mut_ptr(), n) };
        Some(String::from_utf8_lossy(&buf).into_owned())
    }
}

//! The weights store as seen from Python.
//!
//! The trainer either publishes bytes (`publish`: one copy into a free buffer) or writes in
//! place (`reserve` a free buffer, fill its view, `commit`). A worker either copies the latest
//! weights out (`read_into`) or pins the latest buffer and reads it in place (`pin_latest`
//! returns a view that stays valid until `unpin` or the next `pin_latest`).
//!
//! A worker whose parameters are views of the pinned buffer (the `shared_memory` scheme's
//! `view` mode) maps the weights buffers read-only (`protect`): a policy that writes a
//! parameter in place then faults instead of changing the weights every worker shares, and
//! the fault handler installed here names what was written in the worker's error text.

use std::ptr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use pycollect_core::weights::{Pinned, Reservation, ShmBuffers};
use pycollect_core::{
    DType, Mapping, Segment as CoreSegment, Waited, WeightsReader as CoreReader,
    WeightsWriter as CoreWriter, WorkerCtl, WorkerState,
};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

use crate::blocking::non_negative_seconds;
use crate::errors::{config_error, py_err, transport_error};
use crate::view::SlotView;

/// A `len`-byte view of weights buffer `buf` of `segment`.
fn buffer_view(segment: &CoreSegment, buf: usize, len: usize, readonly: bool) -> SlotView {
    let (offset, stride) = segment.layout().weights_buffers();
    SlotView::new(
        segment.mapping(),
        offset + buf * stride,
        &[len],
        DType::U8,
        readonly,
        None,
    )
}

/// What `publish` and `reserve` got after waiting for a free buffer: the value, or the error
/// that says why there is none.
fn got_buffer<T>(waited: Waited<T>, timeout_s: f64) -> PyResult<T> {
    match waited {
        Waited::Ready(value) => Ok(value),
        Waited::TimedOut => Err(transport_error(format!(
            "could not publish weights within {timeout_s} s: every weights buffer is held by a reader"
        ))),
        Waited::Aborted => Err(transport_error(
            "could not publish weights: the collector is shutting down",
        )),
    }
}

/// Takes a buffer export of `object` (the argument `name`) and checks that it is one
/// contiguous run of bytes; returns the export (which keeps the memory alive and unmoved),
/// its address and its length.
pub(crate) fn byte_region(
    name: &str,
    object: &Bound<'_, PyAny>,
    writable: bool,
) -> PyResult<(PyBuffer<u8>, usize, usize)> {
    let buffer = PyBuffer::<u8>::get(object).map_err(|e| {
        config_error(format!(
            "{name} must be a bytes-like object of unsigned bytes (format 'B'): {e}"
        ))
    })?;
    if !buffer.is_c_contiguous() {
        return Err(config_error(format!("{name} must be C-contiguous")));
    }
    if writable && buffer.readonly() {
        return Err(config_error(format!("{name} is read-only")));
    }
    let (addr, len) = (buffer.buf_ptr() as usize, buffer.len_bytes());
    Ok((buffer, addr, len))
}

/// The writing end of the weights store (the trainer).
#[derive(Debug)]
#[pyclass(frozen, module = "pycollect._core")]
pub struct WeightsWriter {
    segment: Arc<CoreSegment>,
    inner: Mutex<WriterState>,
}

#[derive(Debug)]
struct WriterState {
    writer: CoreWriter<ShmBuffers>,
    /// The buffer `reserve` handed out, until `commit` or `abandon`.
    reserved: Option<Reservation>,
}

impl WeightsWriter {
    pub(crate) fn new(segment: &Arc<CoreSegment>) -> PyResult<Self> {
        let writer = segment.weights_writer().map_err(py_err)?;
        Ok(Self {
            segment: Arc::clone(segment),
            inner: Mutex::new(WriterState {
                writer,
                reserved: None,
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, WriterState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl WeightsWriter {
    /// Bytes one set of weights may take.
    #[getter]
    fn capacity(&self) -> usize {
        self.segment.layout().params().weights_capacity
    }

    /// Version of the latest published weights (0: none yet).
    #[getter]
    fn latest_version(&self) -> u64 {
        self.state().writer.mem().latest_version()
    }

    /// Number of buffers in the store.
    #[getter]
    fn buffers(&self) -> usize {
        self.segment.layout().params().weight_buffers
    }

    /// Copies `data` (bytes-like, format "B") into a free buffer with the GIL released and
    /// publishes it; returns the new version. Never waits on a dead reader longer than
    /// `timeout_s`.
    fn publish(&self, py: Python<'_>, data: &Bound<'_, PyAny>, timeout_s: f64) -> PyResult<u64> {
        let timeout = non_negative_seconds("timeout_s", timeout_s)?;
        let (_export, addr, len) = byte_region("data", data, false)?;
        // A timeout past the end of the clock waits as long as it takes.
        let deadline = Instant::now().checked_add(timeout);
        let segment = &self.segment;
        py.detach(move || {
            // SAFETY: `_export` (a held buffer export of `data`) keeps these `len` bytes alive and unmoved
            // for the whole call; we only read them.
            let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
            let mut state = self.state();
            if state.reserved.is_some() {
                return Err(config_error(
                    "a weights buffer is reserved: commit() or abandon() it before publish()",
                ));
            }
            let waited = state
                .writer
                .publish_wait(bytes, deadline, || segment.is_shutdown())
                .map_err(py_err)?;
            got_buffer(waited, timeout_s)
        })
    }

    /// Reserves a free buffer for `nbytes` bytes and returns a writable view of them; fill it,
    /// then `commit()` (or `abandon()`). Waits at most `timeout_s` for a buffer no reader pins.
    fn reserve(&self, py: Python<'_>, nbytes: usize, timeout_s: f64) -> PyResult<SlotView> {
        let timeout = non_negative_seconds("timeout_s", timeout_s)?;
        let deadline = Instant::now().checked_add(timeout);
        let segment = &self.segment;
        let buf = py.detach(move || {
            let mut state = self.state();
            if state.reserved.is_some() {
                return Err(config_error(
                    "a weights buffer is already reserved: commit() or abandon() it first",
                ));
            }
            let waited = state
                .writer
                .reserve_wait(nbytes, deadline, || segment.is_shutdown())
                .map_err(py_err)?;
            let res = got_buffer(waited, timeout_s)?;
            let buf = res.buf;
            state.reserved = Some(res);
            Ok(buf)
        })?;
        // The view outlives the reservation as an object; the caller must not write through
        // it after commit() or abandon() (the trainer's scheme drops it at once).
        Ok(buffer_view(&self.segment, buf, nbytes, false))
    }

    /// Publishes the reserved buffer; returns the new version.
    fn commit(&self) -> PyResult<u64> {
        let mut state = self.state();
        let res = state
            .reserved
            .take()
            .ok_or_else(|| config_error("commit(): no weights buffer is reserved"))?;
        Ok(state.writer.commit(res))
    }

    /// Gives the reserved buffer back unpublished (e.g. packing failed); no-op if none.
    fn abandon(&self) {
        self.state().reserved = None;
    }

    /// Writes zeros over every buffer, so that later publishes write into memory that is
    /// already allocated (no page faults); only before the first publish.
    fn populate(&self, py: Python<'_>) -> PyResult<()> {
        let state = self.state();
        if state.writer.mem().latest_version() != 0 || state.reserved.is_some() {
            return Err(config_error(
                "populate(): only before anything is reserved or published",
            ));
        }
        let bufs = state.writer.mem().buffers();
        let (count, capacity) = (
            self.segment.layout().params().weight_buffers,
            self.segment.layout().params().weights_capacity,
        );
        let ptrs: Vec<usize> = (0..count).map(|b| bufs.buffer_ptr(b) as usize).collect();
        py.detach(move || {
            for ptr in ptrs {
                // SAFETY: each buffer holds `capacity` bytes inside the mapping, which `state`'s
                // segment keeps alive; nothing was published, so no reader can pin (or read) a
                // buffer, and we hold the single writer's lock.
                unsafe { std::ptr::write_bytes(ptr as *mut u8, 0, capacity) };
            }
        });
        drop(state);
        Ok(())
    }
}

/// A worker's reading end of the weights store.
#[derive(Debug)]
#[pyclass(frozen, module = "pycollect._core")]
pub struct WeightsReader {
    segment: Arc<CoreSegment>,
    worker: usize,
    inner: Mutex<ReaderState>,
}

#[derive(Debug)]
struct ReaderState {
    reader: CoreReader<ShmBuffers>,
    /// The buffer `pin_latest` pinned, until `unpin` or the next `pin_latest`.
    pinned: Option<Pinned>,
}

impl WeightsReader {
    pub(crate) fn new(segment: &Arc<CoreSegment>, worker: usize) -> PyResult<Self> {
        let reader = segment.weights_reader(worker).map_err(py_err)?;
        Ok(Self {
            segment: Arc::clone(segment),
            worker,
            inner: Mutex::new(ReaderState {
                reader,
                pinned: None,
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, ReaderState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl WeightsReader {
    /// Version of the latest published weights (0: none yet).
    #[getter]
    fn latest_version(&self) -> u64 {
        self.state().reader.mem().latest_version()
    }

    /// The version this reader holds pinned (`None`: no pin).
    #[getter]
    fn pinned_version(&self) -> Option<u64> {
        self.state().pinned.as_ref().map(|p| p.version)
    }

    /// Copies the latest weights into the writable buffer `out` (GIL released); returns
    /// `(version, nbytes)`, or `None` if nothing was published yet. Not while a pin is held.
    fn read_into(&self, py: Python<'_>, out: &Bound<'_, PyAny>) -> PyResult<Option<(u64, usize)>> {
        let (_export, addr, len) = byte_region("out", out, true)?;
        py.detach(move || {
            let mut state = self.state();
            if state.pinned.is_some() {
                return Err(config_error(
                    "read_into(): this reader holds a pin; unpin() first",
                ));
            }
            // SAFETY: `_export` (a held writable buffer export of `out`) keeps these bytes alive and
            // unmoved for the call, and no one else writes them meanwhile by contract.
            let dst = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
            state.reader.read_latest(dst).map_err(py_err)
        })
    }

    /// Pins the latest weights and returns `(version, view)`, a read-only view of their bytes
    /// in shared memory; `None` if nothing was published yet. The writer never reuses the
    /// buffer while it is pinned: read it until `unpin()` or the next `pin_latest()` (which
    /// moves the pin; stop reading the old view first).
    fn pin_latest(&self) -> Option<(u64, SlotView)> {
        let mut state = self.state();
        // The reader has one pin word: pinning anew releases the old pin.
        let pinned = state.reader.pin_latest()?;
        let out = (
            pinned.version,
            buffer_view(&self.segment, pinned.buf, pinned.len, true),
        );
        state.pinned = Some(pinned);
        Some(out)
    }

    /// Releases the pin (no-op without one); the writer may reuse the buffer from now on.
    fn unpin(&self) {
        let mut state = self.state();
        if let Some(pinned) = state.pinned.take() {
            state.reader.unpin(pinned);
        }
    }

    /// Maps every weights buffer read-only in this process, for the rest of its life, and
    /// names what a write into them hits.
    ///
    /// A write into a buffer then raises SIGSEGV. The handler installed here (once per
    /// process) writes `message` of the entry `(start, end, message)` whose byte range of a
    /// buffer holds the faulting address (else `other`) into this reader's worker error text
    /// and onto stderr, marks the worker failed, restores the previous SIGSEGV disposition
    /// and returns: the write faults again and the previous disposition (the default: death
    /// by SIGSEGV, or e.g. Python's faulthandler) takes it. Other faults only restore the
    /// previous disposition. The mapping stays mapped for the rest of the process.
    fn protect(&self, entries: Vec<(usize, usize, String)>, other: String) -> PyResult<()> {
        let layout = self.segment.layout();
        let (offset, stride) = layout.weights_buffers();
        let len = stride * layout.params().weight_buffers;
        if len == 0 {
            return Ok(()); // a store without payload: nothing to protect
        }
        let control = self.segment.worker(self.worker).map_err(py_err)?;
        install_fault_guard(FaultGuard {
            start: self.segment.base_ptr() as usize + offset,
            end: self.segment.base_ptr() as usize + offset + len,
            stride,
            entries,
            other,
            control,
            _mapping: self.segment.mapping(),
            previous: None,
        })
    }
}

/// What the SIGSEGV handler needs to tell a write into the read-only weights from any other
/// fault. Built once per process by `WeightsReader.protect`, leaked, and from then on only
/// read: the handler may run at any moment for the rest of the process.
struct FaultGuard {
    /// The read-only range of this process's mapping: `start..end`.
    start: usize,
    end: usize,
    /// Distance between two buffers (the entries' ranges are offsets inside a buffer).
    stride: usize,
    /// `(start, end, message)`: the bytes of each named tensor inside a buffer.
    entries: Vec<(usize, usize, String)>,
    /// The message for a write anywhere else in the range (a buffer's header).
    other: String,
    /// This worker's control block, where the message goes.
    control: WorkerCtl,
    /// Keeps the protected range mapped (no other mapping can take its addresses).
    _mapping: Arc<Mapping>,
    /// The SIGSEGV disposition before ours, put back once ours has run.
    previous: Option<libc::sigaction>,
}

/// The installed fault guard, published for the SIGSEGV handler.
// clippy.toml exception: process-local (a pointer into this process's heap, never in shared
// memory); its publish/acquire pairs with this process's SIGSEGV handler, which loom does not
// model.
#[allow(clippy::disallowed_types)]
static FAULT_GUARD: std::sync::atomic::AtomicPtr<FaultGuard> =
    std::sync::atomic::AtomicPtr::new(ptr::null_mut());

/// Publishes `guard`, installs [`on_segv`] and makes `guard`'s range read-only.
fn install_fault_guard(mut guard: FaultGuard) -> PyResult<()> {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = usize::try_from(page).unwrap_or(0);
    if page == 0 || guard.start % page != 0 || guard.end % page != 0 {
        return Err(config_error(format!(
            "the weights buffers ({:#x}..{:#x}) are not aligned to this machine's {page}-byte pages, \
             so they cannot be mapped read-only; use SharedMemoryScheme(mode='copy')",
            guard.start, guard.end
        )));
    }
    // SYNC POINT: Acquire pairs with the Release store below (a second protect() sees the first).
    if !FAULT_GUARD.load(Ordering::Acquire).is_null() {
        return Err(config_error(
            "protect(): this process already protects a weights store",
        ));
    }
    // SAFETY: an all-zero sigaction is a valid value (SIG_DFL, empty mask, no flags).
    let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only reads the current one into `previous`.
    if unsafe { libc::sigaction(libc::SIGSEGV, ptr::null(), &mut previous) } != 0 {
        return Err(os_error("sigaction"));
    }
    guard.previous = Some(previous);
    let (start, len) = (guard.start, guard.end - guard.start);
    // SYNC POINT: Release publishes the complete guard before the handler is installed; it is
    // never freed or written again, so the handler only ever reads a complete guard.
    FAULT_GUARD.store(Box::into_raw(Box::new(guard)), Ordering::Release);
    // SAFETY: as above, a zeroed sigaction is valid; every field we rely on is set below.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_segv as extern "C" fn(_, _, _) as libc::sighandler_t;
    action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
    // SAFETY: sa_mask is a valid sigset_t owned by `action`.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: `action` is fully initialised and `on_segv` is async-signal-safe.
    if unsafe { libc::sigaction(libc::SIGSEGV, &action, ptr::null_mut()) } != 0 {
        return Err(os_error("sigaction"));
    }
    // SAFETY: `start..start + len` is page-aligned (checked) and lies inside the segment's
    // mapping, which the guard keeps mapped for the rest of the process. Nothing in this
    // process writes the weights buffers through this mapping (a reader only reads them).
    if unsafe { libc::mprotect(start as *mut libc::c_void, len, libc::PROT_READ) } != 0 {
        let error = os_error("mprotect");
        // SAFETY: `previous` was read by sigaction above and is a valid disposition.
        unsafe { libc::sigaction(libc::SIGSEGV, &previous, ptr::null_mut()) };
        return Err(error);
    }
    Ok(())
}

fn os_error(call: &str) -> PyErr {
    let error = std::io::Error::last_os_error();
    PyOSError::new_err(format!(
        "{call} failed while mapping the weights read-only: {error}"
    ))
}

/// Writes all of `bytes` to stderr, as far as it goes (async-signal-safe).
fn write_stderr(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a valid slice; write(2) is async-signal-safe.
        let n = unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
        let Ok(n) = usize::try_from(n) else { return };
        if n == 0 {
            return;
        }
        bytes = &bytes[n..];
    }
}

/// The SIGSEGV handler of a worker with read-only weights. Async-signal-safe: it reads the
/// immutable guard, copies a prepared message into shared memory with atomic stores, calls
/// write(2), sigaction(2) and raise(3), and allocates nothing.
extern "C" fn on_segv(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    // SYNC POINT: Acquire pairs with the Release store in install_fault_guard.
    let guard = FAULT_GUARD.load(Ordering::Acquire);
    // SAFETY: the guard was published complete before this handler was installed and is
    // never freed or written again.
    let Some(guard) = (unsafe { guard.as_ref() }) else {
        return;
    };
    // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo_t.
    let (code, address) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    // A positive code is a fault the kernel raised for an access; zero or negative codes are
    // signals a process sent (kill, tgkill, sigqueue), which carry no address.
    let fault = code > 0;
    if fault && (guard.start..guard.end).contains(&address) {
        let at = (address - guard.start) % guard.stride;
        let message = guard
            .entries
            .iter()
            .find(|(start, end, _)| (*start..*end).contains(&at))
            .map_or(guard.other.as_str(), |(_, _, message)| message.as_str());
        guard.control.write_error(message);
        guard.control.set_state(WorkerState::Failed);
        write_stderr(message.as_bytes());
        write_stderr(b"\n");
    }
    if let Some(previous) = &guard.previous {
        // SAFETY: `previous` is the disposition sigaction reported before ours was installed.
        unsafe { libc::sigaction(libc::SIGSEGV, previous, ptr::null_mut()) };
    }
    if !fault {
        // SAFETY: raise(3) is async-signal-safe; the signal stays pending until we return,
        // then meets the previous disposition.
        unsafe { libc::raise(signal) };
    }
    // Returning re-runs the faulting instruction, which now meets the previous disposition.
}

/// A 64-bit digest (XXH3) of `parts`, bytes-like objects hashed in order as one stream: what
/// a publish of weights and a worker that applied them each compute, to compare.
#[pyfunction]
pub(crate) fn weights_digest(py: Python<'_>, parts: Vec<Bound<'_, PyAny>>) -> PyResult<u64> {
    let regions = parts
        .iter()
        .enumerate()
        .map(|(i, part)| byte_region(&format!("part {i}"), part, false))
        .collect::<PyResult<Vec<_>>>()?;
    let spans: Vec<(usize, usize)> = regions.iter().map(|(_, addr, len)| (*addr, *len)).collect();
    // The exports in `regions` keep every span alive and unmoved while the GIL is released.
    Ok(py.detach(move || {
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        for (addr, len) in spans {
            // SAFETY: each span is a live, contiguous buffer export held by `regions` above.
            hasher.update(unsafe { std::slice::from_raw_parts(addr as *const u8, len) });
        }
        hasher.digest()
    }))
}

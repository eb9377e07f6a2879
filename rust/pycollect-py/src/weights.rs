//! The weights store as seen from Python.
//!
//! The trainer either publishes bytes (`publish`: one copy into a free buffer) or writes in
//! place (`reserve` a free buffer, fill its view, `commit`). A worker either copies the latest
//! weights out (`read_into`) or pins the latest buffer and reads it in place (`pin_latest`
//! returns a view that stays valid until `unpin` or the next `pin_latest`).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use pycollect_core::weights::{Pinned, Reservation, ShmBuffers};
use pycollect_core::{
    DType, Segment as CoreSegment, Waited, WeightsReader as CoreReader, WeightsWriter as CoreWriter,
};
use pyo3::buffer::PyBuffer;
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
fn byte_region(
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
}

//! The weights store as seen from Python: the trainer publishes bytes, workers copy them out.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pycollect_core::weights::ShmBuffers;
use pycollect_core::{
    Segment as CoreSegment, Waited, WeightsReader as CoreReader, WeightsWriter as CoreWriter,
};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::{py_err, TransportError};

/// Checks that a buffer is one contiguous run of bytes and returns (address, length).
fn byte_region(buffer: &PyBuffer<u8>, writable: bool) -> PyResult<(usize, usize)> {
    if !buffer.is_c_contiguous() {
        return Err(PyValueError::new_err("the buffer must be C-contiguous"));
    }
    if writable && buffer.readonly() {
        return Err(PyValueError::new_err("the output buffer is read-only"));
    }
    Ok((buffer.buf_ptr() as usize, buffer.len_bytes()))
}

/// The writing end of the weights store (the trainer).
#[derive(Debug)]
#[pyclass(frozen, module = "pycollect._core")]
pub struct WeightsWriter {
    segment: Arc<CoreSegment>,
    inner: Mutex<CoreWriter<ShmBuffers>>,
}

impl WeightsWriter {
    pub(crate) fn new(segment: &Arc<CoreSegment>) -> PyResult<Self> {
        Ok(Self {
            segment: Arc::clone(segment),
            inner: Mutex::new(segment.weights_writer().map_err(py_err)?),
        })
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
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .mem()
            .latest_version()
    }

    /// Copies `data` (bytes-like, format "B") into a free buffer with the GIL released and
    /// publishes it; returns the new version. Never waits on a dead reader longer than
    /// `timeout_s`.
    #[pyo3(signature = (data, timeout_s=5.0))]
    fn publish(&self, py: Python<'_>, data: PyBuffer<u8>, timeout_s: f64) -> PyResult<u64> {
        let (addr, len) = byte_region(&data, false)?;
        if !(timeout_s.is_finite() && timeout_s >= 0.0) {
            return Err(PyValueError::new_err(format!(
                "timeout_s must be a non-negative number, got {timeout_s}"
            )));
        }
        let deadline = Instant::now() + Duration::from_secs_f64(timeout_s);
        let segment = &self.segment;
        let inner = &self.inner;
        py.detach(move || {
            // SAFETY: `data` (a held buffer export) keeps these `len` bytes alive and unmoved
            // for the whole call; we only read them.
            let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
            let mut writer = inner.lock().unwrap_or_else(|e| e.into_inner());
            writer.publish_wait(bytes, Some(deadline), || segment.is_shutdown())
        })
        .map_err(py_err)
        .and_then(|waited| match waited {
            Waited::Ready(version) => Ok(version),
            Waited::TimedOut => Err(TransportError::new_err(format!(
                "could not publish weights within {timeout_s} s: every weights buffer is held by a reader"
            ))),
            Waited::Aborted => Err(TransportError::new_err("could not publish weights: the collector is shutting down")),
        })
    }
}

/// A worker's reading end of the weights store.
#[derive(Debug)]
#[pyclass(frozen, module = "pycollect._core")]
pub struct WeightsReader {
    inner: Mutex<CoreReader<ShmBuffers>>,
}

impl WeightsReader {
    pub(crate) fn new(segment: &Arc<CoreSegment>, worker: usize) -> PyResult<Self> {
        Ok(Self {
            inner: Mutex::new(segment.weights_reader(worker).map_err(py_err)?),
        })
    }
}

#[pymethods]
impl WeightsReader {
    /// Version of the latest published weights (0: none yet).
    #[getter]
    fn latest_version(&self) -> u64 {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .mem()
            .latest_version()
    }

    /// Copies the latest weights into the writable buffer `out` (GIL released); returns
    /// `(version, nbytes)`, or `None` if nothing was published yet.
    fn read_into(&self, py: Python<'_>, out: PyBuffer<u8>) -> PyResult<Option<(u64, usize)>> {
        let (addr, len) = byte_region(&out, true)?;
        let inner = &self.inner;
        py.detach(move || {
            // SAFETY: `out` (a held writable buffer export) keeps these bytes alive and
            // unmoved for the call, and no one else writes them meanwhile by contract.
            let dst = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
            inner
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .read_latest(dst)
        })
        .map_err(py_err)
    }
}

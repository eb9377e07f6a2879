//! The weights store as seen from Python: the trainer publishes bytes, workers copy them out.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use pycollect_core::weights::ShmBuffers;
use pycollect_core::{
    Segment as CoreSegment, Waited, WeightsReader as CoreReader, WeightsWriter as CoreWriter,
};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

use crate::blocking::non_negative_seconds;
use crate::errors::{config_error, py_err, transport_error};

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
    fn publish(&self, py: Python<'_>, data: &Bound<'_, PyAny>, timeout_s: f64) -> PyResult<u64> {
        let timeout = non_negative_seconds("timeout_s", timeout_s)?;
        let (_export, addr, len) = byte_region("data", data, false)?;
        // A timeout past the end of the clock waits as long as it takes.
        let deadline = Instant::now().checked_add(timeout);
        let segment = &self.segment;
        let inner = &self.inner;
        py.detach(move || {
            // SAFETY: `_export` (a held buffer export of `data`) keeps these `len` bytes alive and unmoved
            // for the whole call; we only read them.
            let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
            let mut writer = inner.lock().unwrap_or_else(|e| e.into_inner());
            writer.publish_wait(bytes, deadline, || segment.is_shutdown())
        })
        .map_err(py_err)
        .and_then(|waited| match waited {
            Waited::Ready(version) => Ok(version),
            Waited::TimedOut => Err(transport_error(format!(
                "could not publish weights within {timeout_s} s: every weights buffer is held by a reader"
            ))),
            Waited::Aborted => Err(transport_error(
                "could not publish weights: the collector is shutting down",
            )),
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
    fn read_into(&self, py: Python<'_>, out: &Bound<'_, PyAny>) -> PyResult<Option<(u64, usize)>> {
        let (_export, addr, len) = byte_region("out", out, true)?;
        let inner = &self.inner;
        py.detach(move || {
            // SAFETY: `_export` (a held writable buffer export of `out`) keeps these bytes alive and
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

//! Blocking without freezing Python: waits run with the GIL released, in slices, and Python
//! signal handlers run between slices so Ctrl-C interrupts a waiting trainer promptly.

use std::time::{Duration, Instant};

use pycollect_core::Waited;
use pyo3::prelude::*;

use crate::errors::{config_error, py_err, NativeError};

/// Longest time spent detached before signals are checked again.
pub(crate) const SLICE: Duration = Duration::from_millis(50);

/// What one slice of a wait produced.
pub(crate) enum Slice<T> {
    /// Finished (ready, or given up for a reason the caller encodes in `T`).
    Done(T),
    /// Nothing yet; the slice ran out.
    Continue,
}

/// Parses a `timeout_s` argument: `None` waits forever (still sliced), and so does a timeout
/// too long for the clock to represent.
pub(crate) fn deadline(timeout_s: Option<f64>) -> PyResult<Option<Instant>> {
    match timeout_s {
        None => Ok(None),
        Some(s) => match Duration::try_from_secs_f64(s) {
            Ok(timeout) => Ok(Instant::now().checked_add(timeout)),
            Err(_) => Err(config_error(format!(
                "timeout_s must be a non-negative number or None, got {s}"
            ))),
        },
    }
}

/// Parses a required duration argument `name` that may be zero (a timeout or grace period).
pub(crate) fn non_negative_seconds(name: &str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        config_error(format!(
            "{name} must be a non-negative number of seconds, got {value}"
        ))
    })
}

/// Calls `attempt(slice_deadline)` with the GIL released until it is done or `deadline`
/// passes, checking Python signals between slices. `Ok(None)` means the deadline passed.
pub(crate) fn wait_sliced<T: Send>(
    py: Python<'_>,
    deadline: Option<Instant>,
    mut attempt: impl FnMut(Instant) -> Slice<T> + Send,
) -> PyResult<Option<T>> {
    loop {
        let now = Instant::now();
        let slice_end = deadline.map_or(now + SLICE, |d| d.min(now + SLICE));
        if let Slice::Done(value) = py.detach(|| attempt(slice_end)) {
            return Ok(Some(value));
        }
        py.check_signals()?;
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
    }
}

/// Runs a core wait in slices: `Ready(v)` gives `Some(v)`; shutdown (`Aborted`) or the
/// deadline gives `None`; a core error becomes the matching Python exception.
pub(crate) fn wait_for<T: Send, E: NativeError + Send>(
    py: Python<'_>,
    deadline: Option<Instant>,
    mut attempt: impl FnMut(Instant) -> Result<Waited<T>, E> + Send,
) -> PyResult<Option<T>> {
    let got = wait_sliced(py, deadline, |slice_end| match attempt(slice_end) {
        Ok(Waited::Ready(value)) => Slice::Done(Ok(Some(value))),
        Ok(Waited::Aborted) => Slice::Done(Ok(None)),
        Ok(Waited::TimedOut) => Slice::Continue,
        Err(e) => Slice::Done(Err(e)),
    })?;
    got.map_or(Ok(None), |result| result.map_err(py_err))
}

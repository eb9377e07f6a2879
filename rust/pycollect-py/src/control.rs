//! A worker's control block.

use std::sync::Arc;

use pycollect_core::worker::monotonic_ns;
use pycollect_core::{Segment as CoreSegment, WorkerCtl, WorkerState};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::errors::{config_error, py_err};

pub(crate) fn state_name(state: Option<WorkerState>) -> &'static str {
    match state {
        Some(WorkerState::Empty) => "empty",
        Some(WorkerState::Starting) => "starting",
        Some(WorkerState::Running) => "running",
        Some(WorkerState::Exiting) => "exiting",
        Some(WorkerState::Failed) => "failed",
        None => "corrupt",
    }
}

fn parse_state(name: &str) -> PyResult<WorkerState> {
    Ok(match name {
        "empty" => WorkerState::Empty,
        "starting" => WorkerState::Starting,
        "running" => WorkerState::Running,
        "exiting" => WorkerState::Exiting,
        "failed" => WorkerState::Failed,
        other => {
            return Err(config_error(format!(
            "unknown worker state '{other}'; expected empty, starting, running, exiting or failed"
        )))
        }
    })
}

/// `text` with each lone surrogate (which UTF-8 cannot encode) replaced by one U+FFFD.
fn without_lone_surrogates(text: &Bound<'_, PyString>) -> PyResult<String> {
    let encoded = text.call_method1("encode", ("utf-16-le", "surrogatepass"))?;
    let bytes = encoded.cast::<PyBytes>()?.as_bytes();
    let units = bytes
        .chunks_exact(2)
        .map(|pair| u16::from_le_bytes([pair[0], pair[1]]));
    Ok(char::decode_utf16(units)
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect())
}

/// A worker's control block: state, pid, generation, heartbeat and error text.
#[derive(Debug)]
#[pyclass(frozen, module = "pycollect._core")]
pub struct WorkerControl {
    inner: WorkerCtl,
}

impl WorkerControl {
    /// The core's control block.
    pub(crate) fn inner(&self) -> &WorkerCtl {
        &self.inner
    }

    pub(crate) fn new(segment: &Arc<CoreSegment>, worker: usize) -> PyResult<Self> {
        Ok(Self {
            inner: segment.worker(worker).map_err(py_err)?,
        })
    }
}

#[pymethods]
impl WorkerControl {
    /// Worker index.
    #[getter]
    fn worker(&self) -> usize {
        self.inner.index()
    }

    /// Lifecycle state as the worker reports it.
    #[getter]
    fn get_state(&self) -> &'static str {
        state_name(self.inner.state())
    }

    #[setter]
    fn set_state(&self, state: &str) -> PyResult<()> {
        self.inner.set_state(parse_state(state)?);
        Ok(())
    }

    /// Process id the worker reported (0: none).
    #[getter]
    fn get_pid(&self) -> u32 {
        self.inner.pid()
    }

    #[setter]
    fn set_pid(&self, pid: u32) {
        self.inner.set_pid(pid);
    }

    /// Current generation (bumped at every restart).
    #[getter]
    fn generation(&self) -> u64 {
        self.inner.generation()
    }

    /// Starts a new generation: resets state, pid, heartbeat and error text. Call only while
    /// no process of this worker is alive. Returns the new generation.
    fn begin_generation(&self) -> u64 {
        self.inner.begin_generation()
    }

    /// Records a heartbeat now.
    fn beat(&self) {
        self.inner.beat(monotonic_ns());
    }

    /// Monotonic time of the last heartbeat in ns (0: never).
    #[getter]
    fn last_heartbeat_ns(&self) -> u64 {
        self.inner.last_heartbeat().0
    }

    /// Number of heartbeats so far in this generation.
    #[getter]
    fn heartbeats(&self) -> u64 {
        self.inner.last_heartbeat().1
    }

    /// Metering, once before stepping: how many frames one step makes.
    fn start_metering(&self, frames_per_step: u64) {
        self.inner.metrics().set_frames_per_step(frames_per_step);
    }

    /// A step begins now (ending the open one, if any); also a heartbeat. The time since the
    /// last step ended counts as waiting.
    fn begin_step(&self) {
        let now = monotonic_ns();
        self.inner.beat(now);
        self.inner.metrics().begin_step(now);
    }

    /// The open step's policy call ended now; the rest of the step is the envs'.
    fn policy_done(&self) {
        self.inner.metrics().policy_done(monotonic_ns());
    }

    /// The open step (if any) ends now.
    fn end_step(&self) {
        self.inner.metrics().end_step(monotonic_ns());
    }

    /// A rollout was handed over.
    fn rollout_done(&self) {
        self.inner.metrics().rollout_done();
    }

    /// A restarted generation starts: `replayed` if it restored its predecessor's state, else
    /// its predecessor's trajectories are cut.
    fn restarted(&self, replayed: bool) {
        self.inner.metrics().restarted(replayed);
    }

    /// The weights of `version`, whose bytes hash to `digest` (`weights_digest`), were applied.
    fn weights_applied(&self, version: u64, digest: u64) {
        self.inner.metrics().weights_applied(version, digest);
    }

    /// The version and digest of the weights applied last, as a consistent pair (`None`
    /// before the first update).
    fn applied_weights(&self) -> Option<(u64, u64)> {
        self.inner.metrics().applied_weights()
    }

    /// Stores an error text such as a traceback: its first `WORKER_ERROR_CAPACITY` bytes of
    /// UTF-8 at most, cut before a character that would not fit whole; lone surrogates are
    /// stored as U+FFFD. Returns the number of bytes stored.
    fn write_error(&self, text: &Bound<'_, PyString>) -> PyResult<usize> {
        Ok(match text.to_str() {
            Ok(utf8) => self.inner.write_error(utf8),
            Err(_) => self.inner.write_error(&without_lone_surrogates(text)?),
        })
    }

    /// The stored error text, if any (always valid UTF-8: bytes torn by a concurrent writer
    /// come back as U+FFFD).
    fn read_error(&self) -> Option<String> {
        self.inner.read_error()
    }
}

//! Reading a collection's metrics and workers: `Watch`, for `stats()` and `pycollect top`.

use std::os::fd::{BorrowedFd, RawFd};

use pycollect_core::metrics::{bucket_bounds, LATENCY_BUCKETS, TRAINER_TOTALS, WORKER_TOTALS};
use pycollect_core::worker::monotonic_ns;
use pycollect_core::Watch as CoreWatch;
use pyo3::prelude::*;

use crate::control::state_name;
use crate::errors::py_err;

/// Read-only access to a segment's control blocks: the trainer's and every worker's metrics,
/// the workers' states and heartbeats, their rings' fill. Nothing it does writes.
#[derive(Debug)]
#[pyclass(frozen, module = "pycollect._core")]
pub struct Watch {
    pub(crate) inner: CoreWatch,
}

#[pymethods]
impl Watch {
    /// Watch the segment behind `fd` (opened read-only; it is duplicated, so close yours).
    ///
    /// Maps only the segment's control part, read-only. Raises LayoutMismatchError for memory
    /// that is not a segment of this build, TransportError for one not ready yet.
    #[staticmethod]
    fn open(fd: RawFd) -> PyResult<Self> {
        // SAFETY: the caller passes an open fd it keeps open for this call; the core dups it.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        Ok(Self {
            inner: CoreWatch::open(borrowed).map_err(py_err)?,
        })
    }

    /// Pid of the process that made the segment (the trainer).
    #[getter]
    fn creator_pid(&self) -> u64 {
        self.inner.creator_pid()
    }

    /// The trainer's start time in clock ticks since boot (0 when watching one's own segment).
    #[getter]
    fn creator_start_time(&self) -> u64 {
        self.inner.creator_start_time()
    }

    #[getter]
    fn n_workers(&self) -> usize {
        self.inner.layout().n_workers()
    }

    #[getter]
    fn envs_per_worker(&self) -> usize {
        self.inner.layout().params().envs_per_worker
    }

    #[getter]
    fn slots_per_worker(&self) -> usize {
        self.inner.layout().params().slots_per_worker
    }

    /// Whether the workers serve steps (a vector env's) rather than rollouts.
    #[getter]
    fn serves_steps(&self) -> bool {
        self.inner.layout().has_step_channels()
    }

    /// The collection's description, as its trainer set it.
    fn description(&self) -> String {
        self.inner.trainer_metrics().description()
    }

    /// The trainer's totals, in the order of `TRAINER_TOTALS`.
    fn trainer_totals(&self) -> Vec<u64> {
        self.inner.trainer_metrics().read().to_vec()
    }

    /// Worker `worker`'s totals (in the order of `WORKER_TOTALS`) and its steps per latency
    /// bucket (see `latency_buckets`).
    fn worker_totals(&self, worker: usize) -> PyResult<(Vec<u64>, Vec<u64>)> {
        let reading = self.inner.worker(worker).map_err(py_err)?.metrics().read();
        Ok((reading.totals.to_vec(), reading.latency))
    }

    /// Worker `worker`'s state, pid (0: none), generation, last heartbeat (monotonic ns, 0:
    /// never) and rollouts waiting in its ring.
    fn worker_state(&self, worker: usize) -> PyResult<(&'static str, u32, u64, u64, u64)> {
        let control = self.inner.worker(worker).map_err(py_err)?;
        let filled = self.inner.ring_filled(worker).map_err(py_err)?;
        Ok((
            state_name(control.state()),
            control.pid(),
            control.generation(),
            control.last_heartbeat().0,
            filled,
        ))
    }
}

/// `[low, high)` nanoseconds of each step-latency bucket.
#[pyfunction]
pub(crate) fn latency_buckets() -> Vec<(u64, u64)> {
    (0..LATENCY_BUCKETS).map(bucket_bounds).collect()
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock heartbeats are stamped with.
#[pyfunction]
pub(crate) fn monotonic_time_ns() -> u64 {
    monotonic_ns()
}

/// Registers the constants: the names of the totals, in the order the readers return them.
pub(crate) fn add_constants(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("WORKER_TOTALS", WORKER_TOTALS.to_vec())?;
    m.add("TRAINER_TOTALS", TRAINER_TOTALS.to_vec())?;
    Ok(())
}

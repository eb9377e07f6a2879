//! `Supervisor`: the worker processes of one collector, started, watched, restarted and
//! stopped by a Rust thread that never touches Python.
//!
//! This binding ties the generic supervisor of `pycollect-core` to a segment: each launch
//! starts a new generation in the worker's control block (keeping the previous generation's
//! error text for the trainer), hands the segment to the child at a fixed descriptor, and the
//! heartbeat is the beat counter of the control block.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pycollect_core::supervisor::{
    Ending, Event, ExitReason, ExitRecord, ExitStatus, Restart, RestartPolicy,
    Supervisor as CoreSupervisor, SupervisorConfig, WorkerLaunch, WorkerStats,
};
use pycollect_core::Segment as CoreSegment;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::segment::Segment;

/// The descriptor number at which every worker finds the segment.
pub(crate) const SEGMENT_CHILD_FD: i32 = 4;

fn seconds(name: &str, value: f64) -> PyResult<Duration> {
    if value.is_finite() && value > 0.0 {
        Ok(Duration::from_secs_f64(value))
    } else {
        Err(PyValueError::new_err(format!(
            "{name} must be a positive number of seconds, got {value}"
        )))
    }
}

fn status_fields<'py>(d: &Bound<'py, PyDict>, status: ExitStatus) -> PyResult<()> {
    let (code, signal) = match status {
        ExitStatus::Code(c) => (Some(c), None),
        ExitStatus::Signal(s) => (None, Some(s)),
        ExitStatus::Unknown => (None, None),
    };
    d.set_item("code", code)?;
    d.set_item("signal", signal)
}

fn reason_name(reason: ExitReason) -> &'static str {
    match reason {
        ExitReason::Exit => "exit",
        ExitReason::Signal => "signal",
        ExitReason::Hung => "hung",
    }
}

fn exit_record<'py>(py: Python<'py>, record: &ExitRecord) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("generation", record.generation)?;
    d.set_item("pid", record.pid)?;
    d.set_item("reason", reason_name(record.reason))?;
    status_fields(&d, record.status)?;
    Ok(d)
}

/// Error texts kept per worker: a restart clears the control block's text, so the launcher
/// saves it first.
type SavedErrors = Arc<Mutex<Vec<Option<String>>>>;

/// Supervises the worker processes of one segment.
#[derive(Debug)]
#[pyclass(frozen, module = "pycollect._core")]
pub struct Supervisor {
    inner: CoreSupervisor,
    segment: Arc<CoreSegment>,
    saved_errors: SavedErrors,
}

impl Supervisor {
    fn error_of(&self, worker: usize) -> Option<String> {
        let current = self
            .segment
            .worker(worker)
            .ok()
            .and_then(|ctl| ctl.read_error());
        current
            .or_else(|| self.saved_errors.lock().unwrap_or_else(|e| e.into_inner())[worker].clone())
    }
}

#[pymethods]
impl Supervisor {
    /// Starts `segment.n_workers` processes running `argv`, in parallel.
    ///
    /// Each child gets `env`, `PYCOLLECT_WORKER`, `PYCOLLECT_GENERATION`,
    /// `PYCOLLECT_SEGMENT_FD` (the segment at fd 4), the lifeline, and every
    /// `(our_fd, child_fd)` of `pass_fds`.
    #[new]
    #[pyo3(signature = (
        segment, argv, *, env, pass_fds, restart="permanent", max_restarts=3, restart_window_s=60.0,
        backoff_initial_s=0.1, backoff_max_s=5.0, startup_timeout_s=120.0, heartbeat_timeout_s=30.0,
        check_interval_s=0.1, grace_s=2.0, term_timeout_s=2.0
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        segment: &Segment,
        argv: Vec<String>,
        env: HashMap<String, String>,
        pass_fds: Vec<(i32, i32)>,
        restart: &str,
        max_restarts: u32,
        restart_window_s: f64,
        backoff_initial_s: f64,
        backoff_max_s: f64,
        startup_timeout_s: f64,
        heartbeat_timeout_s: f64,
        check_interval_s: f64,
        grace_s: f64,
        term_timeout_s: f64,
    ) -> PyResult<Self> {
        let restart = match restart {
            "permanent" => Restart::Permanent,
            "transient" => Restart::Transient,
            "never" => Restart::Never,
            other => {
                return Err(PyValueError::new_err(format!(
                    "restart must be 'permanent', 'transient' or 'never', got '{other}'"
                )))
            }
        };
        let Some((program, args)) = argv.split_first() else {
            return Err(PyValueError::new_err("argv must name a program"));
        };
        let segment = Arc::clone(&segment.inner);
        let workers = segment.layout().n_workers();
        let config = SupervisorConfig {
            policy: RestartPolicy {
                restart,
                max_restarts,
                restart_window: seconds("restart_window_s", restart_window_s)?,
                backoff_initial: seconds("backoff_initial_s", backoff_initial_s)?,
                backoff_max: seconds("backoff_max_s", backoff_max_s)?,
            },
            startup_timeout: seconds("startup_timeout_s", startup_timeout_s)?,
            heartbeat_timeout: seconds("heartbeat_timeout_s", heartbeat_timeout_s)?,
            check_interval: seconds("check_interval_s", check_interval_s)?,
            grace: seconds("grace_s", grace_s)?,
            term_timeout: seconds("term_timeout_s", term_timeout_s)?,
            ..SupervisorConfig::new(workers)
        };
        config
            .validate()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        for &(ours, child) in &pass_fds {
            if ours < 0 || child == SEGMENT_CHILD_FD || child == config.lifeline_fd {
                return Err(PyValueError::new_err(format!(
                    "pass_fds entry ({ours}, {child}): fd numbers {} and {SEGMENT_CHILD_FD} are taken",
                    config.lifeline_fd
                )));
            }
        }

        let saved_errors: SavedErrors = Arc::new(Mutex::new(vec![None; workers]));
        let (program, args) = (program.clone(), args.to_vec());
        let launch_segment = Arc::clone(&segment);
        let launch_errors = Arc::clone(&saved_errors);
        let launcher = move |worker: usize, generation: u64| -> std::io::Result<WorkerLaunch> {
            let ctl = launch_segment
                .worker(worker)
                .map_err(std::io::Error::other)?;
            if let Some(text) = ctl.read_error() {
                launch_errors.lock().unwrap_or_else(|e| e.into_inner())[worker] = Some(text);
            }
            let started = ctl.begin_generation();
            debug_assert_eq!(
                started, generation,
                "control block and supervisor disagree on generation"
            );
            let mut launch = WorkerLaunch::new(&program).args(&args);
            launch.command_mut().envs(&env);
            let mut launch = launch
                .env("PYCOLLECT_WORKER", worker.to_string())
                .env("PYCOLLECT_GENERATION", generation.to_string())
                .env("PYCOLLECT_SEGMENT_FD", SEGMENT_CHILD_FD.to_string())
                .pass_fd(launch_segment.fd().try_clone_to_owned()?, SEGMENT_CHILD_FD);
            for &(ours, child) in &pass_fds {
                // SAFETY: the caller keeps these descriptors open for the supervisor's life
                // (documented); we only duplicate them here.
                let borrowed = unsafe { BorrowedFd::borrow_raw(ours) };
                launch = launch.pass_fd(borrowed.as_fd().try_clone_to_owned()?, child);
            }
            Ok(launch)
        };
        let beat_segment = Arc::clone(&segment);
        let heartbeat = move |worker: usize, _generation: u64| -> Option<u64> {
            let (_, count) = beat_segment.worker(worker).ok()?.last_heartbeat();
            (count > 0).then_some(count)
        };
        let stop_segment = Arc::clone(&segment);
        let inner = py
            .detach(move || {
                CoreSupervisor::builder(config)
                    .heartbeat(heartbeat)
                    .on_shutdown(move || stop_segment.shutdown())
                    .start(launcher)
            })
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start workers: {e}")))?;
        Ok(Self {
            inner,
            segment,
            saved_errors,
        })
    }

    /// Number of workers.
    #[getter]
    fn workers(&self) -> usize {
        self.inner.workers()
    }

    /// The next event (a dict with a ``"kind"``), waiting up to `timeout_s` (GIL released).
    #[pyo3(signature = (timeout_s=0.0))]
    fn next_event<'py>(
        &self,
        py: Python<'py>,
        timeout_s: f64,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let timeout = if timeout_s > 0.0 {
            seconds("timeout_s", timeout_s)?
        } else {
            Duration::ZERO
        };
        let event = if timeout.is_zero() {
            self.inner.try_next_event()
        } else {
            py.detach(|| self.inner.next_event(timeout))
        };
        event.map(|e| self.event_dict(py, e)).transpose()
    }

    /// One dict per worker: state, pid, generation, restarts, last exit and last error text.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.inner
            .stats()
            .iter()
            .map(|s| self.stats_dict(py, s))
            .collect()
    }

    /// The error text (type, message, traceback) the worker last wrote, if any.
    fn last_error(&self, worker: usize) -> PyResult<Option<String>> {
        if worker >= self.inner.workers() {
            return Err(PyValueError::new_err(format!(
                "worker {worker} out of range"
            )));
        }
        Ok(self.error_of(worker))
    }

    /// Stops every worker: shutdown flag and wake-up, `grace_s` to exit, SIGTERM to each
    /// process group, SIGKILL, reap. Idempotent. Returns how each worker ended.
    #[pyo3(signature = (grace_s=2.0))]
    fn shutdown<'py>(&self, py: Python<'py>, grace_s: f64) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let grace = if grace_s > 0.0 {
            seconds("grace_s", grace_s)?
        } else {
            Duration::ZERO
        };
        let report = py
            .detach(|| self.inner.shutdown(grace))
            .map_err(|e| PyRuntimeError::new_err(format!("worker shutdown failed: {e}")))?;
        report
            .workers
            .iter()
            .map(|w| {
                let d = PyDict::new(py);
                d.set_item("worker", w.worker)?;
                d.set_item("generation", w.generation)?;
                d.set_item("pid", w.pid)?;
                let (ending, status) = match w.ending {
                    Ending::NotRunning => ("not_running", None),
                    Ending::Exited(s) => ("exited", Some(s)),
                    Ending::Terminated(s) => ("terminated", Some(s)),
                    Ending::Killed(s) => ("killed", Some(s)),
                    Ending::Unreaped => ("unreaped", None),
                };
                d.set_item("ending", ending)?;
                if let Some(status) = status {
                    status_fields(&d, status)?;
                }
                Ok(d)
            })
            .collect()
    }
}

impl Supervisor {
    fn event_dict<'py>(&self, py: Python<'py>, event: Event) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        match event {
            Event::Started {
                worker,
                generation,
                pid,
            } => {
                d.set_item("kind", "started")?;
                d.set_item("worker", worker)?;
                d.set_item("generation", generation)?;
                d.set_item("pid", pid)?;
            }
            Event::Exited {
                worker,
                generation,
                pid,
                status,
                reason,
            } => {
                d.set_item("kind", "exited")?;
                d.set_item("worker", worker)?;
                d.set_item("generation", generation)?;
                d.set_item("pid", pid)?;
                d.set_item("reason", reason_name(reason))?;
                status_fields(&d, status)?;
            }
            Event::SpawnFailed {
                worker,
                generation,
                error,
            } => {
                d.set_item("kind", "spawn_failed")?;
                d.set_item("worker", worker)?;
                d.set_item("generation", generation)?;
                d.set_item("error", error)?;
            }
            Event::Restarting {
                worker,
                next_generation,
                after,
            } => {
                d.set_item("kind", "restarting")?;
                d.set_item("worker", worker)?;
                d.set_item("generation", next_generation)?;
                d.set_item("after_s", after.as_secs_f64())?;
            }
            Event::GaveUp {
                worker,
                generation,
                restarts,
            } => {
                d.set_item("kind", "gave_up")?;
                d.set_item("worker", worker)?;
                d.set_item("generation", generation)?;
                d.set_item("restarts", restarts)?;
            }
            other => {
                d.set_item("kind", "other")?;
                d.set_item("detail", format!("{other:?}"))?;
            }
        }
        Ok(d)
    }

    fn stats_dict<'py>(
        &self,
        py: Python<'py>,
        stats: &WorkerStats,
    ) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("worker", stats.worker)?;
        d.set_item("state", format!("{:?}", stats.state).to_lowercase())?;
        d.set_item("pid", stats.pid)?;
        d.set_item("generation", stats.generation)?;
        d.set_item("restarts", stats.restarts)?;
        let last_exit = stats
            .last_exit
            .as_ref()
            .map(|r| exit_record(py, r))
            .transpose()?;
        d.set_item("last_exit", last_exit)?;
        d.set_item("last_error", self.error_of(stats.worker))?;
        Ok(d)
    }
}

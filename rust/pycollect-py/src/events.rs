//! What the supervisor reports, as typed, immutable Python objects: [`WorkerEvent`] (one change
//! in a worker's life), [`WorkerStats`] (a snapshot of one worker), [`WorkerExit`] (how one
//! generation ended) and [`WorkerEnding`] (one row of the shutdown report).
//!
//! Kinds, states, reasons and endings are lowercase strings (typed as `Literal`s in the stub);
//! every core enum is matched variant by variant, so a new variant in the core fails to
//! compile here until it is given a name.

use pycollect_core::supervisor::{
    ChildState, Ending, Event, ExitReason, ExitRecord, ExitStatus, LaunchedBy, WorkerEnd,
    WorkerStats as CoreStats,
};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::errors::supervisor_error;

/// `code` and `signal` of an exit status (both `None` when the status was lost).
fn code_and_signal(status: ExitStatus) -> (Option<i32>, Option<i32>) {
    match status {
        ExitStatus::Code(c) => (Some(c), None),
        ExitStatus::Signal(s) => (None, Some(s)),
        ExitStatus::Unknown => (None, None),
    }
}

fn reason_name(reason: ExitReason) -> &'static str {
    match reason {
        ExitReason::Exit => "exit",
        ExitReason::Signal => "signal",
        ExitReason::Hung => "hung",
    }
}

fn state_name(state: ChildState) -> &'static str {
    match state {
        ChildState::Running => "running",
        ChildState::BackingOff => "backingoff",
        ChildState::Stopped => "stopped",
        ChildState::GaveUp => "gaveup",
        ChildState::ShutDown => "shutdown",
    }
}

/// Python's `repr` of a string (quotes and escapes as Python writes them).
fn py_repr(py: Python<'_>, text: &str) -> PyResult<String> {
    Ok(PyString::new(py, text).repr()?.to_string())
}

/// `repr` of an optional value whose `Display` is already Python syntax.
fn opt<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "None".to_owned(), |v| v.to_string())
}

/// How one generation of a worker ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[pyclass(frozen, get_all, eq, module = "pycollect._core")]
pub struct WorkerExit {
    /// The generation that ended.
    generation: u64,
    /// Its pid (already reaped).
    pid: u32,
    /// `"exit"` (it ended by itself), `"signal"` (killed by a signal the supervisor did not
    /// send) or `"hung"` (its heartbeat stopped; the supervisor killed it).
    reason: &'static str,
    /// Exit status, if it exited.
    code: Option<i32>,
    /// Signal number, if a signal ended it.
    signal: Option<i32>,
}

impl From<&ExitRecord> for WorkerExit {
    fn from(record: &ExitRecord) -> Self {
        let (code, signal) = code_and_signal(record.status);
        Self {
            generation: record.generation,
            pid: record.pid,
            reason: reason_name(record.reason),
            code,
            signal,
        }
    }
}

#[pymethods]
impl WorkerExit {
    fn __repr__(&self) -> String {
        format!(
            "WorkerExit(generation={}, pid={}, reason='{}', code={}, signal={})",
            self.generation,
            self.pid,
            self.reason,
            opt(self.code),
            opt(self.signal)
        )
    }
}

/// One change in a worker's life, in the order it happened.
#[derive(Clone, Debug, PartialEq)]
#[pyclass(frozen, get_all, eq, module = "pycollect._core")]
pub struct WorkerEvent {
    /// `"started"`, `"exited"`, `"spawn_failed"`, `"restarting"`, `"stopped"` (ended cleanly
    /// and not restarted: down for good) or `"gave_up"`.
    kind: &'static str,
    /// Worker index.
    worker: usize,
    /// The generation concerned (for `"restarting"`: the generation it will get; for
    /// `"stopped"`: the generation that ended).
    generation: u64,
    /// Pid of the process (`"started"`, `"exited"`).
    pid: Option<u32>,
    /// How the generation ended (`"exited"`).
    exit: Option<WorkerExit>,
    /// Why the spawn failed (`"spawn_failed"`).
    error: Option<String>,
    /// Backoff before the restart, in seconds (`"restarting"`).
    after_s: Option<f64>,
    /// Restarts of this worker in total (`"gave_up"`).
    restarts: Option<u32>,
    /// How the process was started (`"started"`): `"fork_server"` or `"exec"`.
    launched_by: Option<&'static str>,
    /// Why an exec'd worker was not forked by the configured fork server (`"started"`).
    fallback: Option<String>,
}

impl WorkerEvent {
    fn new(kind: &'static str, worker: usize, generation: u64) -> Self {
        Self {
            kind,
            worker,
            generation,
            pid: None,
            exit: None,
            error: None,
            after_s: None,
            restarts: None,
            launched_by: None,
            fallback: None,
        }
    }

    /// The Python object for a core event.
    pub(crate) fn from_core(event: Event) -> PyResult<Self> {
        Ok(match event {
            Event::Started {
                worker,
                generation,
                pid,
                launched_by,
            } => {
                let (by, fallback) = match launched_by {
                    LaunchedBy::ForkServer => ("fork_server", None),
                    LaunchedBy::ExecFallback { reason } => ("exec", Some(reason)),
                    _ => ("exec", None),
                };
                Self {
                    pid: Some(pid),
                    launched_by: Some(by),
                    fallback,
                    ..Self::new("started", worker, generation)
                }
            }
            Event::Exited {
                worker,
                generation,
                pid,
                status,
                reason,
            } => Self {
                pid: Some(pid),
                exit: Some(WorkerExit::from(&ExitRecord {
                    generation,
                    pid,
                    status,
                    reason,
                })),
                ..Self::new("exited", worker, generation)
            },
            Event::SpawnFailed {
                worker,
                generation,
                error,
            } => Self {
                error: Some(error),
                ..Self::new("spawn_failed", worker, generation)
            },
            Event::Restarting {
                worker,
                next_generation,
                after,
            } => Self {
                after_s: Some(after.as_secs_f64()),
                ..Self::new("restarting", worker, next_generation)
            },
            Event::Stopped { worker, generation } => Self::new("stopped", worker, generation),
            Event::GaveUp {
                worker,
                generation,
                restarts,
            } => Self {
                restarts: Some(restarts),
                ..Self::new("gave_up", worker, generation)
            },
            // `Event` is `#[non_exhaustive]`, so rustc requires this arm in another crate. An
            // event added to the core without a name here is not passed off as something else:
            // it is an error, so that the bindings get updated with the core.
            other => {
                return Err(supervisor_error(format!(
                    "the supervisor sent an event these bindings do not know: {other:?}"
                )))
            }
        })
    }
}

#[pymethods]
impl WorkerEvent {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let mut text = format!(
            "WorkerEvent(kind='{}', worker={}, generation={}",
            self.kind, self.worker, self.generation
        );
        if let Some(pid) = self.pid {
            text += &format!(", pid={pid}");
        }
        if let Some(exit) = &self.exit {
            text += &format!(", exit={}", exit.__repr__());
        }
        if let Some(error) = &self.error {
            text += &format!(", error={}", py_repr(py, error)?);
        }
        if let Some(after_s) = self.after_s {
            text += &format!(", after_s={after_s:?}");
        }
        if let Some(restarts) = self.restarts {
            text += &format!(", restarts={restarts}");
        }
        Ok(text + ")")
    }
}

/// A snapshot of one worker.
#[derive(Clone, Debug, PartialEq, Eq)]
#[pyclass(frozen, get_all, eq, module = "pycollect._core")]
pub struct WorkerStats {
    /// Worker index.
    worker: usize,
    /// `"running"`, `"backingoff"` (a restart is scheduled), `"stopped"` (ended cleanly, not
    /// restarted), `"gaveup"` (the restart policy gave up) or `"shutdown"`.
    state: &'static str,
    /// Pid of the running process, if one runs.
    pid: Option<u32>,
    /// Current (or last) generation; the first is 1.
    generation: u64,
    /// Restarts so far.
    restarts: u32,
    /// How the previous generation ended.
    last_exit: Option<WorkerExit>,
    /// The error text (type, message, traceback) the worker last wrote, if any.
    last_error: Option<String>,
}

impl WorkerStats {
    /// The Python object for a core snapshot and the worker's last error text.
    pub(crate) fn from_core(stats: &CoreStats, last_error: Option<String>) -> Self {
        Self {
            worker: stats.worker,
            state: state_name(stats.state),
            pid: stats.pid,
            generation: stats.generation,
            restarts: stats.restarts,
            last_exit: stats.last_exit.as_ref().map(WorkerExit::from),
            last_error,
        }
    }
}

#[pymethods]
impl WorkerStats {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let last_error = match &self.last_error {
            Some(text) => py_repr(py, text)?,
            None => "None".to_owned(),
        };
        Ok(format!(
            "WorkerStats(worker={}, state='{}', pid={}, generation={}, restarts={}, last_exit={}, last_error={})",
            self.worker,
            self.state,
            opt(self.pid),
            self.generation,
            self.restarts,
            opt(self.last_exit.as_ref().map(WorkerExit::__repr__)),
            last_error
        ))
    }
}

/// How one worker ended during `Supervisor.shutdown` (one row of its report).
#[derive(Clone, Debug, PartialEq, Eq)]
#[pyclass(frozen, get_all, eq, module = "pycollect._core")]
pub struct WorkerEnding {
    /// Worker index.
    worker: usize,
    /// Its last generation.
    generation: u64,
    /// Pid of the process that was running at shutdown, if any.
    pid: Option<u32>,
    /// `"not_running"`, `"exited"` (within the grace period), `"terminated"` (after SIGTERM),
    /// `"killed"` (after SIGKILL) or `"unreaped"` (still not reaped after SIGKILL).
    ending: &'static str,
    /// Exit status, if it exited.
    code: Option<i32>,
    /// Signal number, if a signal ended it.
    signal: Option<i32>,
}

impl From<&WorkerEnd> for WorkerEnding {
    fn from(end: &WorkerEnd) -> Self {
        let (ending, status) = match end.ending {
            Ending::NotRunning => ("not_running", None),
            Ending::Exited(s) => ("exited", Some(s)),
            Ending::Terminated(s) => ("terminated", Some(s)),
            Ending::Killed(s) => ("killed", Some(s)),
            Ending::Unreaped => ("unreaped", None),
        };
        let (code, signal) = status.map_or((None, None), code_and_signal);
        Self {
            worker: end.worker,
            generation: end.generation,
            pid: end.pid,
            ending,
            code,
            signal,
        }
    }
}

#[pymethods]
impl WorkerEnding {
    fn __repr__(&self) -> String {
        format!(
            "WorkerEnding(worker={}, generation={}, pid={}, ending='{}', code={}, signal={})",
            self.worker,
            self.generation,
            opt(self.pid),
            self.ending,
            opt(self.code),
            opt(self.signal)
        )
    }
}

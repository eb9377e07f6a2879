//! `Supervisor`: the worker processes of one collector, started, watched, restarted and
//! stopped by a Rust thread that never touches Python.
//!
//! This binding ties the generic supervisor of `pycollect-core` to a segment: each launch
//! starts a new generation in the worker's control block (keeping the previous generation's
//! error text for the trainer), hands the segment to the child at a fixed descriptor, and the
//! heartbeat is the beat counter of the control block. Once a generation has been reaped its
//! weights pin is cleared, so a reader killed mid-read never keeps a buffer from the writer.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, RawFd};

use pycollect_core::supervisor::guard_process_group as core_guard_process_group;
use pycollect_core::supervisor::set_parent_death_signal as core_set_parent_death_signal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pycollect_core::supervisor::{
    Restart, RestartPolicy, Supervisor as CoreSupervisor, SupervisorConfig, WorkerLaunch,
    DEFAULT_LIFELINE_FD, EVENT_CAPACITY, KILL_TIMEOUT, LIFELINE_FD_ENV,
};
use pycollect_core::Segment as CoreSegment;
use pyo3::prelude::*;

use crate::blocking::{non_negative_seconds, wait_sliced, Slice};
use crate::errors::{config_error, py_err, py_err_in, supervisor_error};
use crate::events::{WorkerEnding, WorkerEvent, WorkerStats};
use crate::segment::Segment;

// The contract a worker process is started with (exported to Python by `lib.rs`).

/// The descriptor number at which every worker finds its lifeline.
pub(crate) const CHILD_LIFELINE_FD: RawFd = DEFAULT_LIFELINE_FD;
/// The descriptor number at which every worker finds the segment.
pub(crate) const CHILD_SEGMENT_FD: RawFd = 4;
/// Environment variable holding the worker's index.
pub(crate) const ENV_WORKER: &str = "PYCOLLECT_WORKER";
/// Environment variable holding the worker's generation (1 for the first start).
pub(crate) const ENV_GENERATION: &str = "PYCOLLECT_GENERATION";
/// Environment variable holding the segment's descriptor number ([`CHILD_SEGMENT_FD`]).
pub(crate) const ENV_SEGMENT_FD: &str = "PYCOLLECT_SEGMENT_FD";
/// Environment variable holding the lifeline's descriptor number ([`CHILD_LIFELINE_FD`]).
pub(crate) const ENV_LIFELINE_FD: &str = LIFELINE_FD_ENV;

fn positive_seconds(name: &str, value: f64) -> PyResult<Duration> {
    match Duration::try_from_secs_f64(value) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(config_error(format!(
            "{name} must be a positive number of seconds, got {value}"
        ))),
    }
}

/// A `pycollect.SupervisionConfig`, read attribute by attribute (any object with these
/// attributes will do). Python's config is the one home of these settings and their defaults:
/// nothing here has a default, so the two languages cannot disagree.
#[derive(FromPyObject)]
struct Supervision {
    restart: String,
    max_restarts: u32,
    restart_window_s: f64,
    backoff_initial_s: f64,
    backoff_max_s: f64,
    startup_timeout_s: f64,
    heartbeat_timeout_s: f64,
    check_interval_s: f64,
    shutdown_grace_s: f64,
    term_timeout_s: f64,
}

impl Supervision {
    /// The core's settings for `workers` workers; an error names the bad attribute and value.
    fn into_config(self, workers: usize) -> PyResult<SupervisorConfig> {
        let restart = match self.restart.as_str() {
            "permanent" => Restart::Permanent,
            "transient" => Restart::Transient,
            "never" => Restart::Never,
            other => {
                return Err(config_error(format!(
                    "restart must be 'permanent', 'transient' or 'never', got '{other}'"
                )))
            }
        };
        let config = SupervisorConfig {
            workers,
            policy: RestartPolicy {
                restart,
                max_restarts: self.max_restarts,
                restart_window: positive_seconds("restart_window_s", self.restart_window_s)?,
                backoff_initial: positive_seconds("backoff_initial_s", self.backoff_initial_s)?,
                backoff_max: positive_seconds("backoff_max_s", self.backoff_max_s)?,
            },
            startup_timeout: positive_seconds("startup_timeout_s", self.startup_timeout_s)?,
            heartbeat_timeout: positive_seconds("heartbeat_timeout_s", self.heartbeat_timeout_s)?,
            check_interval: positive_seconds("check_interval_s", self.check_interval_s)?,
            grace: positive_seconds("shutdown_grace_s", self.shutdown_grace_s)?,
            term_timeout: positive_seconds("term_timeout_s", self.term_timeout_s)?,
            kill_timeout: KILL_TIMEOUT,
            lifeline_fd: CHILD_LIFELINE_FD,
            event_capacity: EVENT_CAPACITY,
        };
        config.validate().map_err(py_err)?;
        Ok(config)
    }
}

/// One value of [`Supervisor::supervision`]: a name, a count or seconds.
#[derive(IntoPyObject)]
enum SettingValue {
    Text(&'static str),
    Count(u32),
    Seconds(f64),
}

impl From<Duration> for SettingValue {
    fn from(duration: Duration) -> Self {
        Self::Seconds(duration.as_secs_f64())
    }
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
    /// The settings it runs with, reported back by the `supervision` getter.
    config: SupervisorConfig,
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
    /// `PYCOLLECT_SEGMENT_FD` (the segment at fd 4), the lifeline (`PYCOLLECT_LIFELINE_FD`,
    /// fd 3), and every `(our_fd, child_fd)` of `pass_fds`. `supervision` is a
    /// `pycollect.SupervisionConfig`: its values are taken as they are (their defaults live
    /// there only) and checked again here.
    ///
    /// `fork_server`: a connected `SOCK_SEQPACKET` socket to a fork server (pycollect's
    /// `python -m pycollect.worker --fork-server`), duplicated here (the caller keeps and
    /// closes its own). Workers are then forked by that server, as children of this process,
    /// and `argv` is only used by the fork+exec fallback.
    #[new]
    #[pyo3(signature = (segment, argv, *, env, pass_fds, supervision, fork_server = None))]
    fn new(
        py: Python<'_>,
        segment: &Segment,
        argv: Vec<String>,
        env: HashMap<String, String>,
        pass_fds: Vec<(i32, i32)>,
        supervision: Supervision,
        fork_server: Option<RawFd>,
    ) -> PyResult<Self> {
        let Some((program, args)) = argv.split_first() else {
            return Err(config_error("argv must name a program"));
        };
        let segment = Arc::clone(&segment.inner);
        let config = supervision.into_config(segment.layout().n_workers())?;
        for &(ours, child) in &pass_fds {
            if ours < 0 {
                return Err(config_error(format!(
                    "pass_fds entry ({ours}, {child}): {ours} is not a file descriptor"
                )));
            }
            if child == CHILD_SEGMENT_FD || child == CHILD_LIFELINE_FD {
                return Err(config_error(format!(
                    "pass_fds entry ({ours}, {child}): fd numbers {CHILD_LIFELINE_FD} and \
                     {CHILD_SEGMENT_FD} are taken"
                )));
            }
        }

        let saved_errors: SavedErrors = Arc::new(Mutex::new(vec![None; config.workers]));
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
                .env(ENV_WORKER, worker.to_string())
                .env(ENV_GENERATION, generation.to_string())
                .env(ENV_SEGMENT_FD, CHILD_SEGMENT_FD.to_string())
                .pass_fd(launch_segment.fd().try_clone_to_owned()?, CHILD_SEGMENT_FD);
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
        let mut builder = CoreSupervisor::builder(config.clone())
            .heartbeat(heartbeat)
            .on_shutdown(move || stop_segment.shutdown());
        if let Ok(weights) = segment.weights() {
            // Runs once the generation is reaped, before its restart: the worker's only
            // process is gone and the next is not started yet, so the pin is a dead one.
            builder = builder.on_exit(move |worker, _generation| {
                let _ = weights.clear_pin(worker);
            });
        }
        if let Some(fd) = fork_server {
            if fd < 0 {
                return Err(config_error(format!(
                    "fork_server: {fd} is not a file descriptor"
                )));
            }
            // SAFETY: the caller passes an fd it holds open for the duration of this call
            // (documented); we only duplicate it and own the duplicate.
            let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
            let owned = borrowed
                .try_clone_to_owned()
                .map_err(|e| config_error(format!("fork_server: cannot duplicate fd {fd}: {e}")))?;
            builder = builder.fork_server(owned);
        }
        let inner = py
            .detach(move || builder.start(launcher))
            .map_err(|e| py_err_in("cannot start workers", e))?;
        Ok(Self {
            inner,
            segment,
            saved_errors,
            config,
        })
    }

    /// Number of workers.
    #[getter]
    fn workers(&self) -> usize {
        self.inner.workers()
    }

    /// The supervision settings this supervisor runs with, under their Python names, as
    /// read from `supervision` (so a test can see each one arrive unchanged).
    #[getter]
    fn supervision(&self) -> HashMap<&'static str, SettingValue> {
        let c = &self.config;
        let restart = match c.policy.restart {
            Restart::Permanent => "permanent",
            Restart::Transient => "transient",
            Restart::Never => "never",
        };
        HashMap::from([
            ("restart", SettingValue::Text(restart)),
            ("max_restarts", SettingValue::Count(c.policy.max_restarts)),
            ("restart_window_s", c.policy.restart_window.into()),
            ("backoff_initial_s", c.policy.backoff_initial.into()),
            ("backoff_max_s", c.policy.backoff_max.into()),
            ("startup_timeout_s", c.startup_timeout.into()),
            ("heartbeat_timeout_s", c.heartbeat_timeout.into()),
            ("check_interval_s", c.check_interval.into()),
            ("shutdown_grace_s", c.grace.into()),
            ("term_timeout_s", c.term_timeout.into()),
        ])
    }

    /// The next event, waiting up to `timeout_s` (0: do not wait) with the GIL released.
    ///
    /// Returns `None` when no event came in time, or once the supervisor has shut down and
    /// every event was taken.
    fn next_event(&self, py: Python<'_>, timeout_s: f64) -> PyResult<Option<WorkerEvent>> {
        let timeout = non_negative_seconds("timeout_s", timeout_s)?;
        let event = if timeout.is_zero() {
            self.inner.try_next_event()
        } else {
            let inner = &self.inner;
            // A timeout past the end of the clock waits as long as it takes.
            let deadline = Instant::now().checked_add(timeout);
            wait_sliced(py, deadline, |slice_end| {
                match inner.next_event(slice_end.saturating_duration_since(Instant::now())) {
                    Some(event) => Slice::Done(Some(event)),
                    // Empty before the slice ran out: the queue is closed for good.
                    None if Instant::now() < slice_end => Slice::Done(None),
                    None => Slice::Continue,
                }
            })?
            .flatten()
        };
        event.map(WorkerEvent::from_core).transpose()
    }

    /// One snapshot per worker: state, pid, generation, restarts, last exit and last error.
    fn stats(&self) -> Vec<WorkerStats> {
        self.inner
            .stats()
            .iter()
            .map(|s| WorkerStats::from_core(s, self.error_of(s.worker)))
            .collect()
    }

    /// The error text (type, message, traceback) the worker last wrote, if any.
    fn last_error(&self, worker: usize) -> PyResult<Option<String>> {
        let workers = self.inner.workers();
        if worker >= workers {
            return Err(config_error(format!(
                "worker {worker} out of range: the supervisor has {workers} workers"
            )));
        }
        Ok(self.error_of(worker))
    }

    /// Stops every worker: shutdown flag and wake-up, `grace_s` to exit, SIGTERM to each
    /// process group, SIGKILL, reap. Idempotent. Returns how each worker ended.
    fn shutdown(&self, py: Python<'_>, grace_s: f64) -> PyResult<Vec<WorkerEnding>> {
        let grace = non_negative_seconds("grace_s", grace_s)?;
        let report = py
            .detach(|| self.inner.shutdown(grace))
            .map_err(|e| py_err_in("worker shutdown failed", e))?;
        Ok(report.workers.iter().map(WorkerEnding::from).collect())
    }
}

/// Arms `PR_SET_PDEATHSIG` with `signum` for this process: the kernel sends it when the
/// thread that is this process's parent exits. For a worker forked by the fork server, once
/// it has been reparented to the trainer.
#[pyfunction]
pub fn set_parent_death_signal(signum: i32) -> PyResult<()> {
    core_set_parent_death_signal(signum)
        .map_err(|e| config_error(format!("prctl(PR_SET_PDEATHSIG, {signum}): {e}")))
}

/// Forks the guardian of this worker's process group (see `group_guard.rs` in the core
/// crate): when this process ends, however it ends, the guardian SIGKILLs the group, so what
/// the worker's envs started in it cannot outlive the worker. Returns the guardian's pid, or
/// `None` where this process does not lead its own group (it is not a worker).
#[pyfunction]
pub fn guard_process_group() -> PyResult<Option<i32>> {
    core_guard_process_group()
        .map(|pid| pid.map(|pid| pid.as_raw_pid()))
        .map_err(|e| supervisor_error(format!("could not start the process group's guardian: {e}")))
}

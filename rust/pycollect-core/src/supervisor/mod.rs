//! Worker supervisor: spawns worker processes, notices when they die or hang, restarts them
//! by policy, and stops them all (and everything they started) on shutdown.
//!
//! It knows nothing about the shared-memory transport. The caller says what to run
//! (a closure: worker index and generation in, [`WorkerLaunch`] out; see [`Launcher`]) and,
//! optionally, how to read a worker's heartbeat (see [`HeartbeatSource`]).
//!
//! * Spawning: fresh processes via [`std::process::Command`] (fork+exec, never a bare fork of
//!   the caller), or, with [`SupervisorBuilder::fork_server`], forked by a separate
//!   single-threaded server process and reparented to the caller (see `forkserver.rs`),
//!   all from one long-lived supervisor thread, because `PR_SET_PDEATHSIG` fires when the
//!   forking *thread* exits. Each child gets its own process group, the parent-death signal
//!   (checked against `getppid()`), a lifeline pipe and the fds it asked for; see [`spawn`]
//!   for the child's side of the contract.
//! * Exit detection: one pidfd per child, polled; reaped with `waitid(P_PIDFD)`. Never
//!   `waitpid(-1)`, and nothing is signalled by raw pid after its reap.
//! * Hangs: a heartbeat that does not change for `heartbeat_timeout` (`startup_timeout`
//!   before the first beat) counts as a crash with reason [`ExitReason::Hung`].
//! * Restarts: [`RestartPolicy`] (permanent / transient / never, at most `max_restarts` in a
//!   sliding `restart_window`, exponential backoff), one_for_one. Generations start at 1 and
//!   go up by one per restart (so they match `WorkerCtl::begin_generation` when the launcher
//!   calls it once per launch).
//! * Reaped generations: the caller's [`SupervisorBuilder::on_exit`] hook runs once per
//!   reaped child, before its end is reported or acted on.
//! * Forks: only the process that started the supervisor can stop or tear it down; in a
//!   process forked from it (without exec) `shutdown` returns an empty report and drop does
//!   nothing.
//! * Teardown ([`Supervisor::shutdown`], also run on drop), on the supervisor thread:
//!   `on_shutdown` callback → cancel pending restarts → close the lifelines → wait `grace` →
//!   SIGTERM each process group → wait `term_timeout` → SIGKILL each process group → wait
//!   `kill_timeout`. Every child is reaped as soon as it ends, right after a SIGKILL to what
//!   is left of its group (grandchildren). Details on `Runner::teardown` in `runner.rs`.
//!
//! ```no_run
//! use std::time::Duration;
//! use pycollect_core::supervisor::{
//!     Event, Restart, RestartPolicy, Supervisor, SupervisorConfig, WorkerLaunch, DEFAULT_LIFELINE_FD,
//!     EVENT_CAPACITY, KILL_TIMEOUT,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let memfd: std::os::fd::OwnedFd = std::fs::File::open("/dev/null")?.into();
//! let config = SupervisorConfig {
//!     workers: 4,
//!     policy: RestartPolicy {
//!         restart: Restart::Permanent,
//!         max_restarts: 3,
//!         restart_window: Duration::from_secs(60),
//!         backoff_initial: Duration::from_millis(100),
//!         backoff_max: Duration::from_secs(5),
//!     },
//!     startup_timeout: Duration::from_secs(120),
//!     heartbeat_timeout: Duration::from_secs(30),
//!     check_interval: Duration::from_millis(100),
//!     grace: Duration::from_secs(2),
//!     term_timeout: Duration::from_secs(2),
//!     kill_timeout: KILL_TIMEOUT,
//!     lifeline_fd: DEFAULT_LIFELINE_FD,
//!     event_capacity: EVENT_CAPACITY,
//! };
//! let sup = Supervisor::builder(config)
//!     .heartbeat(|_worker, _generation| None) // e.g. read WorkerCtl::last_heartbeat
//!     .on_shutdown(|| { /* set the segment's shutdown flag, wake everyone */ })
//!     .start(move |worker, generation| {
//!         Ok(WorkerLaunch::new("python3")
//!             .args(["-m", "pycollect.worker"])
//!             .env("PYCOLLECT_WORKER", worker.to_string())
//!             .env("PYCOLLECT_GENERATION", generation.to_string())
//!             .pass_fd(memfd.try_clone()?, 4))
//!     })?;
//! while let Some(event) = sup.next_event(Duration::from_millis(500)) {
//!     if let Event::GaveUp { worker, .. } = event {
//!         eprintln!("worker {worker} keeps crashing");
//!         break;
//!     }
//! }
//! let report = sup.shutdown(Duration::from_secs(2))?;
//! # let _ = report;
//! # Ok(())
//! # }
//! ```

mod error;
mod events;
mod forkserver;
mod group_guard;
mod policy;
mod reaper;
mod runner;
pub mod spawn;

use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::panic;
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rustix::event::{eventfd, EventfdFlags};
use rustix::fs::{open, Mode, OFlags};
use rustix::process::{getpid, Pid};

pub use error::SupervisorError;
pub use events::{
    ChildState, Ending, Event, ExitReason, ExitRecord, ExitStatus, LaunchedBy, ShutdownReport,
    WorkerEnd, WorkerStats,
};
pub use group_guard::{guard_process_group, GUARDIAN_COMM};
pub use policy::{Decision, Restart, RestartPolicy, RestartTracker};
pub use spawn::{
    set_parent_death_signal, WorkerLaunch, LIFELINE_FD_ENV, MAX_CHILD_FD, SUPERVISOR_PID_ENV,
};

use events::EventQueue;
use runner::{ExitCallback, PanicPayload, Runner, Shared, ShutdownCallback};
use spawn::SpawnContext;

/// Says what to run for worker `worker`, generation `generation` (the first is 1).
///
/// Called on the supervisor thread, once per spawn. An error fails
/// [`SupervisorBuilder::start`] for a first generation, and counts as a crash (with an
/// [`Event::SpawnFailed`]) for a restart; so does a panic.
pub type Launcher = Box<dyn FnMut(usize, u64) -> io::Result<WorkerLaunch> + Send>;

/// Reads a worker's heartbeat: `(worker, generation)` to any `u64` that changes each time the
/// worker beats (a monotonic timestamp or a beat counter), or `None` before the first beat.
///
/// Called on the supervisor thread every `check_interval`, so it must be cheap and must not
/// block (an atomic load from shared memory). Only changes matter, timed by the supervisor's
/// own clock. It must not panic: a panic stops the supervisor thread, and the workers die with
/// it (parent-death signal).
pub type HeartbeatSource = Box<dyn FnMut(usize, u64) -> Option<u64> + Send>;

/// The fd number at which each child finds its lifeline unless configured otherwise (see
/// [`SupervisorConfig::lifeline_fd`] and [`LIFELINE_FD_ENV`]).
pub const DEFAULT_LIFELINE_FD: RawFd = 3;

/// How long to wait for the reap after SIGKILL: only a process stuck in the kernel takes longer
/// than a few milliseconds. A constant of the process model, not a user setting.
pub const KILL_TIMEOUT: Duration = Duration::from_secs(5);

/// Supervision events kept for the caller before the oldest are dropped (and counted).
pub const EVENT_CAPACITY: usize = 1024;

/// Settings of one supervisor.
///
/// There are no defaults here: every timing and the restart policy come from the caller
/// (pycollect's Python `SupervisionConfig` is their one home), so two layers can never
/// disagree about a default. [`KILL_TIMEOUT`], [`DEFAULT_LIFELINE_FD`] and [`EVENT_CAPACITY`]
/// are the usual values of the process-level fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SupervisorConfig {
    /// Number of workers (indices `0..workers`); at least 1.
    pub workers: usize,
    /// Restart policy, shared by all workers (each keeps its own history).
    pub policy: RestartPolicy,
    /// How long a new generation may go without its first heartbeat (size it for
    /// `import torch`). Only used with a heartbeat reader.
    pub startup_timeout: Duration,
    /// How long a heartbeat may stay unchanged after the first beat.
    pub heartbeat_timeout: Duration,
    /// How often heartbeats are read.
    pub check_interval: Duration,
    /// Grace period used when the supervisor is dropped without [`Supervisor::shutdown`].
    pub grace: Duration,
    /// How long to wait after SIGTERM before SIGKILL.
    pub term_timeout: Duration,
    /// How long to wait for the reap after SIGKILL (only a process stuck in the kernel takes
    /// longer than a few milliseconds).
    pub kill_timeout: Duration,
    /// fd number of the lifeline in each child (see [`LIFELINE_FD_ENV`]).
    pub lifeline_fd: RawFd,
    /// Events kept for the caller; past that the oldest are dropped (and counted).
    pub event_capacity: usize,
}

impl SupervisorConfig {
    /// Checks every value; the error names the first bad field and its value.
    pub fn validate(&self) -> Result<(), SupervisorError> {
        fn bad(
            field: &'static str,
            value: impl std::fmt::Debug,
            reason: &'static str,
        ) -> SupervisorError {
            SupervisorError::InvalidConfig {
                field,
                value: format!("{value:?}"),
                reason,
            }
        }
        if self.workers == 0 {
            return Err(bad("workers", self.workers, "must be at least 1"));
        }
        for (field, value) in [
            ("startup_timeout", self.startup_timeout),
            ("heartbeat_timeout", self.heartbeat_timeout),
            ("check_interval", self.check_interval),
        ] {
            if value.is_zero() {
                return Err(bad(field, value, "must be longer than zero"));
            }
        }
        if !(3..=MAX_CHILD_FD).contains(&self.lifeline_fd) {
            return Err(bad("lifeline_fd", self.lifeline_fd, "must be in 3..=1023"));
        }
        if self.event_capacity == 0 {
            return Err(bad(
                "event_capacity",
                self.event_capacity,
                "must be at least 1",
            ));
        }
        self.policy.validate()
    }
}

/// Collects the optional parts of a supervisor; made by [`Supervisor::builder`].
pub struct SupervisorBuilder {
    config: SupervisorConfig,
    heartbeat: Option<HeartbeatSource>,
    on_shutdown: Option<ShutdownCallback>,
    on_exit: Option<ExitCallback>,
    fork_server: Option<OwnedFd>,
}

impl std::fmt::Debug for SupervisorBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SupervisorBuilder")
            .field("config", &self.config)
            .field("heartbeat", &self.heartbeat.is_some())
            .field("on_shutdown", &self.on_shutdown.is_some())
            .field("on_exit", &self.on_exit.is_some())
            .field("fork_server", &self.fork_server)
            .finish()
    }
}

impl SupervisorBuilder {
    /// Enables hang detection with this heartbeat reader.
    pub fn heartbeat(
        mut self,
        source: impl FnMut(usize, u64) -> Option<u64> + Send + 'static,
    ) -> Self {
        self.heartbeat = Some(Box::new(source));
        self
    }

    /// Runs `f` at the start of shutdown, before any waiting or signalling: the place to set
    /// the segment's shutdown flag and wake blocked workers. It runs on the supervisor thread,
    /// after supervision has stopped (so the exits it causes are not taken for crashes), while
    /// the caller waits in [`Supervisor::shutdown`]; it must therefore not wait for anything
    /// that caller holds (e.g. Python's GIL). It should not panic; if it does, the teardown
    /// still runs and the panic is re-raised in the caller of `shutdown`.
    pub fn on_shutdown(mut self, f: impl FnOnce() + Send + 'static) -> Self {
        self.on_shutdown = Some(Box::new(f));
        self
    }

    /// Runs `f(worker, generation)` on the supervisor thread each time a generation of a worker
    /// has ended and been reaped (its process group SIGKILLed first, so nothing of it is left
    /// in the group): after a crash, a hang or a clean exit, before the [`Event::Exited`] that
    /// reports it, before the restart policy decides and so before any backoff or restart, and
    /// also for every child reaped during shutdown. While `f` runs, no process of that worker
    /// exists, and none starts until `f` returns: the place to release what a dead process of
    /// that worker held in shared memory (e.g. its weights pin). Not called for a spawn that
    /// failed (nothing ran) nor for a child left unreaped after SIGKILL.
    ///
    /// Like the heartbeat reader it must be cheap and must not block (it delays supervision).
    /// It should not panic; if it does, supervision goes on and the first panic is re-raised
    /// in the caller of [`Supervisor::shutdown`].
    pub fn on_exit(mut self, f: impl FnMut(usize, u64) + Send + 'static) -> Self {
        self.on_exit = Some(Box::new(f));
        self
    }

    /// Starts workers through a fork server: `socket` is a connected `SOCK_SEQPACKET` Unix
    /// socket to it, used by this supervisor alone. Each launch is sent to the server, which
    /// forks the worker so that it becomes a child of this process (which is a child subreaper,
    /// a process-wide setting, while a request is in flight; see `forkserver.rs`). The
    /// launch's program and args are not used for such a worker (the server runs its own
    /// worker code); its env, cwd and fds are. Supervision is the same as for an exec'd
    /// worker. The first failure (server gone, refusing, no reply) makes this and every later
    /// launch fall back to fork+exec, reported in [`Event::Started`] as
    /// [`LaunchedBy::ExecFallback`].
    pub fn fork_server(mut self, socket: OwnedFd) -> Self {
        self.fork_server = Some(socket);
        self
    }

    /// Starts the supervisor thread, which spawns every worker (in parallel) and then
    /// supervises them. Returns once all first generations are spawned; if any cannot be,
    /// the others are killed and reaped and the error names the worker.
    pub fn start(
        self,
        launcher: impl FnMut(usize, u64) -> io::Result<WorkerLaunch> + Send + 'static,
    ) -> Result<Supervisor, SupervisorError> {
        let Self {
            config,
            heartbeat,
            on_shutdown,
            on_exit,
            fork_server,
        } = self;
        config.validate()?;
        let placeholder = open("/dev/null", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| SupervisorError::os("open /dev/null", e))?;
        let wake = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
            .map_err(|e| SupervisorError::os("eventfd", e))?;
        let stats = (0..config.workers)
            .map(|worker| WorkerStats {
                worker,
                state: ChildState::Stopped,
                pid: None,
                generation: 0,
                restarts: 0,
                last_exit: None,
            })
            .collect();
        let shared = Arc::new(Shared::new(
            EventQueue::new(config.event_capacity),
            stats,
            wake,
        ));
        let home = getpid();
        let ctx = SpawnContext {
            parent: home,
            lifeline_fd: config.lifeline_fd,
            placeholder,
            fork_server: fork_server.map(forkserver::ForkServer::new),
        };
        let default_grace = config.grace;
        let workers = config.workers;
        let runner = Runner::new(
            config,
            Box::new(launcher),
            heartbeat,
            ctx,
            Arc::clone(&shared),
            on_shutdown,
            on_exit,
        );

        let (started_tx, started_rx) = sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("pycollect-supervisor".into())
            .spawn(move || runner.run(started_tx))
            .map_err(|e| SupervisorError::os("spawn supervisor thread", e))?;
        match started_rx.recv() {
            Ok(Ok(())) => Ok(Supervisor {
                shared,
                workers,
                default_grace,
                home,
                handle: Mutex::new(Handle::Running(thread)),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            // The thread died before reporting: it panicked.
            Err(_) => {
                let _ = thread.join();
                Err(SupervisorError::ThreadPanicked)
            }
        }
    }
}

enum Handle {
    Running(JoinHandle<(ShutdownReport, Option<PanicPayload>)>),
    Finished(ShutdownReport),
    Panicked,
}

/// Handle to a running supervisor thread and its workers. `Send + Sync`; every method takes
/// `&self`. Dropping it shuts down with the configured grace period.
///
/// The thread, the workers and their teardown belong to the process that started the
/// supervisor. A copy of the handle in a process forked from it (`fork()` without `exec`)
/// stops nothing: there [`shutdown`](Self::shutdown) returns an empty report without
/// touching the workers, and dropping it does nothing.
pub struct Supervisor {
    shared: Arc<Shared>,
    workers: usize,
    default_grace: Duration,
    /// The process that started the supervisor thread and owns the workers.
    home: Pid,
    handle: Mutex<Handle>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("workers", &self.workers)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    /// Starts building a supervisor with `config`.
    pub fn builder(config: SupervisorConfig) -> SupervisorBuilder {
        SupervisorBuilder {
            config,
            heartbeat: None,
            on_shutdown: None,
            on_exit: None,
            fork_server: None,
        }
    }

    /// True in the process that started this supervisor; false in a process forked from it,
    /// where the supervisor thread does not exist and the workers are not its children.
    pub fn in_home_process(&self) -> bool {
        getpid() == self.home
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Snapshot of every worker, in index order.
    pub fn stats(&self) -> Vec<WorkerStats> {
        self.shared.stats().clone()
    }

    /// The next event, if one is waiting.
    pub fn try_next_event(&self) -> Option<Event> {
        self.shared.events.try_pop()
    }

    /// The next event, waiting up to `timeout`; `None` on timeout or once the supervisor has
    /// shut down and every event was taken.
    pub fn next_event(&self, timeout: Duration) -> Option<Event> {
        self.shared.events.pop_timeout(timeout)
    }

    /// Every waiting event, oldest first.
    pub fn drain_events(&self) -> Vec<Event> {
        self.shared.events.drain()
    }

    /// Events lost because nobody took them before the queue filled up.
    pub fn events_dropped(&self) -> u64 {
        self.shared.events.dropped()
    }

    /// Stops every worker and returns how each ended; idempotent (later calls return the same
    /// report). The supervisor thread runs the `on_shutdown` callback, waits up to
    /// `grace` for workers to exit, SIGTERMs, SIGKILLs and reaps (see the module docs).
    /// Blocks for at most about `grace + term_timeout + kill_timeout`.
    ///
    /// In a process forked from the one that started the supervisor it does nothing and
    /// returns an empty report (no workers): they are the parent's to stop.
    pub fn shutdown(&self, grace: Duration) -> Result<ShutdownReport, SupervisorError> {
        self.shutdown_inner(grace, true)
    }

    fn shutdown_inner(
        &self,
        grace: Duration,
        rethrow: bool,
    ) -> Result<ShutdownReport, SupervisorError> {
        // Checked before anything else: in a forked child the lock may have been copied
        // locked, the wake-up eventfd is the parent's own, and the thread is not there to join.
        if !self.in_home_process() {
            return Ok(ShutdownReport::default());
        }
        // A panic elsewhere while holding this lock leaves `Handle` in one of its valid
        // states, so a poisoned lock is still usable.
        let mut handle = self.handle.lock().unwrap_or_else(|e| e.into_inner());
        match std::mem::replace(&mut *handle, Handle::Panicked) {
            Handle::Finished(report) => {
                *handle = Handle::Finished(report.clone());
                Ok(report)
            }
            Handle::Panicked => Err(SupervisorError::ThreadPanicked),
            Handle::Running(thread) => {
                self.shared.request_shutdown(grace);
                let (result, callback_panic) = match thread.join() {
                    Ok((report, callback_panic)) => {
                        *handle = Handle::Finished(report.clone());
                        (Ok(report), callback_panic)
                    }
                    Err(_) => {
                        self.shared.events.close();
                        (Err(SupervisorError::ThreadPanicked), None)
                    }
                };
                drop(handle);
                if let (Some(payload), true) = (callback_panic, rethrow) {
                    panic::resume_unwind(payload);
                }
                result
            }
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        if !self.in_home_process() {
            // A forked copy: leave the parent's workers alone, and forget the thread handle
            // rather than detach a thread that does not exist here. `get_mut` takes no lock,
            // which may have been copied locked.
            let handle = self.handle.get_mut().unwrap_or_else(|e| e.into_inner());
            if let Handle::Running(thread) = std::mem::replace(handle, Handle::Panicked) {
                std::mem::forget(thread);
            }
            return;
        }
        // Re-raising a callback panic while already unwinding would abort the process.
        let rethrow = !std::thread::panicking();
        let _ = self.shutdown_inner(self.default_grace, rethrow);
    }
}

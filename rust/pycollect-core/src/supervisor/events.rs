//! What the supervisor tells its caller: events, per-worker stats, the shutdown report.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How a worker process ended, as `waitid` reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExitStatus {
    /// It called `exit(code)`.
    Code(i32),
    /// It was killed by this signal number.
    Signal(i32),
    /// Someone else in this process reaped it first (e.g. Python's `os.wait()`), so the status
    /// is lost. Counted as abnormal.
    Unknown,
}

impl ExitStatus {
    /// True only for `Code(0)`.
    pub fn success(self) -> bool {
        self == Self::Code(0)
    }
}

/// Why the supervisor considers a worker ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExitReason {
    /// It exited by itself (see the status for the code).
    Exit,
    /// It was killed by a signal the supervisor did not send.
    Signal,
    /// Its heartbeat stopped advancing; the supervisor killed its process group.
    Hung,
}

/// The record of one ended generation of a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitRecord {
    /// Generation that ended.
    pub generation: u64,
    /// Its pid (already reaped: do not signal it).
    pub pid: u32,
    /// Code or signal.
    pub status: ExitStatus,
    /// Why it is considered ended.
    pub reason: ExitReason,
}

impl ExitRecord {
    /// Abnormal: a hang, a signal, a non-zero code or an unknown status.
    pub fn abnormal(&self) -> bool {
        self.reason == ExitReason::Hung || !self.status.success()
    }
}

/// How a generation was started.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LaunchedBy {
    /// fork+exec of the launch's program (no fork server configured).
    Exec,
    /// Forked by the fork server (see [`SupervisorBuilder::fork_server`](super::SupervisorBuilder::fork_server)).
    ForkServer,
    /// fork+exec because the configured fork server could not be used.
    ExecFallback {
        /// Why the server is not used (its first failure).
        reason: String,
    },
}

/// A change in a worker's life, in the order it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A generation of a worker was spawned.
    Started {
        /// Worker index.
        worker: usize,
        /// Its generation (the first is 1).
        generation: u64,
        /// Its pid, which is also its process group id.
        pid: u32,
        /// fork+exec or the fork server.
        launched_by: LaunchedBy,
    },
    /// A generation ended and was reaped (not sent during shutdown: the report covers that).
    Exited {
        /// Worker index.
        worker: usize,
        /// The generation that ended.
        generation: u64,
        /// Its pid (already reaped).
        pid: u32,
        /// Code or signal.
        status: ExitStatus,
        /// Exit, signal or hang.
        reason: ExitReason,
    },
    /// Spawning a restart failed; counted like an abnormal end by the restart policy.
    SpawnFailed {
        /// Worker index.
        worker: usize,
        /// The generation that could not start.
        generation: u64,
        /// The error, formatted.
        error: String,
    },
    /// The worker will be started again after a backoff (sent right after the end it follows).
    Restarting {
        /// Worker index.
        worker: usize,
        /// Generation it will get.
        next_generation: u64,
        /// Backoff delay before the spawn.
        after: Duration,
    },
    /// The worker ended cleanly and the restart policy does not restart clean ends
    /// ([`Restart::Transient`](super::Restart::Transient), [`Restart::Never`](super::Restart::Never)):
    /// it stays down for good. Sent right after the generation's [`Event::Exited`].
    Stopped {
        /// Worker index.
        worker: usize,
        /// The generation that ended.
        generation: u64,
    },
    /// The restart policy gave up on the worker; it stays down.
    GaveUp {
        /// Worker index.
        worker: usize,
        /// The last generation that ran (or failed to spawn).
        generation: u64,
        /// How many times this worker was restarted in total.
        restarts: u32,
    },
}

/// Where a worker is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChildState {
    /// A process is running (it may not have beaten yet).
    Running,
    /// Ended; a restart is scheduled.
    BackingOff,
    /// Ended cleanly and the policy does not restart it.
    Stopped,
    /// Ended and the policy gave up on it.
    GaveUp,
    /// The supervisor shut down.
    ShutDown,
}

/// Snapshot of one worker, from [`Supervisor::stats`](super::Supervisor::stats).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerStats {
    /// Worker index.
    pub worker: usize,
    /// Current state.
    pub state: ChildState,
    /// Pid of the running process, if one runs.
    pub pid: Option<u32>,
    /// Current (or last) generation; the first is 1.
    pub generation: u64,
    /// Restarts so far (spawn attempts after the first).
    pub restarts: u32,
    /// How the previous generation ended.
    pub last_exit: Option<ExitRecord>,
}

/// How one worker ended during [`Supervisor::shutdown`](super::Supervisor::shutdown).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// No process was running when shutdown began (stopped, gave up or backing off).
    NotRunning,
    /// Exited by itself within the grace period.
    Exited(ExitStatus),
    /// Ended after its process group got SIGTERM.
    Terminated(ExitStatus),
    /// Ended after its process group got SIGKILL.
    Killed(ExitStatus),
    /// Still not reaped after SIGKILL and `kill_timeout` (stuck in the kernel, e.g. state D).
    /// It stays a zombie until this process exits.
    Unreaped,
}

/// One worker's line in a [`ShutdownReport`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerEnd {
    /// Worker index.
    pub worker: usize,
    /// Its last generation.
    pub generation: u64,
    /// Pid of the process that was running at shutdown, if any.
    pub pid: Option<u32>,
    /// How it ended.
    pub ending: Ending,
}

/// What [`Supervisor::shutdown`](super::Supervisor::shutdown) did, one entry per worker in
/// index order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Per worker.
    pub workers: Vec<WorkerEnd>,
}

/// Bounded FIFO of events shared by the supervisor thread (producer) and callers (consumers).
#[derive(Debug)]
pub(crate) struct EventQueue {
    inner: Mutex<QueueInner>,
    ready: Condvar,
    capacity: usize,
}

#[derive(Debug, Default)]
struct QueueInner {
    events: VecDeque<Event>,
    dropped: u64,
    closed: bool,
}

impl EventQueue {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(QueueInner::default()),
            ready: Condvar::new(),
            capacity,
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueInner> {
        // A panic while holding this lock cannot leave the queue inconsistent (every update
        // is a single push or pop), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends; when full, drops the oldest event so a caller that never polls cannot make
    /// the supervisor grow without bound.
    pub(crate) fn push(&self, event: Event) {
        let mut q = self.lock();
        if q.events.len() >= self.capacity {
            q.events.pop_front();
            q.dropped += 1;
        }
        q.events.push_back(event);
        drop(q);
        self.ready.notify_all();
    }

    /// Wakes waiters for good: the supervisor has stopped and will send nothing more.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    pub(crate) fn try_pop(&self) -> Option<Event> {
        self.lock().events.pop_front()
    }

    pub(crate) fn pop_timeout(&self, timeout: Duration) -> Option<Event> {
        let deadline = Instant::now().checked_add(timeout);
        let mut q = self.lock();
        loop {
            if let Some(e) = q.events.pop_front() {
                return Some(e);
            }
            if q.closed {
                return None;
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::MAX,
            };
            if left.is_zero() {
                return None;
            }
            q = self
                .ready
                .wait_timeout(q, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    pub(crate) fn drain(&self) -> Vec<Event> {
        self.lock().events.drain(..).collect()
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.lock().dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(worker: usize) -> Event {
        Event::GaveUp {
            worker,
            generation: 1,
            restarts: 0,
        }
    }

    #[test]
    fn bounded_drops_oldest() {
        let q = EventQueue::new(2);
        q.push(ev(0));
        q.push(ev(1));
        q.push(ev(2));
        assert_eq!(q.dropped(), 1);
        assert_eq!(q.drain(), vec![ev(1), ev(2)]);
    }

    #[test]
    fn pop_timeout_times_out_and_returns_after_close() {
        let q = EventQueue::new(4);
        let t0 = Instant::now();
        assert_eq!(q.pop_timeout(Duration::from_millis(20)), None);
        assert!(t0.elapsed() >= Duration::from_millis(20));
        q.push(ev(7));
        q.close();
        assert_eq!(q.pop_timeout(Duration::from_secs(10)), Some(ev(7)));
        let t0 = Instant::now();
        assert_eq!(q.pop_timeout(Duration::from_secs(10)), None);
        assert!(t0.elapsed() < Duration::from_secs(1));
    }
}

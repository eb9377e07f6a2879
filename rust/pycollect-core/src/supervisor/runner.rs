//! The supervisor thread: spawns, watches, restarts and finally tears down the workers.
//!
//! Everything that touches a child process happens on this one long-lived thread. That is not
//! a convenience: the kernel sends `PR_SET_PDEATHSIG` when the *thread* that forked a child
//! exits, so spawning from a short-lived thread would kill the workers with it.
//!
//! The loop sleeps in `poll` on the children's pidfds plus one eventfd that the caller's
//! handle writes to; it wakes for an exit, a control request, a due restart or the next
//! heartbeat check, whichever comes first. It never calls `waitpid(-1)` and installs no
//! SIGCHLD handler (signal handlers belong to the embedding program, e.g. Python).

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc::SyncSender;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustix::process::Signal;

use super::events::{
    ChildState, Ending, Event, EventQueue, ExitReason, ExitRecord, ExitStatus, ShutdownReport,
    WorkerEnd, WorkerStats,
};
use super::policy::{Decision, RestartTracker};
use super::reaper::{wait_readable, LiveChild, Reaped};
use super::spawn::{spawn_worker, SpawnContext};
use super::{HeartbeatSource, Launcher, SupervisorConfig, SupervisorError};

/// State shared between the supervisor thread and the caller's [`Supervisor`] handle.
///
/// [`Supervisor`]: super::Supervisor
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) events: EventQueue,
    pub(crate) stats: Mutex<Vec<WorkerStats>>,
    /// eventfd (non-blocking) the handle writes to so the thread leaves `poll`.
    wake: OwnedFd,
    /// Grace period of a requested shutdown; the first request wins.
    shutdown: Mutex<Option<Duration>>,
}

impl Shared {
    pub(crate) fn new(events: EventQueue, stats: Vec<WorkerStats>, wake: OwnedFd) -> Self {
        Self {
            events,
            stats: Mutex::new(stats),
            wake,
            shutdown: Mutex::new(None),
        }
    }

    pub(crate) fn stats(&self) -> MutexGuard<'_, Vec<WorkerStats>> {
        // Each update replaces one whole entry, so a poisoned lock still holds consistent data.
        self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn request_shutdown(&self, grace: Duration) {
        self.shutdown
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(grace);
        // Can only fail if the counter would overflow, which needs 2^64 pending wake-ups; the
        // thread then still wakes because the counter is non-zero.
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
    }

    fn requested_shutdown(&self) -> Option<Duration> {
        *self.shutdown.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn drain_wake(&self) {
        let mut buf = [0u8; 8];
        // Non-blocking: EAGAIN when already drained, which is fine.
        let _ = rustix::io::read(&self.wake, &mut buf);
    }
}

/// Heartbeat bookkeeping for one running generation.
///
/// Hang detection only asks whether the caller's heartbeat value *changed*, measured on our
/// own monotonic clock. So the value may be a timestamp in any clock or a plain beat counter.
#[derive(Debug)]
struct Liveness {
    spawned_at: Instant,
    /// Last value seen (initially the value right after spawn, before the child could beat).
    last: Option<u64>,
    /// When `last` last changed.
    progress_at: Instant,
    /// Has the value ever changed since spawn (i.e. did the first beat arrive)?
    beating: bool,
    /// Set when we killed the group for a hang; the exit is then reported as `Hung`.
    hung: bool,
}

impl Liveness {
    fn new(now: Instant, baseline: Option<u64>) -> Self {
        Self {
            spawned_at: now,
            last: baseline,
            progress_at: now,
            beating: false,
            hung: false,
        }
    }

    /// Feeds one observation; true if the worker now counts as hung.
    fn observe(&mut self, value: Option<u64>, now: Instant, cfg: &SupervisorConfig) -> bool {
        if value != self.last {
            self.last = value;
            self.progress_at = now;
            self.beating = true;
        }
        if self.beating {
            now.saturating_duration_since(self.progress_at) > cfg.heartbeat_timeout
        } else {
            now.saturating_duration_since(self.spawned_at) > cfg.startup_timeout
        }
    }
}

/// One worker index and whatever currently runs under it.
#[derive(Debug)]
struct Slot {
    worker: usize,
    generation: u64,
    restarts: u32,
    state: ChildState,
    child: Option<LiveChild>,
    liveness: Liveness,
    tracker: RestartTracker,
    restart_at: Option<Instant>,
    last_exit: Option<ExitRecord>,
}

impl Slot {
    fn stats(&self) -> WorkerStats {
        WorkerStats {
            worker: self.worker,
            state: self.state,
            pid: self.child.as_ref().map(LiveChild::pid),
            generation: self.generation,
            restarts: self.restarts,
            last_exit: self.last_exit.clone(),
        }
    }
}

/// Which teardown phase reaped a child decides how its ending is reported.
#[derive(Clone, Copy, Debug)]
enum Phase {
    Grace,
    Term,
    Kill,
}

impl Phase {
    fn ending(self, status: ExitStatus) -> Ending {
        match self {
            Self::Grace => Ending::Exited(status),
            Self::Term => Ending::Terminated(status),
            Self::Kill => Ending::Killed(status),
        }
    }
}

/// The supervisor thread's state. Owned by that thread alone.
pub(crate) struct Runner {
    config: SupervisorConfig,
    launcher: Launcher,
    heartbeat: Option<HeartbeatSource>,
    ctx: SpawnContext,
    shared: std::sync::Arc<Shared>,
    slots: Vec<Slot>,
    on_shutdown: Option<ShutdownCallback>,
    on_exit: Option<ExitCallback>,
    /// The first panic of `on_shutdown` or `on_exit`, handed back to the caller once the
    /// workers are down.
    callback_panic: Option<PanicPayload>,
}

/// The caller's shutdown hook (see `SupervisorBuilder::on_shutdown`).
pub(crate) type ShutdownCallback = Box<dyn FnOnce() + Send>;
/// The caller's hook for a reaped generation (see `SupervisorBuilder::on_exit`).
pub(crate) type ExitCallback = Box<dyn FnMut(usize, u64) + Send>;
/// What `catch_unwind` returns for a panic.
pub(crate) type PanicPayload = Box<dyn std::any::Any + Send>;

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("config", &self.config)
            .field("heartbeat", &self.heartbeat.is_some())
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

impl Runner {
    pub(crate) fn new(
        config: SupervisorConfig,
        launcher: Launcher,
        heartbeat: Option<HeartbeatSource>,
        ctx: SpawnContext,
        shared: std::sync::Arc<Shared>,
        on_shutdown: Option<ShutdownCallback>,
        on_exit: Option<ExitCallback>,
    ) -> Self {
        let now = Instant::now();
        let slots = (0..config.workers)
            .map(|worker| Slot {
                worker,
                generation: 0,
                restarts: 0,
                state: ChildState::Stopped,
                child: None,
                liveness: Liveness::new(now, None),
                tracker: RestartTracker::new(),
                restart_at: None,
                last_exit: None,
            })
            .collect();
        Self {
            config,
            launcher,
            heartbeat,
            ctx,
            shared,
            slots,
            on_shutdown,
            on_exit,
            callback_panic: None,
        }
    }

    /// Runs the caller's `on_exit` hook for a generation that has just been reaped. A panic
    /// in it must not stop supervision (the workers would die with this thread): it is kept
    /// and re-raised in the caller of `shutdown`, like one of `on_shutdown`.
    fn reaped(&mut self, worker: usize, generation: u64) {
        let Some(callback) = self.on_exit.as_mut() else {
            return;
        };
        if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| callback(worker, generation)))
        {
            self.callback_panic.get_or_insert(payload);
        }
    }

    /// Thread body: start every worker, report the outcome on `started`, supervise until a
    /// shutdown is requested, tear down, and return the report (plus a panic of the caller's
    /// `on_shutdown` callback, if it had one).
    pub(crate) fn run(
        mut self,
        started: SyncSender<Result<(), SupervisorError>>,
    ) -> (ShutdownReport, Option<PanicPayload>) {
        if let Err(e) = self.start_all() {
            // Take down the ones that did start before reporting the failure.
            let report = self.teardown(Duration::ZERO);
            let _ = started.send(Err(e));
            return (report, self.callback_panic);
        }
        // The handle blocks on this message, so it cannot be gone; if it were, nobody would be
        // left to supervise for.
        let grace = if started.send(Ok(())).is_err() {
            Duration::ZERO
        } else {
            loop {
                if let Some(grace) = self.shared.requested_shutdown() {
                    break grace;
                }
                self.step();
            }
        };
        let report = self.teardown(grace);
        (report, self.callback_panic)
    }

    /// Spawns every worker's first generation back to back, without waiting for any of them
    /// to come up: they start in parallel.
    fn start_all(&mut self) -> Result<(), SupervisorError> {
        for i in 0..self.slots.len() {
            self.slots[i].generation = 1;
            self.launch(i)?;
        }
        Ok(())
    }

    /// Spawns the slot's current generation and records it as running.
    fn launch(&mut self, i: usize) -> Result<(), SupervisorError> {
        let (worker, generation) = (self.slots[i].worker, self.slots[i].generation);
        // The launcher is the caller's code: a panic in it must not take down this thread
        // (and with it, through the parent-death signal, every running worker).
        let launched =
            panic::catch_unwind(AssertUnwindSafe(|| (self.launcher)(worker, generation)))
                .unwrap_or_else(|_| Err(io::Error::other("the launcher panicked")));
        let launch = launched.map_err(|source| SupervisorError::Launcher {
            worker,
            generation,
            source,
        })?;
        let (child, launched_by) = spawn_worker(&mut self.ctx, worker, generation, launch)?;
        let pid = child.pid();
        // Read the heartbeat once right away: whatever it says now was not written by this
        // generation, so only a change from here on counts as its first beat.
        let baseline = self.heartbeat.as_mut().and_then(|h| h(worker, generation));
        let slot = &mut self.slots[i];
        slot.child = Some(child);
        slot.liveness = Liveness::new(Instant::now(), baseline);
        slot.state = ChildState::Running;
        slot.restart_at = None;
        self.publish_stats(i);
        self.shared.events.push(Event::Started {
            worker,
            generation,
            pid,
            launched_by,
        });
        Ok(())
    }

    /// One round of supervision: heartbeats, due restarts, then sleep until something happens.
    fn step(&mut self) {
        let now = Instant::now();
        self.check_heartbeats(now);
        self.start_due_restarts(now);

        let deadline = self.next_deadline(now);
        let live: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i].child.is_some())
            .collect();
        let readable = {
            let mut fds: Vec<BorrowedFd<'_>> = Vec::with_capacity(live.len() + 1);
            fds.push(rustix::fd::AsFd::as_fd(&self.shared.wake));
            fds.extend(
                live.iter()
                    .filter_map(|&i| self.slots[i].child.as_ref().map(LiveChild::pidfd)),
            );
            wait_readable(&fds, deadline)
        };
        match readable {
            Ok(ready) => {
                for k in ready {
                    if k == 0 {
                        self.shared.drain_wake();
                    } else {
                        self.on_child_exit(live[k - 1]);
                    }
                }
            }
            // poll on a handful of valid fds only fails for lack of kernel memory; back off
            // instead of spinning, and try again.
            Err(_) => std::thread::sleep(self.config.check_interval),
        }
    }

    /// When the loop must wake up even if no fd becomes readable.
    fn next_deadline(&self, now: Instant) -> Option<Instant> {
        let restart = self
            .slots
            .iter()
            .filter(|s| s.state == ChildState::BackingOff)
            .filter_map(|s| s.restart_at)
            .min();
        let watching = self.heartbeat.is_some() && self.slots.iter().any(|s| s.child.is_some());
        let check = watching.then(|| now + self.config.check_interval);
        match (restart, check) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Kills the process group of every worker whose heartbeat stalled. The exit itself is
    /// picked up (and reaped, and fed to the restart policy) through its pidfd like any other.
    fn check_heartbeats(&mut self, now: Instant) {
        let Some(hb) = self.heartbeat.as_mut() else {
            return;
        };
        for slot in &mut self.slots {
            let Some(child) = slot.child.as_ref() else {
                continue;
            };
            if slot.liveness.hung {
                continue;
            }
            let value = hb(slot.worker, slot.generation);
            if slot.liveness.observe(value, now, &self.config) {
                slot.liveness.hung = true;
                child.signal_group(Signal::KILL);
            }
        }
    }

    fn start_due_restarts(&mut self, now: Instant) {
        for i in 0..self.slots.len() {
            let slot = &mut self.slots[i];
            let due =
                slot.state == ChildState::BackingOff && slot.restart_at.is_none_or(|at| at <= now);
            if !due {
                continue;
            }
            slot.generation += 1;
            slot.restarts += 1;
            if let Err(e) = self.launch(i) {
                let slot = &self.slots[i];
                let failed = Event::SpawnFailed {
                    worker: slot.worker,
                    generation: slot.generation,
                    error: e.to_string(),
                };
                // A failed spawn counts as an abnormal end, so a launcher that always fails
                // ends in GaveUp instead of retrying forever.
                self.apply_policy(i, true, now, Some(failed));
            }
        }
    }

    /// The slot's pidfd became readable: reap, report, and ask the restart policy.
    fn on_child_exit(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        let Some(child) = slot.child.take() else {
            return;
        };
        let pid = child.pid();
        let status = match child.try_reap() {
            Reaped::Done(status) => status,
            Reaped::Alive(child) => {
                slot.child = Some(child);
                return;
            }
        };
        let reason = if slot.liveness.hung {
            ExitReason::Hung
        } else if matches!(status, ExitStatus::Signal(_)) {
            ExitReason::Signal
        } else {
            ExitReason::Exit
        };
        let record = ExitRecord {
            generation: slot.generation,
            pid,
            status,
            reason,
        };
        let abnormal = record.abnormal();
        slot.last_exit = Some(record);
        let (worker, generation) = (slot.worker, slot.generation);
        let exited = Event::Exited {
            worker,
            generation,
            pid,
            status,
            reason,
        };
        // Reaped, and its group killed: nothing of this generation runs any more, and the
        // next one starts only after the policy below, on this thread. So the hook sees the
        // end before anyone can be told of it, and before any restart.
        self.reaped(worker, generation);
        self.apply_policy(i, abnormal, Instant::now(), Some(exited));
    }

    /// Feeds an end to the restart policy, updates the slot and its stats, and only then
    /// publishes `first` (the event that describes the end, if any) and the policy's event,
    /// so that a caller woken by an event already sees matching stats.
    fn apply_policy(&mut self, i: usize, abnormal: bool, now: Instant, first: Option<Event>) {
        let slot = &mut self.slots[i];
        let follow_up = match slot.tracker.decide(&self.config.policy, abnormal, now) {
            Decision::Restart { after } => {
                slot.state = ChildState::BackingOff;
                slot.restart_at = Some(now + after);
                Some(Event::Restarting {
                    worker: slot.worker,
                    next_generation: slot.generation + 1,
                    after,
                })
            }
            Decision::Stop => {
                slot.state = ChildState::Stopped;
                Some(Event::Stopped {
                    worker: slot.worker,
                    generation: slot.generation,
                })
            }
            Decision::GiveUp => {
                slot.state = ChildState::GaveUp;
                Some(Event::GaveUp {
                    worker: slot.worker,
                    generation: slot.generation,
                    restarts: slot.restarts,
                })
            }
        };
        self.publish_stats(i);
        for event in first.into_iter().chain(follow_up) {
            self.shared.events.push(event);
        }
    }

    fn publish_stats(&self, i: usize) {
        let entry = self.slots[i].stats();
        if let Some(s) = self.shared.stats().get_mut(i) {
            *s = entry;
        }
    }

    /// Stops every worker and reaps every child. The order, step by step:
    ///
    /// 0. Run the caller's `on_shutdown` callback (it sets its own shutdown flag and wakes the
    ///    workers). It runs here, after the supervision loop has stopped, so that an exit it
    ///    causes is never mistaken for a crash and restarted.
    /// 1. Cancel scheduled restarts: nothing new starts from now on.
    /// 2. Close every lifeline: workers that watch it see EOF, a second "please exit" that
    ///    needs no shared memory.
    /// 3. Wait up to `grace` for workers to exit by themselves.
    /// 4. SIGTERM each remaining process group, wait up to `term_timeout`.
    /// 5. SIGKILL each remaining process group, wait up to `kill_timeout`.
    ///
    /// In steps 3-5 every child is reaped as soon as its pidfd says it ended, and just before
    /// that its group gets a SIGKILL, so grandchildren (an env's simulator, say) die with it
    /// and no zombie is left. The pidfds close with the reaped children.
    fn teardown(&mut self, grace: Duration) -> ShutdownReport {
        let mut report: Vec<WorkerEnd> = self
            .slots
            .iter()
            .map(|s| WorkerEnd {
                worker: s.worker,
                generation: s.generation,
                pid: s.child.as_ref().map(LiveChild::pid),
                ending: if s.child.is_some() {
                    Ending::Unreaped
                } else {
                    Ending::NotRunning
                },
            })
            .collect();

        // 0. The workers must be stopped whatever the callback does, so a panic is caught
        //    here and re-raised in the caller's thread after the teardown.
        if let Some(callback) = self.on_shutdown.take() {
            if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(callback)) {
                self.callback_panic.get_or_insert(payload);
            }
        }
        // 1.
        for slot in &mut self.slots {
            slot.restart_at = None;
        }
        // 2.
        for child in self.slots.iter_mut().filter_map(|s| s.child.as_mut()) {
            child.close_lifeline();
        }
        // 3.
        self.reap_until(Instant::now() + grace, Phase::Grace, &mut report);
        // 4.
        self.signal_all(Signal::TERM);
        self.reap_until(
            Instant::now() + self.config.term_timeout,
            Phase::Term,
            &mut report,
        );
        // 5.
        self.signal_all(Signal::KILL);
        self.reap_until(
            Instant::now() + self.config.kill_timeout,
            Phase::Kill,
            &mut report,
        );

        for i in 0..self.slots.len() {
            // A child still here is stuck in the kernel; dropping it closes its pidfd and
            // leaves a zombie we cannot help. The report says `Unreaped`.
            self.slots[i].child = None;
            self.slots[i].state = ChildState::ShutDown;
            self.publish_stats(i);
        }
        self.shared.events.close();
        ShutdownReport { workers: report }
    }

    fn signal_all(&self, sig: Signal) {
        for child in self.slots.iter().filter_map(|s| s.child.as_ref()) {
            child.signal_group(sig);
        }
    }

    /// Reaps children as they end until none is left or `deadline` passes. No `Exited` events
    /// here: during shutdown the report is the record; the `on_exit` hook still runs for each.
    fn reap_until(&mut self, deadline: Instant, phase: Phase, report: &mut [WorkerEnd]) {
        loop {
            let live: Vec<usize> = (0..self.slots.len())
                .filter(|&i| self.slots[i].child.is_some())
                .collect();
            if live.is_empty() {
                return;
            }
            let readable = {
                let fds: Vec<BorrowedFd<'_>> = live
                    .iter()
                    .filter_map(|&i| self.slots[i].child.as_ref().map(LiveChild::pidfd))
                    .collect();
                wait_readable(&fds, Some(deadline))
            };
            let Ok(ready) = readable else {
                return;
            };
            let mut ended = Vec::new();
            for k in ready {
                let slot = &mut self.slots[live[k]];
                let Some(child) = slot.child.take() else {
                    continue;
                };
                let pid = child.pid();
                match child.try_reap() {
                    Reaped::Alive(child) => slot.child = Some(child),
                    Reaped::Done(status) => {
                        ended.push((slot.worker, slot.generation));
                        report[live[k]].ending = phase.ending(status);
                        slot.last_exit = Some(ExitRecord {
                            generation: slot.generation,
                            pid,
                            status,
                            reason: if matches!(status, ExitStatus::Signal(_)) {
                                ExitReason::Signal
                            } else {
                                ExitReason::Exit
                            },
                        });
                    }
                }
            }
            for (worker, generation) in ended {
                self.reaped(worker, generation);
            }
            if Instant::now() >= deadline {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> SupervisorConfig {
        use crate::supervisor::{Restart, RestartPolicy};
        SupervisorConfig {
            workers: 1,
            policy: RestartPolicy {
                restart: Restart::Permanent,
                max_restarts: 3,
                restart_window: Duration::from_secs(60),
                backoff_initial: Duration::from_millis(100),
                backoff_max: Duration::from_secs(5),
            },
            startup_timeout: Duration::from_secs(10),
            heartbeat_timeout: Duration::from_secs(1),
            check_interval: Duration::from_millis(100),
            grace: Duration::from_secs(2),
            term_timeout: Duration::from_secs(2),
            kill_timeout: crate::supervisor::KILL_TIMEOUT,
            lifeline_fd: crate::supervisor::DEFAULT_LIFELINE_FD,
            event_capacity: crate::supervisor::EVENT_CAPACITY,
        }
    }

    #[test]
    fn liveness_uses_startup_timeout_until_first_change() {
        let c = cfg();
        let t0 = Instant::now();
        let mut l = Liveness::new(t0, Some(42));
        // Stale value from the previous generation: not a beat.
        assert!(!l.observe(Some(42), t0 + Duration::from_secs(5), &c));
        assert!(l.observe(Some(42), t0 + Duration::from_secs(11), &c));
    }

    #[test]
    fn liveness_uses_heartbeat_timeout_after_first_beat() {
        let c = cfg();
        let t0 = Instant::now();
        let mut l = Liveness::new(t0, None);
        assert!(!l.observe(Some(1), t0 + Duration::from_millis(100), &c));
        assert!(!l.observe(Some(2), t0 + Duration::from_millis(900), &c));
        assert!(!l.observe(Some(2), t0 + Duration::from_millis(1800), &c));
        assert!(l.observe(Some(2), t0 + Duration::from_millis(2000), &c));
    }
}

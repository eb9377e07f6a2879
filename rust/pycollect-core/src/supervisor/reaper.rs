//! One live worker process, addressed only through its pidfd, and the ways it can end.
//!
//! The rule that keeps signals from hitting a stranger: a pid (and the process group named
//! after it) stays ours only while the process is unreaped. [`LiveChild`] is the only thing
//! that can signal, and reaping consumes it, so nothing can signal after the reap.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::process::{
    kill_process_group, pidfd_send_signal, waitid, Pid, Signal, WaitId, WaitIdOptions, WaitIdStatus,
};

use super::events::ExitStatus;

/// A spawned, not yet reaped worker process (leader of its own process group).
#[derive(Debug)]
pub(crate) struct LiveChild {
    pid: Pid,
    pidfd: OwnedFd,
    /// Write end of the lifeline pipe; dropping it is what the child sees as EOF.
    lifeline: Option<OwnedFd>,
}

/// What [`LiveChild::try_reap`] found.
pub(crate) enum Reaped {
    /// It had ended and is now reaped.
    Done(ExitStatus),
    /// Still running (a spurious wake-up); here it is back.
    Alive(LiveChild),
}

impl LiveChild {
    pub(crate) fn new(pid: Pid, pidfd: OwnedFd, lifeline: OwnedFd) -> Self {
        Self {
            pid,
            pidfd,
            lifeline: Some(lifeline),
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid.as_raw_pid().unsigned_abs()
    }

    /// Readable (POLLIN) once the process has ended.
    pub(crate) fn pidfd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }

    /// Closes our end of the lifeline: the child reads EOF.
    pub(crate) fn close_lifeline(&mut self) {
        self.lifeline = None;
    }

    /// Sends `sig` to the leader (through its pidfd) and to its whole process group.
    ///
    /// Safe against pid reuse because `self` is unreaped: while the leader is alive or a
    /// zombie, its pid, which is also the group id, cannot name anyone else. Sent both ways
    /// because a leader that moved to another group (`setsid`) is still reached by the pidfd,
    /// and grandchildren left behind in the group are reached by the group kill.
    pub(crate) fn signal_group(&self, sig: Signal) {
        // The pidfd answers ESRCH only once the process is fully gone (a zombie still takes
        // signals). Then someone else in this process reaped it behind our back (a stray
        // `waitpid(-1)`), its pid may already belong to a stranger, and the group is left alone.
        if let Err(Errno::SRCH) = pidfd_send_signal(&self.pidfd, sig) {
            return;
        }
        // ESRCH here just means nobody is left in the group, which is what we want anyway.
        let _ = kill_process_group(self.pid, sig);
    }

    /// Reaps the child if it has ended, after SIGKILLing whatever is left in its group.
    ///
    /// Order matters: peek first (`WNOWAIT`) so that the leader stays a zombie, which pins its
    /// pid and group id, while we kill stray grandchildren; only then reap.
    pub(crate) fn try_reap(self) -> Reaped {
        let peek = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        match wait_pidfd(&self.pidfd, peek) {
            Ok(None) => return Reaped::Alive(self),
            Ok(Some(_)) => {}
            // ECHILD: someone else in this process reaped it (a stray `waitpid(-1)`); the pid
            // may already be reused, so send nothing.
            Err(_) => return Reaped::Done(ExitStatus::Unknown),
        }
        self.signal_group(Signal::KILL);
        let status = match wait_pidfd(&self.pidfd, WaitIdOptions::EXITED | WaitIdOptions::NOHANG) {
            Ok(Some(st)) => exit_status(&st),
            Ok(None) | Err(_) => ExitStatus::Unknown,
        };
        Reaped::Done(status)
    }
}

fn wait_pidfd(pidfd: &OwnedFd, options: WaitIdOptions) -> io::Result<Option<WaitIdStatus>> {
    loop {
        match waitid(WaitId::PidFd(pidfd.as_fd()), options) {
            Err(Errno::INTR) => continue,
            other => return other.map_err(io::Error::from),
        }
    }
}

fn exit_status(st: &WaitIdStatus) -> ExitStatus {
    if st.exited() {
        ExitStatus::Code(st.exit_status().unwrap_or(0))
    } else if let Some(sig) = st.terminating_signal() {
        ExitStatus::Signal(sig)
    } else {
        ExitStatus::Unknown
    }
}

/// Waits until one of `fds` is readable or `deadline` passes (`None`: no deadline) and
/// returns the indices of the readable ones (empty on timeout). Retries on EINTR.
pub(crate) fn wait_readable(
    fds: &[BorrowedFd<'_>],
    deadline: Option<Instant>,
) -> io::Result<Vec<usize>> {
    let mut pollfds: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::from_borrowed_fd(*fd, PollFlags::IN))
        .collect();
    loop {
        let timeout = deadline.map(|d| to_timespec(d.saturating_duration_since(Instant::now())));
        match poll(&mut pollfds, timeout.as_ref()) {
            Ok(_) => break,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(pollfds
        .iter()
        .enumerate()
        .filter(|(_, p)| !p.revents().is_empty())
        .map(|(i, _)| i)
        .collect())
}

fn to_timespec(d: Duration) -> Timespec {
    // Callers loop until their own deadline, so capping one wait at a day loses nothing and
    // keeps the conversion infallible.
    let d = d.min(Duration::from_secs(86_400));
    Timespec::try_from(d).unwrap_or(Timespec {
        tv_sec: 86_400,
        tv_nsec: 0,
    })
}

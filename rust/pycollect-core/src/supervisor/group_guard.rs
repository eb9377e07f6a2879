//! A guardian for a worker's process group: what the worker's env started dies with the worker.
//!
//! The supervisor kills each worker's whole process group when it reaps the worker, so the
//! processes an env started in the worker's group (the default for `subprocess`, `os.system`
//! and most simulators' helpers) go with it. When the trainer is killed with SIGKILL there is no
//! supervisor left: the kernel kills the worker (its parent-death signal), but nothing kills the
//! rest of its group, and a helper that ignores SIGTERM (or was never told) runs on, orphaned.
//!
//! So each worker forks a guardian first thing, before it maps anything or starts a thread of
//! its own: a process in the worker's group that holds nothing but a pidfd of the worker and
//! sleeps in `poll` on it. When the worker ends, however it ends, the guardian SIGKILLs the
//! worker's process group, itself included. The group id cannot name anyone else then: a
//! process group's id is not reused while any process is in the group, and the guardian is.
//!
//! The guardian ignores SIGINT, SIGTERM and SIGHUP (the supervisor's orderly SIGTERM to the
//! group is for the worker, which closes its envs; the guardian must outlive it), keeps no
//! descriptor but the pidfd (no segment, no lifeline, no stdio), and is named `pycollect-grd`.
//! SIGKILL of the guardian alone leaves the worker as it was before guardians existed.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use rustix::process::{getpgid, getpid, pidfd_open, Pid, PidfdFlags};

/// The guardian's process name (`/proc/<pid>/comm`, at most 15 characters).
pub const GUARDIAN_COMM: &[u8] = b"pycollect-grd\0";

/// Forks a guardian of the calling process's group (see the module docs); its pid.
///
/// Returns `Ok(None)` when the caller does not lead its own process group (a process that is
/// not a worker): killing the group it is in would kill others.
///
/// Call it while the process maps nothing it must let go of: the guardian gets a copy of
/// every mapping (it closes every descriptor at once, but mappings stay until it exits).
pub fn guard_process_group() -> io::Result<Option<Pid>> {
    let me = getpid();
    if getpgid(None)? != me {
        return Ok(None);
    }
    // Opened here, before the fork: the guardian can never watch the wrong process.
    let pidfd = pidfd_open(me, PidfdFlags::empty())?;
    // SAFETY: the child runs `guard` only, which makes async-signal-safe system calls (no
    // allocation, no locks) and never returns, so forking a process that may have other
    // threads is sound. The parent only learns the child's pid.
    let child = unsafe { libc::fork() };
    match child {
        -1 => Err(io::Error::last_os_error()),
        0 => guard(pidfd.as_raw_fd(), me.as_raw_pid()),
        pid => Ok(Pid::from_raw(pid)),
    }
}

/// The guardian's whole life: wait for the worker to end, then SIGKILL its group.
fn guard(pidfd: RawFd, group: libc::pid_t) -> ! {
    // SAFETY: plain system calls on values this process owns (the inherited pidfd, its own
    // descriptors and signal dispositions), all of them async-signal-safe, as the child of a
    // fork must make; nothing here allocates or takes a lock.
    unsafe {
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::signal(signal, libc::SIG_IGN);
        }
        close_all_but(pidfd);
        libc::prctl(libc::PR_SET_NAME, GUARDIAN_COMM.as_ptr());
        let mut watched = libc::pollfd {
            fd: pidfd,
            events: libc::POLLIN,
            revents: 0,
        };
        // A pidfd polls readable once its process has ended; EINTR (a stopped and continued
        // guardian) just waits again. Any other error means there is nothing to watch.
        loop {
            match libc::poll(&mut watched, 1, -1) {
                n if n > 0 => break,
                0 => continue,
                _ if *libc::__errno_location() == libc::EINTR => continue,
                _ => libc::_exit(1),
            }
        }
        libc::kill(-group, libc::SIGKILL);
        libc::_exit(0)
    }
}

/// Closes every descriptor but `keep` (async-signal-safe).
///
/// # Safety
///
/// Only for a freshly forked child that owns no descriptor it still needs.
unsafe fn close_all_but(keep: RawFd) {
    let keep = keep as libc::c_uint;
    // SAFETY: close_range(2) only closes descriptors; the caller owns them all.
    let ranged = unsafe {
        (keep == 0 || libc::syscall(libc::SYS_close_range, 0, keep - 1, 0) == 0)
            && libc::syscall(libc::SYS_close_range, keep + 1, libc::c_uint::MAX, 0) == 0
    };
    if !ranged {
        // A kernel before 5.9: one close per possible number, up to the descriptor limit.
        // SAFETY: sysconf and close are async-signal-safe; closing an unused number is a no-op.
        let max = unsafe { libc::sysconf(libc::_SC_OPEN_MAX) }.clamp(1024, 1 << 16) as libc::c_int;
        for fd in (0..max).filter(|&fd| fd != keep as libc::c_int) {
            // SAFETY: as above.
            unsafe { libc::close(fd) };
        }
    }
}

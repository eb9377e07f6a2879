//! Building and spawning one worker process: process group, parent-death signal, lifeline
//! pipe and passed fds.
//!
//! # The child's side of the contract
//!
//! * It runs in its own process group (pgid = its pid). Terminal Ctrl-C does not reach it;
//!   the supervisor signals the whole group, so anything the worker starts in its group is
//!   stopped with it.
//! * `PR_SET_PDEATHSIG(SIGKILL)` is set before `exec`: if the supervisor thread (and so, in
//!   practice, the trainer) dies, the kernel kills the worker. Not inherited by the worker's
//!   own children; those are covered by the group kill, and a worker that wants them to die
//!   with it should give them their own parent-death signal.
//! * Lifeline: the env var [`LIFELINE_FD_ENV`] holds the number of an fd that is the read end
//!   of a pipe. The supervisor never writes to it; it only closes its write end, which the
//!   worker sees as EOF (`read` returns 0, `poll` reports `POLLHUP`). EOF means "the supervisor
//!   is gone or has finished with you": exit promptly, even if the shared-memory shutdown flag
//!   was never seen. Any data read from it is to be ignored. Keep the fd open while running.
//! * [`SUPERVISOR_PID_ENV`] holds the supervisor's pid, for a worker that wants to check
//!   `os.getppid()` itself.
//! * A worker forked by a fork server gets the same process group, lifeline, env vars and fds;
//!   it arms its parent-death signal itself once it has been reparented to the supervisor's
//!   process, and first reads one byte from its lifeline (see `forkserver.rs`).
//! * It runs in the command's working directory, else in the supervisor process's, else (that
//!   one was removed) in `/`.
//! * Each fd passed with [`WorkerLaunch::pass_fd`] is open at exactly the requested number,
//!   without `FD_CLOEXEC`. Every other fd of the supervisor process that is marked close-on-exec
//!   stays out of the child.

use std::ffi::OsStr;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use rustix::io::{fcntl_dupfd_cloexec, Errno};
use rustix::pipe::{pipe_with, PipeFlags};
use rustix::process::{
    getppid, kill_process_group, pidfd_open, set_parent_process_death_signal, waitpid, Pid,
    PidfdFlags, Signal, WaitOptions,
};

use super::events::LaunchedBy;
use super::forkserver::ForkServer;
use super::reaper::LiveChild;
use super::SupervisorError;

/// Env var that tells the worker the fd number of its lifeline (read end of a pipe).
pub const LIFELINE_FD_ENV: &str = "PYCOLLECT_LIFELINE_FD";
/// Env var that tells the worker the supervisor's pid.
pub const SUPERVISOR_PID_ENV: &str = "PYCOLLECT_SUPERVISOR_PID";
/// Highest fd number a child may ask for (numbers must also fit the soft `RLIMIT_NOFILE`).
pub const MAX_CHILD_FD: RawFd = 1023;

/// What to run for one generation of one worker: a `Command` plus fds to hand over.
///
/// Built by the caller's [`Launcher`](super::Launcher). The supervisor adds the process group,
/// the parent-death signal, the lifeline and the env vars; do not set `process_group` or
/// `pre_exec` yourself. Stdio is inherited unless you configure it on the command; piped stdio
/// is not read by the supervisor (the pipes are closed after spawning).
#[derive(Debug)]
pub struct WorkerLaunch {
    command: Command,
    fds: Vec<(OwnedFd, RawFd)>,
}

impl WorkerLaunch {
    /// Runs `program` (looked up in `PATH` like [`Command::new`]).
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        Self::from_command(Command::new(program))
    }

    /// Wraps a command that already has its args, env, cwd and stdio.
    pub fn from_command(command: Command) -> Self {
        Self {
            command,
            fds: Vec::new(),
        }
    }

    /// Adds one argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.command.arg(arg);
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command.args(args);
        self
    }

    /// Sets one env var for the child.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.command.env(key, value);
        self
    }

    /// Hands `fd` to the child as fd number `child_fd` (3..=[`MAX_CHILD_FD`], not the lifeline
    /// number, each number once). The supervisor closes its copy after spawning, so pass a
    /// duplicate (`try_clone`) of anything you keep.
    pub fn pass_fd(mut self, fd: impl Into<OwnedFd>, child_fd: RawFd) -> Self {
        self.fds.push((fd.into(), child_fd));
        self
    }

    /// The underlying command, for settings the builder methods do not cover.
    pub fn command_mut(&mut self) -> &mut Command {
        &mut self.command
    }

    fn check_fds(&self, worker: usize, lifeline_fd: RawFd) -> Result<(), SupervisorError> {
        for (i, &(_, n)) in self.fds.iter().enumerate() {
            let reason = if !(3..=MAX_CHILD_FD).contains(&n) {
                Some("must be in 3..=1023 (0-2 are stdio; configure those on the command)")
            } else if n == lifeline_fd {
                Some("it is the lifeline fd number")
            } else if self.fds[..i].iter().any(|&(_, m)| m == n) {
                Some("requested twice")
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(SupervisorError::InvalidFdNumber {
                    worker,
                    fd: n,
                    reason,
                });
            }
        }
        Ok(())
    }
}

/// Where the supervisor stands when it spawns: fixed for its lifetime.
#[derive(Debug)]
pub(crate) struct SpawnContext {
    /// The supervisor process's pid, which the child checks with `getppid()`.
    pub parent: Pid,
    /// fd number of the lifeline in the child.
    pub lifeline_fd: RawFd,
    /// Any open fd, duplicated to fill free low fd numbers while spawning (see `reserve_low_fds`).
    pub placeholder: OwnedFd,
    /// Where launches go first, if anywhere (see `forkserver.rs`); fork+exec otherwise.
    pub fork_server: Option<ForkServer>,
}

/// Spawns one generation, through the fork server if there is a usable one, else (or if
/// that fails) with fork+exec. Must run on the supervisor's long-lived thread: the kernel ties
/// `PR_SET_PDEATHSIG` to the *thread* that forks (for exec'd children) and the subreaper
/// reparenting makes a fork-server worker this process's child.
pub(crate) fn spawn_worker(
    ctx: &mut SpawnContext,
    worker: usize,
    generation: u64,
    launch: WorkerLaunch,
) -> Result<(LiveChild, LaunchedBy), SupervisorError> {
    launch.check_fds(worker, ctx.lifeline_fd)?;
    let mut launch = launch;
    launch
        .command
        .env(LIFELINE_FD_ENV, ctx.lifeline_fd.to_string())
        .env(SUPERVISOR_PID_ENV, ctx.parent.as_raw_pid().to_string());
    if launch.command.get_current_dir().is_none() && std::env::current_dir().is_err() {
        // Our working directory was removed: no process can start in it (and a fork-server
        // request must name one), so the worker starts in `/`. pycollect warns about it.
        launch.command.current_dir("/");
    }
    let mut launched_by = LaunchedBy::Exec;
    if let Some(server) = ctx.fork_server.as_mut() {
        if server.broken().is_none() {
            // A failure is recorded in `broken` and reported with the exec launch below.
            if let Ok(child) =
                server.spawn(ctx.parent, ctx.lifeline_fd, &launch.command, &launch.fds)
            {
                return Ok((child, LaunchedBy::ForkServer));
            }
        }
        if let Some(reason) = server.broken() {
            launched_by = LaunchedBy::ExecFallback {
                reason: reason.to_owned(),
            };
        }
    }
    spawn_exec(ctx, worker, generation, launch).map(|child| (child, launched_by))
}

/// Spawns one generation with fork+exec.
fn spawn_exec(
    ctx: &SpawnContext,
    worker: usize,
    generation: u64,
    launch: WorkerLaunch,
) -> Result<LiveChild, SupervisorError> {
    let WorkerLaunch { mut command, fds } = launch;
    let program = command.get_program().to_string_lossy().into_owned();
    let spawn_err = |source: io::Error| SupervisorError::Spawn {
        worker,
        generation,
        program: program.clone(),
        source,
    };

    // Both ends close-on-exec: the read end reaches the child only through the dup2 below,
    // the write end never reaches any child.
    let (lifeline_r, lifeline_w) =
        pipe_with(PipeFlags::CLOEXEC).map_err(|e| SupervisorError::os("pipe", e))?;

    let max_target = fds
        .iter()
        .map(|&(_, n)| n)
        .chain([ctx.lifeline_fd])
        .max()
        .unwrap_or(ctx.lifeline_fd);

    // Keep every fd number up to `max_target` occupied until `spawn` returns, so that the
    // close-on-exec pipe std creates internally to report exec errors lands above it. If it
    // landed on a target number, our dup2 in the child would replace it, and a failed exec
    // would then write its error bytes into the passed fd (e.g. the shared-memory segment).
    let _holders = reserve_low_fds(ctx.placeholder.as_fd(), max_target)?;

    // Move every source above all target numbers, so that no dup2 in the child can overwrite
    // a source that a later dup2 still needs. The copies are close-on-exec and vanish at exec.
    let mut relocated: Vec<OwnedFd> = Vec::with_capacity(fds.len() + 1);
    let mut plan: Vec<(RawFd, RawFd)> = Vec::with_capacity(fds.len() + 1);
    for (fd, target) in std::iter::once((lifeline_r, ctx.lifeline_fd)).chain(fds) {
        let high = fcntl_dupfd_cloexec(&fd, max_target + 1)
            .map_err(|e| SupervisorError::os("fcntl(F_DUPFD_CLOEXEC)", e))?;
        plan.push((high.as_raw_fd(), target));
        relocated.push(high);
    }

    let parent = ctx.parent;
    command.process_group(0);
    // SAFETY: `child_setup` only makes async-signal-safe system calls (prctl, getppid, dup3)
    // on memory that was allocated before the fork (`plan`), takes no locks and does not
    // allocate, which is what `pre_exec` requires of code running between fork and exec in a
    // possibly multi-threaded parent. The fds in `plan` stay open in the parent until `spawn`
    // returns because `relocated` owns them.
    unsafe {
        command.pre_exec(move || child_setup(parent, &plan));
    }
    let child = command.spawn().map_err(spawn_err)?;
    drop(relocated);

    let pid = Pid::from_child(&child);
    // Drop std's handle (and any stdio pipes): from here on the pidfd is the only way we
    // address the child. Dropping a `Child` neither waits nor kills.
    drop(child);
    match pidfd_open(pid, PidfdFlags::empty()) {
        Ok(pidfd) => Ok(LiveChild::new(pid, pidfd, lifeline_w)),
        Err(e) => {
            // Cannot happen for our own unreaped child short of fd exhaustion. The child is
            // unreaped, so its pid cannot have been reused: kill its group and reap it by pid.
            let _ = kill_process_group(pid, Signal::KILL);
            let _ = waitpid(Some(pid), WaitOptions::empty());
            Err(SupervisorError::os("pidfd_open", e))
        }
    }
}

/// Arms `PR_SET_PDEATHSIG` with signal number `sig` for the calling thread's process: for a
/// worker forked by a fork server, once it has been reparented to the supervisor's process
/// (see `forkserver.rs`). Fails with `EINVAL` for a number that names no signal.
pub fn set_parent_death_signal(sig: i32) -> io::Result<()> {
    let signal = Signal::from_named_raw(sig).ok_or(Errno::INVAL)?;
    set_parent_process_death_signal(Some(signal))?;
    Ok(())
}

/// Runs in the child between fork and exec. Async-signal-safe system calls only: no
/// allocation, no locks, no panics (errors are returned, std reports them to the parent as a
/// spawn error and exits the child).
fn child_setup(parent: Pid, plan: &[(RawFd, RawFd)]) -> io::Result<()> {
    set_parent_process_death_signal(Some(Signal::KILL))?;
    // The parent-death signal is only armed if the parent is still alive now; if it died
    // between fork and prctl we were already reparented and must not run at all.
    if getppid() != Some(parent) {
        return Err(Errno::SRCH.into());
    }
    for &(src, target) in plan {
        // SAFETY: `src` is one of the relocated fds, open in the parent when it forked (the
        // parent keeps them until spawn returns), so it is open here.
        let src = unsafe { BorrowedFd::borrow_raw(src) };
        // SAFETY: dup2 needs an `OwnedFd` as the target; `ManuallyDrop` makes sure this
        // wrapper never closes `target`, whose only owner after exec is the new program.
        let mut target = ManuallyDrop::new(unsafe { OwnedFd::from_raw_fd(target) });
        // dup3(src, target, 0): the new fd does not have FD_CLOEXEC, so it survives exec.
        rustix::io::dup2(src, &mut target)?;
    }
    Ok(())
}

/// Occupies every free fd number in `3..=max` with a close-on-exec duplicate of `placeholder`
/// and returns the duplicates; numbers already in use (by anyone) are left alone.
fn reserve_low_fds(
    placeholder: BorrowedFd<'_>,
    max: RawFd,
) -> Result<Vec<OwnedFd>, SupervisorError> {
    let mut holders = Vec::new();
    for n in 3..=max {
        let fd = fcntl_dupfd_cloexec(placeholder, n)
            .map_err(|e| SupervisorError::os("fcntl(F_DUPFD_CLOEXEC)", e))?;
        // F_DUPFD returns the lowest free number >= n: exactly n means n was free and is now
        // ours; anything higher means n is taken, and the extra copy goes right back.
        if fd.as_raw_fd() == n {
            holders.push(fd);
        }
    }
    Ok(holders)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devnull() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    #[test]
    fn rejects_bad_fd_numbers() {
        for (fds, bad) in [
            (vec![2], 2),
            (vec![MAX_CHILD_FD + 1], MAX_CHILD_FD + 1),
            (vec![3], 3),
            (vec![5, 6, 5], 5),
        ] {
            let mut l = WorkerLaunch::new("true");
            for n in fds {
                l = l.pass_fd(devnull(), n);
            }
            match l.check_fds(4, 3) {
                Err(SupervisorError::InvalidFdNumber { worker: 4, fd, .. }) => assert_eq!(fd, bad),
                other => panic!("expected InvalidFdNumber({bad}), got {other:?}"),
            }
        }
        let l = WorkerLaunch::new("true")
            .pass_fd(devnull(), 4)
            .pass_fd(devnull(), 9);
        assert!(l.check_fds(0, 3).is_ok());
    }

    #[test]
    fn reserve_fills_only_free_numbers() {
        let p = devnull();
        let holders = reserve_low_fds(p.as_fd(), 40).unwrap();
        for h in &holders {
            assert!((3..=40).contains(&h.as_raw_fd()));
        }
    }
}

//! Starting a worker through a fork server instead of fork+exec.
//!
//! A fork server is a process (started by the embedding program, e.g. pycollect's
//! `python -m pycollect.worker --fork-server`) that has already paid for its imports and forks
//! a worker on request. The supervisor keeps every guarantee of an exec'd worker because the
//! worker ends up as a *real child of the supervisor's process*:
//!
//! 1. While a request is in flight, the supervisor process is a child subreaper
//!    (`PR_SET_CHILD_SUBREAPER`). This setting is process-wide: while it is on, *any*
//!    orphaned descendant of the process is reparented to it instead of to init, and stays a
//!    zombie until this process reaps it or exits. So it is on only from just before a request
//!    is sent until its reply has come (counted across all supervisors of the process, see
//!    [`SubreaperGuard`]), and left alone if the process was a subreaper already. Once a worker
//!    is our child it stays our child: turning the setting off does not reparent anyone.
//! 2. The request (one `SOCK_SEQPACKET` message) carries the supervisor's pid, the cwd, the
//!    complete environment and, with `SCM_RIGHTS`, the supervisor's stdio, the lifeline read
//!    end and every passed fd, each with its target number.
//! 3. The server forks a middle child, which forks the worker and `_exit`s at once: the worker
//!    is reparented to the nearest subreaper, this process. The server reaps the middle child
//!    *before* it replies `ok <pid>`, so when the pid arrives the worker is already our child:
//!    `pidfd_open` + `waitid(P_PIDFD)` work exactly as for an exec'd child, and the pid cannot be
//!    reused because only we can reap it.
//! 4. The worker sets its own process group, waits until its parent is the supervisor process,
//!    arms `PR_SET_PDEATHSIG(SIGKILL)` (only now: the middle child's exit would otherwise
//!    fire it) and re-checks its parent. Then it waits for one byte on its lifeline, which the
//!    supervisor writes only once it holds the worker's pidfd; EOF instead means the supervisor
//!    gave up on this launch (lost reply), and the worker exits without touching anything, so
//!    a launch that fell back to exec can never leave two processes working for one worker.
//!
//! Any failure (server gone, refusing because it is multi-threaded, bad reply, timeout) marks
//! the server unusable for this supervisor and the launch falls back to fork+exec.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use rustix::pipe::{pipe_with, PipeFlags};
use rustix::process::{
    child_subreaper, getpid, pidfd_open, pidfd_send_signal, set_child_subreaper, waitid, Pid,
    PidfdFlags, Signal, WaitId, WaitIdOptions,
};

use super::reaper::{wait_readable, LiveChild};

/// How long the supervisor waits for the server's reply. The embedding program hands over a
/// connection only once the server is done with its imports and has answered on it (pycollect
/// checks both right before it starts the supervisor), so a healthy server answers within
/// milliseconds (one fork); this bounds what a server that stops answering later (stopped,
/// wedged) costs: one wait, after which this supervisor uses fork+exec. A dead server answers
/// at once (EOF).
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// The supervisor's connection to a fork server and whether it still uses it.
#[derive(Debug)]
pub(crate) struct ForkServer {
    socket: OwnedFd,
    /// Why the server is no longer used (the first failure); `None` while it is.
    broken: Option<String>,
}

impl ForkServer {
    pub(crate) fn new(socket: OwnedFd) -> Self {
        Self {
            socket,
            broken: None,
        }
    }

    /// Why launches no longer go through the server, if they do not.
    pub(crate) fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Asks the server for one worker. On error the server is marked unusable and the
    /// message says why; nothing of the attempt is left running under our supervision (a
    /// worker whose pid we never learnt exits on its own: its lifeline read end sees EOF).
    pub(crate) fn spawn(
        &mut self,
        parent: Pid,
        lifeline_fd: RawFd,
        command: &Command,
        fds: &[(OwnedFd, RawFd)],
    ) -> Result<LiveChild, String> {
        match self.try_spawn(parent, lifeline_fd, command, fds) {
            Ok(child) => Ok(child),
            Err(e) => {
                self.broken.get_or_insert_with(|| e.clone());
                Err(e)
            }
        }
    }

    fn try_spawn(
        &mut self,
        parent: Pid,
        lifeline_fd: RawFd,
        command: &Command,
        fds: &[(OwnedFd, RawFd)],
    ) -> Result<LiveChild, String> {
        // Process-wide, see the module docs; held until the reply is in.
        let _subreaper =
            SubreaperGuard::new().map_err(|e| format!("prctl(PR_SET_CHILD_SUBREAPER): {e}"))?;
        let (lifeline_r, lifeline_w) =
            pipe_with(PipeFlags::CLOEXEC).map_err(|e| format!("pipe: {e}"))?;

        let stdin = std::io::stdin();
        let stdout = std::io::stdout();
        let stderr = std::io::stderr();
        let mut send: Vec<BorrowedFd<'_>> = vec![stdin.as_fd(), stdout.as_fd(), stderr.as_fd()];
        let mut targets: Vec<RawFd> = vec![0, 1, 2];
        send.push(lifeline_r.as_fd());
        targets.push(lifeline_fd);
        for (fd, target) in fds {
            send.push(fd.as_fd());
            targets.push(*target);
        }
        let cwd = worker_dir(command);
        let message = encode_request(parent, &cwd, &targets, resolved_env(command));

        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(send.len()))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&send)) {
            return Err("too many descriptors for one message".into());
        }
        // NOSIGNAL: a dead server must be an error here, not a SIGPIPE for the trainer.
        sendmsg(
            &self.socket,
            &[IoSlice::new(&message)],
            &mut control,
            SendFlags::NOSIGNAL,
        )
        .map_err(|e| format!("fork server unreachable: {e}"))?;
        // Only the worker may hold the read end: if it never learns to run, it sees EOF once
        // `lifeline_w` is dropped.
        drop(lifeline_r);

        let reply = self.read_reply()?;
        let pid = parse_reply(&reply)?;
        let pidfd = pidfd_open(pid, PidfdFlags::empty())
            .map_err(|e| format!("pidfd_open({}) of the forked worker: {e}", pid.as_raw_pid()))?;
        // A worker the kernel did not reparent to us (we are not its subreaper after all)
        // cannot be reaped or supervised: kill it through its pidfd, which cannot name anyone
        // else, and let exec take over.
        let peek = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        if let Err(e) = waitid(WaitId::PidFd(pidfd.as_fd()), peek) {
            let _ = pidfd_send_signal(&pidfd, Signal::KILL);
            return Err(format!(
                "forked worker {} is not our child ({e})",
                pid.as_raw_pid()
            ));
        }
        // Go: the worker now runs. If it is already gone the write fails (EPIPE, no SIGPIPE
        // for Python, which ignores it) and supervision reaps it like any exit.
        let _ = rustix::io::write(&lifeline_w, b"g");
        Ok(LiveChild::new(pid, pidfd, lifeline_w))
    }

    fn read_reply(&self) -> Result<Vec<u8>, String> {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            let ready = wait_readable(&[self.socket.as_fd()], Some(deadline))
                .map_err(|e| format!("poll on the fork server: {e}"))?;
            if ready.is_empty() {
                return Err(format!(
                    "no reply from the fork server in {} s",
                    REPLY_TIMEOUT.as_secs()
                ));
            }
            let mut buf = [0u8; 512];
            match rustix::io::read(&self.socket, &mut buf) {
                Ok(0) => return Err("the fork server is gone".into()),
                Ok(n) => return Ok(buf[..n].to_vec()),
                Err(Errno::INTR | Errno::AGAIN) => continue,
                Err(e) => return Err(format!("reading the fork server's reply: {e}")),
            }
        }
    }
}

/// Requests in flight in this process, and whether it was a subreaper before the first.
static SUBREAPER: Mutex<(usize, bool)> = Mutex::new((0, false));

/// Keeps this process a child subreaper while at least one guard lives (see the module docs).
struct SubreaperGuard;

impl SubreaperGuard {
    fn new() -> Result<Self, Errno> {
        // The count stays consistent even if a holder panicked: it is updated in one step.
        let mut state = SUBREAPER.lock().unwrap_or_else(|e| e.into_inner());
        if state.0 == 0 {
            state.1 = child_subreaper()?.is_some();
            if !state.1 {
                // Any non-zero argument turns it on.
                set_child_subreaper(Some(getpid()))?;
            }
        }
        state.0 += 1;
        Ok(Self)
    }
}

impl Drop for SubreaperGuard {
    fn drop(&mut self) {
        let mut state = SUBREAPER.lock().unwrap_or_else(|e| e.into_inner());
        state.0 -= 1;
        if state.0 == 0 && !state.1 {
            let _ = set_child_subreaper(None);
        }
    }
}

/// Where the worker runs: the command's directory, else ours, else (ours was removed) `/`,
/// as for an exec'd worker (see `spawn_worker`).
fn worker_dir(command: &Command) -> std::path::PathBuf {
    match command.get_current_dir() {
        Some(dir) => dir.to_path_buf(),
        None => std::env::current_dir().unwrap_or_else(|_| "/".into()),
    }
}

/// The environment the exec'd child would get: ours now, with the command's changes.
fn resolved_env(command: &Command) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => env.insert(key.to_owned(), value.to_owned()),
            None => env.remove(key),
        };
    }
    env
}

/// `spawn\0<parent pid>\0<cwd>\0<target,target,...>\0KEY=VALUE\0...`: NUL can be in none of
/// these (paths and environment entries are C strings).
fn encode_request(
    parent: Pid,
    cwd: &std::path::Path,
    targets: &[RawFd],
    env: BTreeMap<OsString, OsString>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(4096);
    out.extend_from_slice(b"spawn\0");
    out.extend_from_slice(parent.as_raw_pid().to_string().as_bytes());
    out.push(0);
    out.extend_from_slice(cwd.as_os_str().as_bytes());
    out.push(0);
    let targets: Vec<String> = targets.iter().map(ToString::to_string).collect();
    out.extend_from_slice(targets.join(",").as_bytes());
    out.push(0);
    for (key, value) in env {
        out.extend_from_slice(key.as_bytes());
        out.push(b'=');
        out.extend_from_slice(value.as_bytes());
        out.push(0);
    }
    out
}

/// `ok <pid>`, or `refused <why>` / `error <why>`.
fn parse_reply(reply: &[u8]) -> Result<Pid, String> {
    let text = String::from_utf8_lossy(reply);
    if let Some(pid) = text.strip_prefix("ok ") {
        return pid
            .trim()
            .parse::<i32>()
            .ok()
            .and_then(Pid::from_raw)
            .ok_or_else(|| format!("bad reply from the fork server: {text:?}"));
    }
    Err(format!("the fork server did not start the worker: {text}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_layout() {
        let mut env = BTreeMap::new();
        env.insert(OsString::from("A"), OsString::from("1=2"));
        let msg = encode_request(
            Pid::from_raw(42).unwrap(),
            std::path::Path::new("/tmp"),
            &[0, 1, 2, 3, 4],
            env,
        );
        assert_eq!(msg, b"spawn\x0042\x00/tmp\x000,1,2,3,4\x00A=1=2\x00");
    }

    #[test]
    fn the_workers_directory_is_the_commands_else_ours() {
        let mut command = Command::new("true");
        assert_eq!(worker_dir(&command), std::env::current_dir().unwrap());
        command.current_dir("/tmp");
        assert_eq!(worker_dir(&command), std::path::Path::new("/tmp"));
    }

    #[test]
    fn replies() {
        assert_eq!(parse_reply(b"ok 1234").unwrap().as_raw_pid(), 1234);
        assert!(parse_reply(b"ok x").is_err());
        assert!(parse_reply(b"refused: 3 threads")
            .unwrap_err()
            .contains("3 threads"));
    }
}

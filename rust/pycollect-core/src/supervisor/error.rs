//! The one error type of the supervisor.

use std::fmt;
use std::io;
use std::os::fd::RawFd;

/// Everything that can go wrong when configuring, starting or stopping a [`Supervisor`].
///
/// `Display` names the bad value (worker index, fd number, program, field) so that the Python
/// side can show it to the user unchanged.
///
/// [`Supervisor`]: super::Supervisor
#[derive(Debug)]
#[non_exhaustive]
pub enum SupervisorError {
    /// A configuration value is out of range.
    InvalidConfig {
        /// Name of the offending field, e.g. `"workers"`.
        field: &'static str,
        /// The rejected value, formatted.
        value: String,
        /// What the value must satisfy.
        reason: &'static str,
    },
    /// A [`WorkerLaunch`](super::WorkerLaunch) asked for a child fd number that cannot be used.
    InvalidFdNumber {
        /// Worker index.
        worker: usize,
        /// The requested fd number in the child.
        fd: RawFd,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The caller's launcher failed to describe the command for a worker.
    Launcher {
        /// Worker index.
        worker: usize,
        /// Generation that was about to start.
        generation: u64,
        /// The launcher's error.
        source: io::Error,
    },
    /// The worker process could not be spawned (program missing, fork failed, ...).
    Spawn {
        /// Worker index.
        worker: usize,
        /// Generation that was about to start.
        generation: u64,
        /// The program that was to be executed.
        program: String,
        /// The OS error.
        source: io::Error,
    },
    /// A system call the supervisor itself needs failed.
    Os {
        /// What the supervisor was doing, e.g. `"pidfd_open"`.
        op: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The supervisor thread panicked (a bug); its children were killed by `PR_SET_PDEATHSIG`
    /// when it died.
    ThreadPanicked,
}

impl fmt::Display for SupervisorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidConfig {
                field,
                value,
                reason,
            } => write!(f, "invalid supervisor setting {field} = {value}: {reason}"),
            Self::InvalidFdNumber { worker, fd, reason } => {
                write!(f, "worker {worker}: cannot pass fd number {fd}: {reason}")
            }
            Self::Launcher {
                worker,
                generation,
                source,
            } => write!(
                f,
                "worker {worker} generation {generation}: launcher failed: {source}"
            ),
            Self::Spawn {
                worker,
                generation,
                program,
                source,
            } => write!(
                f,
                "worker {worker} generation {generation}: cannot spawn {program:?}: {source}"
            ),
            Self::Os { op, source } => write!(f, "supervisor: {op} failed: {source}"),
            Self::ThreadPanicked => write!(f, "the supervisor thread panicked"),
        }
    }
}

impl std::error::Error for SupervisorError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Launcher { source, .. }
            | Self::Spawn { source, .. }
            | Self::Os { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl SupervisorError {
    pub(crate) fn os(op: &'static str, source: impl Into<io::Error>) -> Self {
        Self::Os {
            op,
            source: source.into(),
        }
    }
}

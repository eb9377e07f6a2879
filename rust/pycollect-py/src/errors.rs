//! The one place where native errors become Python exceptions.
//!
//! The exception classes are defined in Python (`pycollect.exceptions`), so every error the
//! package raises shares the `PyCollectError` root; here we only pick the class. No other
//! file of the bindings names an exception class: they call the helpers below
//! ([`config_error`], [`transport_error`], [`buffer_export_error`], [`supervisor_error`]) for
//! errors of their own, and [`py_err`] / [`py_err_in`] for errors of the core, whose class is
//! decided by one `match` per core error type ([`NativeError::kind`]).
//!
//! The rule:
//! * a bad value passed by the caller: `ConfigError` (a `ValueError`); the message names it;
//! * a segment of another layout, ABI or build (or no segment at all): `LayoutMismatchError`;
//! * a runtime failure of the shared-memory transport (a system call, a corrupt slot, a
//!   publish that timed out, every weight buffer pinned): `TransportError`;
//! * worker processes that could not be started, watched or stopped: `SupervisorError`;
//! * a refused buffer-protocol export: `BufferExportError` (a `BufferError`).

use std::fmt::Display;

use pycollect_core::header::HeaderError;
use pycollect_core::supervisor::SupervisorError as CoreSupervisorError;
use pycollect_core::ExchangeError;
use pycollect_core::{LayoutError, RingError, SegmentError, WeightsError};
use pyo3::PyErr;

/// The Python classes, private to this file so that nothing else constructs them.
mod classes {
    pyo3::import_exception!(pycollect.exceptions, ConfigError);
    pyo3::import_exception!(pycollect.exceptions, TransportError);
    pyo3::import_exception!(pycollect.exceptions, LayoutMismatchError);
    pyo3::import_exception!(pycollect.exceptions, BufferExportError);
    pyo3::import_exception!(pycollect.exceptions, SupervisorError);
}

/// Which Python class an error is raised as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `pycollect.ConfigError`: a bad value passed by the caller.
    Config,
    /// `pycollect.TransportError`: the shared-memory transport failed at run time.
    Transport,
    /// `pycollect.LayoutMismatchError`: a segment of another layout, ABI or build.
    LayoutMismatch,
    /// `pycollect.exceptions.BufferExportError`: a buffer export was refused.
    BufferExport,
    /// `pycollect.exceptions.SupervisorError`: worker processes could not be managed.
    Supervisor,
}

impl Kind {
    /// The Python exception of this class with `message`.
    fn error(self, message: String) -> PyErr {
        match self {
            Self::Config => classes::ConfigError::new_err(message),
            Self::Transport => classes::TransportError::new_err(message),
            Self::LayoutMismatch => classes::LayoutMismatchError::new_err(message),
            Self::BufferExport => classes::BufferExportError::new_err(message),
            Self::Supervisor => classes::SupervisorError::new_err(message),
        }
    }
}

/// A `ConfigError`: the caller passed a bad value (`message` names it).
pub(crate) fn config_error(message: impl Into<String>) -> PyErr {
    Kind::Config.error(message.into())
}

/// A `TransportError`: the shared-memory transport failed at run time.
pub(crate) fn transport_error(message: impl Into<String>) -> PyErr {
    Kind::Transport.error(message.into())
}

/// A `BufferExportError`: a buffer-protocol export was refused.
pub(crate) fn buffer_export_error(message: impl Into<String>) -> PyErr {
    Kind::BufferExport.error(message.into())
}

/// A `SupervisorError`: worker processes could not be started, watched or stopped.
pub(crate) fn supervisor_error(message: impl Into<String>) -> PyErr {
    Kind::Supervisor.error(message.into())
}

/// An error of the core, which knows which Python class it is raised as.
pub(crate) trait NativeError: Display {
    /// The Python class of this error.
    fn kind(&self) -> Kind;
}

/// The Python exception for a core error; its message is the error's `Display`.
pub(crate) fn py_err<E: NativeError>(e: E) -> PyErr {
    e.kind().error(e.to_string())
}

/// Like [`py_err`], with `context` (what was being done) before the error's text.
pub(crate) fn py_err_in<E: NativeError>(context: &str, e: E) -> PyErr {
    e.kind().error(format!("{context}: {e}"))
}

impl NativeError for LayoutError {
    fn kind(&self) -> Kind {
        match self {
            // Every layout value comes from the caller of `Segment.create` (a segment that
            // stores a bad layout is a `HeaderError::Layout`, mapped below).
            Self::Zero(_)
            | Self::NotPowerOfTwo { .. }
            | Self::Overflow(_)
            | Self::BadFieldName { .. }
            | Self::BadShape { .. }
            | Self::FieldCount(_)
            | Self::WeightBuffers(_)
            | Self::TooLarge { .. } => Kind::Config,
        }
    }
}

impl NativeError for HeaderError {
    fn kind(&self) -> Kind {
        match self {
            // Not a segment of this build: another program's memory, another ABI, or a header
            // this build cannot make sense of (stored values, layout or hash).
            Self::BadMagic { .. }
            | Self::AbiMismatch { .. }
            | Self::Invalid { .. }
            | Self::Layout(_)
            | Self::HashMismatch { .. } => Kind::LayoutMismatch,
        }
    }
}

impl NativeError for SegmentError {
    fn kind(&self) -> Kind {
        match self {
            Self::Os { .. } | Self::Allocate { .. } | Self::NotReady { .. } => Kind::Transport,
            // A file too small to hold a header is not a segment, like one with a bad magic.
            Self::TooSmall { .. } | Self::LayoutMismatch { .. } => Kind::LayoutMismatch,
            Self::Header(e) => e.kind(),
            Self::Layout(e) => e.kind(),
            // A worker index, a name, or a step channel asked of a segment created without.
            Self::NoSuchWorker { .. } | Self::BadName(_) | Self::NoStepChannels => Kind::Config,
            // Rings and the weights store are assembled from the segment's own layout, with
            // no value from the caller: failing to do so means the segment is inconsistent.
            Self::Ring(_) | Self::Weights(_) => Kind::Transport,
        }
    }
}

impl NativeError for RingError {
    fn kind(&self) -> Kind {
        match self {
            Self::Corrupt { .. } => Kind::Transport,
            // Misuse: committing out of claim order, releasing a slot that is not popped, a
            // capacity that is not a power of two; each names the values that disagree.
            Self::OutOfOrder { .. } | Self::NotOutstanding { .. } | Self::BadCapacity(_) => {
                Kind::Config
            }
        }
    }
}

impl NativeError for WeightsError {
    fn kind(&self) -> Kind {
        match self {
            Self::AllPinned { .. } => Kind::Transport,
            // The caller's weights do not fit, its destination is too small, or it named a
            // reader or buffer count that does not exist.
            Self::TooLarge { .. }
            | Self::DestinationTooSmall { .. }
            | Self::NoSuchReader { .. }
            | Self::BadBufferCount(_) => Kind::Config,
        }
    }
}

impl NativeError for ExchangeError {
    fn kind(&self) -> Kind {
        match self {
            // Seq words out of protocol (another writer, or corrupt memory), or a request for
            // a newer generation: this worker process has been replaced.
            Self::Corrupt { .. } | Self::Superseded { .. } => Kind::Transport,
            // Misuse by the caller, each naming the worker and the values: posting while a
            // request is pending, reading an answer that is not there, answering nothing, a
            // payload over the mailbox size, a reserved status, channels of two segments.
            Self::Pending { .. }
            | Self::NotAnswered { .. }
            | Self::NothingPosted { .. }
            | Self::Stale { .. }
            | Self::NotServing { .. }
            | Self::AlreadyServing { .. }
            | Self::TooLarge { .. }
            | Self::WrongLength { .. }
            | Self::ReservedStatus { .. }
            | Self::NothingToWait
            | Self::MixedDoorbells => Kind::Config,
        }
    }
}

impl NativeError for CoreSupervisorError {
    fn kind(&self) -> Kind {
        match self {
            Self::InvalidConfig { .. } | Self::InvalidFdNumber { .. } => Kind::Config,
            Self::Launcher { .. } | Self::Spawn { .. } | Self::Os { .. } | Self::ThreadPanicked => {
                Kind::Supervisor
            }
            // `SupervisorError` is `#[non_exhaustive]`, so rustc requires this arm in another
            // crate. A variant added to the core lands here as a SupervisorError (the class of
            // every runtime failure of the supervisor) until it is listed above.
            _ => Kind::Supervisor,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_values_layouts_and_runtime_failures_get_their_classes() {
        assert_eq!(LayoutError::Zero("steps").kind(), Kind::Config);
        let magic = HeaderError::BadMagic {
            expected: 1,
            found: 2,
        };
        assert_eq!(SegmentError::Header(magic).kind(), Kind::LayoutMismatch);
        assert_eq!(
            SegmentError::TooSmall { len: 1, need: 2 }.kind(),
            Kind::LayoutMismatch
        );
        assert_eq!(
            SegmentError::Layout(LayoutError::FieldCount(0)).kind(),
            Kind::Config
        );
        let corrupt = RingError::Corrupt {
            expected: 1,
            found: 2,
        };
        assert_eq!(corrupt.kind(), Kind::Transport);
        assert_eq!(
            WeightsError::AllPinned { buffers: 3 }.kind(),
            Kind::Transport
        );
        assert_eq!(
            WeightsError::TooLarge {
                len: 2,
                capacity: 1
            }
            .kind(),
            Kind::Config
        );
        let spawn = CoreSupervisorError::Spawn {
            worker: 0,
            generation: 1,
            program: "nope".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert_eq!(spawn.kind(), Kind::Supervisor);
        let fd = CoreSupervisorError::InvalidFdNumber {
            worker: 0,
            fd: 2,
            reason: "stdio",
        };
        assert_eq!(fd.kind(), Kind::Config);
        let pending = ExchangeError::Pending { worker: 0, seq: 1 };
        assert_eq!(pending.kind(), Kind::Config);
        let corrupt = ExchangeError::Corrupt {
            worker: 0,
            request: 3,
            response: 1,
            len: 0,
        };
        assert_eq!(corrupt.kind(), Kind::Transport);
        assert_eq!(SegmentError::NoStepChannels.kind(), Kind::Config);
    }
}

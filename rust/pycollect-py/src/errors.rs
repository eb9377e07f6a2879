//! The one place where native errors become Python exceptions.
//!
//! The exception classes are defined in Python (`pycollect.exceptions`), so every error the
//! package raises shares the `PyCollectError` root; here we only pick the class.

use pycollect_core::{CommandError, RingError, SegmentError, WeightsError};
use pyo3::exceptions::PyValueError;
use pyo3::PyErr;

pyo3::import_exception!(pycollect.exceptions, TransportError);
pyo3::import_exception!(pycollect.exceptions, LayoutMismatchError);

/// Converts any core error into the matching Python exception.
pub(crate) trait IntoPyErr {
    fn into_py_err(self) -> PyErr;
}

impl IntoPyErr for SegmentError {
    fn into_py_err(self) -> PyErr {
        match self {
            SegmentError::LayoutMismatch { .. } | SegmentError::Header(_) => {
                LayoutMismatchError::new_err(self.to_string())
            }
            SegmentError::Layout(_)
            | SegmentError::NoSuchWorker { .. }
            | SegmentError::BadName(_) => PyValueError::new_err(self.to_string()),
            _ => TransportError::new_err(self.to_string()),
        }
    }
}

impl IntoPyErr for RingError {
    fn into_py_err(self) -> PyErr {
        TransportError::new_err(self.to_string())
    }
}

impl IntoPyErr for WeightsError {
    fn into_py_err(self) -> PyErr {
        TransportError::new_err(self.to_string())
    }
}

impl IntoPyErr for CommandError {
    fn into_py_err(self) -> PyErr {
        TransportError::new_err(self.to_string())
    }
}

/// `result.map_err(IntoPyErr::into_py_err)`, shorter.
pub(crate) fn py_err<E: IntoPyErr>(e: E) -> PyErr {
    e.into_py_err()
}

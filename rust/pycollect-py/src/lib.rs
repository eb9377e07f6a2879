//! Thin PyO3 bindings over `pycollect-core`, built as the extension module `pycollect._core`.
//!
//! Argument checking, defaults and docstrings live in the Python package; this crate only
//! wraps native handles and maps native errors to Python exceptions once, here.

use pyo3::prelude::*;

/// The native half of pycollect.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", pycollect_core::VERSION)?;
    Ok(())
}

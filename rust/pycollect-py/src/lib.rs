//! Thin PyO3 bindings over `pycollect-core`, built as the extension module `pycollect._core`.
//!
//! Argument checking, defaults and docstrings for users live in the Python package; this
//! crate wraps native handles, releases the GIL around every wait, and maps native errors to
//! Python exceptions in one place (`errors.rs`).

mod blocking;
mod control;
mod errors;
mod ring;
mod segment;
mod supervisor;
mod view;
mod weights;

use pyo3::prelude::*;

/// The native half of pycollect.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", pycollect_core::VERSION)?;
    m.add("ABI_VERSION", pycollect_core::header::ABI_VERSION)?;
    m.add_class::<segment::Segment>()?;
    m.add_class::<view::SlotView>()?;
    m.add_class::<ring::Producer>()?;
    m.add_class::<ring::Consumer>()?;
    m.add_class::<ring::Lease>()?;
    m.add_class::<control::WorkerControl>()?;
    m.add_class::<control::CommandSender>()?;
    m.add_class::<control::CommandReceiver>()?;
    m.add_class::<weights::WeightsWriter>()?;
    m.add_class::<weights::WeightsReader>()?;
    m.add_class::<supervisor::Supervisor>()?;
    m.add_function(wrap_pyfunction!(ring::wait_any, m)?)?;
    m.add_function(wrap_pyfunction!(segment::sweep_stale_segments, m)?)?;
    Ok(())
}

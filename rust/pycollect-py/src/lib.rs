//! Thin PyO3 bindings over `pycollect-core`, built as the extension module `pycollect._core`.
//!
//! Argument checking, defaults and docstrings for users live in the Python package (no policy
//! default is repeated here: every setting is a required argument); this crate wraps native
//! handles, releases the GIL around every wait, reports supervision as typed objects
//! (`events.rs`), and maps native errors to Python exceptions in one place (`errors.rs`).

mod blocking;
mod control;
mod errors;
mod events;
mod exchange;
mod metrics;
mod requests;
mod ring;
mod segment;
mod stepping;
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
    m.add_class::<exchange::StepChannel>()?;
    m.add_class::<control::WorkerControl>()?;
    m.add_class::<metrics::Watch>()?;
    metrics::add_constants(m)?;
    m.add_function(wrap_pyfunction!(metrics::latency_buckets, m)?)?;
    m.add_function(wrap_pyfunction!(metrics::monotonic_time_ns, m)?)?;
    m.add_function(wrap_pyfunction!(weights::weights_digest, m)?)?;
    m.add_class::<weights::WeightsWriter>()?;
    m.add_class::<weights::WeightsReader>()?;
    m.add_class::<supervisor::Supervisor>()?;
    m.add_class::<stepping::GroupStepper>()?;
    m.add_class::<stepping::ActionWriter>()?;
    m.add_class::<stepping::StepRecorder>()?;
    // `GroupStepper`'s autoreset modes (gymnasium's `AutoresetMode`, numbered).
    m.add("AUTORESET_NEXT_STEP", stepping::AUTORESET_NEXT_STEP)?;
    m.add("AUTORESET_SAME_STEP", stepping::AUTORESET_SAME_STEP)?;
    m.add("AUTORESET_DISABLED", stepping::AUTORESET_DISABLED)?;
    m.add_class::<requests::StepRequests>()?;
    m.add_class::<events::WorkerEvent>()?;
    m.add_class::<events::WorkerExit>()?;
    m.add_class::<events::WorkerStats>()?;
    m.add_class::<events::WorkerEnding>()?;
    // The contract a worker process is started with, so that Python never repeats it.
    m.add("CHILD_LIFELINE_FD", supervisor::CHILD_LIFELINE_FD)?;
    m.add("CHILD_SEGMENT_FD", supervisor::CHILD_SEGMENT_FD)?;
    m.add("ENV_WORKER", supervisor::ENV_WORKER)?;
    m.add("ENV_GENERATION", supervisor::ENV_GENERATION)?;
    m.add("ENV_SEGMENT_FD", supervisor::ENV_SEGMENT_FD)?;
    m.add("ENV_LIFELINE_FD", supervisor::ENV_LIFELINE_FD)?;
    // Bytes of a worker's error text area (`WorkerControl.write_error` stores at most this).
    m.add(
        "WORKER_ERROR_CAPACITY",
        pycollect_core::layout::ERROR_TEXT_CAP,
    )?;
    // Bytes before a snapshot's own bytes in its area (`Segment.snapshot_view`).
    m.add("SNAPSHOT_HEADER", pycollect_core::consts::SNAPSHOT_HEADER)?;
    // Step-channel commands and statuses (the core's numbers; the core itself interprets only
    // STEP_STATUS_RESTARTED, which only `StepChannel.skip_pending` answers with).
    use pycollect_core::exchange as x;
    m.add("STEP_CMD_STEP", x::CMD_STEP)?;
    m.add("STEP_CMD_RESET", x::CMD_RESET)?;
    m.add("STEP_CMD_CALL", x::CMD_CALL)?;
    m.add("STEP_CMD_CLOSE", x::CMD_CLOSE)?;
    m.add("STEP_STATUS_OK", x::STATUS_OK)?;
    m.add("STEP_STATUS_ERROR", x::STATUS_ERROR)?;
    m.add("STEP_STATUS_RESTARTED", x::STATUS_RESTARTED)?;
    m.add_function(wrap_pyfunction!(ring::wait_any, m)?)?;
    m.add_function(wrap_pyfunction!(exchange::wait_answers, m)?)?;
    m.add_function(wrap_pyfunction!(segment::sweep_stale_segments, m)?)?;
    m.add_function(wrap_pyfunction!(segment::segment_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(supervisor::set_parent_death_signal, m)?)?;
    m.add_function(wrap_pyfunction!(supervisor::guard_process_group, m)?)?;
    Ok(())
}

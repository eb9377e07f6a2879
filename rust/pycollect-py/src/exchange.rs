//! `StepChannel`: a worker's step channel (one request/response in flight, with a mailbox), and
//! `wait_answers`, the trainer's wait for the answers of several workers.
//!
//! One object serves both ends: the trainer uses `post`, `answered`, `response`; the worker
//! uses `skip_pending`, `wait_request`, `respond`. Each end is opened on its first use, from
//! what the channel holds then. A segment handle gives out one `StepChannel` per worker (the
//! same object on every call), because each end remembers the last seq it posted or answered.
//!
//! Generations come from the worker's control block: `post` stamps each request with the one
//! there when it posts (the supervisor begins a generation just before starting its process),
//! and the worker's end takes the one there when it is opened (in a worker process, the
//! generation the supervisor started it as) and stamps it on every answer.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pycollect_core::exchange::ShmMailbox;
use pycollect_core::{
    wait_answers as core_wait_answers, Segment as CoreSegment, StepChannelMem, StepTrainer,
    StepWorker, WaitPolicy, Waited, WorkerCtl,
};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::blocking::{deadline, wait_for, wait_sliced, Slice};
use crate::errors::{config_error, py_err};
use crate::weights::byte_region;

/// A request as Python receives it: `(seq, command, arg, payload)`.
type RequestTuple<'py> = (u64, u32, u64, Bound<'py, PyBytes>);

/// Locks a mutex, ignoring poisoning: every mutation of an end is one call into the core,
/// which leaves it consistent when it returns an error.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A worker's step channel in one segment handle (see the module docs).
#[derive(Debug)]
#[pyclass(frozen, module = "pycollect._core")]
pub struct StepChannel {
    segment: Arc<CoreSegment>,
    mem: StepChannelMem<ShmMailbox>,
    control: WorkerCtl,
    trainer: Mutex<Option<StepTrainer<ShmMailbox>>>,
    worker: Mutex<Option<StepWorker<ShmMailbox>>>,
}

impl StepChannel {
    pub(crate) fn new(segment: &Arc<CoreSegment>, worker: usize) -> PyResult<Self> {
        Ok(Self {
            segment: Arc::clone(segment),
            mem: segment.step_channel(worker).map_err(py_err)?,
            control: segment.worker(worker).map_err(py_err)?,
            trainer: Mutex::new(None),
            worker: Mutex::new(None),
        })
    }

    /// Whether the segment is shutting down (every wait gives up then).
    pub(crate) fn is_shutdown(&self) -> bool {
        self.segment.is_shutdown()
    }

    /// The shared parts of the channel.
    pub(crate) fn mem(&self) -> &StepChannelMem<ShmMailbox> {
        &self.mem
    }

    /// The worker generation in the control block now (what a request is stamped for).
    pub(crate) fn control_generation(&self) -> u64 {
        self.control.generation()
    }

    /// The segment handle the channel belongs to.
    pub(crate) fn segment(&self) -> &Arc<CoreSegment> {
        &self.segment
    }

    /// Runs `f` on the trainer's end, opening it on first use.
    pub(crate) fn with_trainer<T>(&self, f: impl FnOnce(&mut StepTrainer<ShmMailbox>) -> T) -> T {
        let mut end = lock(&self.trainer);
        f(end.get_or_insert_with(|| StepTrainer::new(self.mem.clone())))
    }

    /// Runs `f` on the worker's end, opening it on first use.
    /// Worker: whether a request is posted that this end has not taken yet.
    pub(crate) fn has_request(&self) -> bool {
        self.with_worker(|w| w.has_request())
    }

    pub(crate) fn with_worker<T>(&self, f: impl FnOnce(&mut StepWorker<ShmMailbox>) -> T) -> T {
        let mut end = lock(&self.worker);
        f(end.get_or_insert_with(|| StepWorker::new(self.mem.clone(), self.control.generation())))
    }
}

#[pymethods]
impl StepChannel {
    /// Worker index.
    #[getter]
    fn worker(&self) -> usize {
        self.mem.worker()
    }

    /// Bytes each half (request, response) of the mailbox holds.
    #[getter]
    fn mailbox_bytes(&self) -> usize {
        self.mem.capacity()
    }

    /// Trainer: the latest request posted through this handle if it is unanswered.
    #[getter]
    fn pending(&self) -> Option<u64> {
        self.with_trainer(|t| t.pending())
    }

    /// Trainer: posts a request (payload: bytes-like, at most `mailbox_bytes`) for the
    /// generation in the worker's control block and rings the worker's bell; returns its seq.
    /// Refused while the previous request is unanswered.
    #[pyo3(signature = (command, arg, payload=None))]
    fn post(&self, command: u32, arg: u64, payload: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
        // The GIL stays held while the payload is copied, so no Python thread can change a
        // mutable buffer (a bytearray) under the copy.
        let generation = self.control.generation();
        let Some(payload) = payload else {
            return self
                .with_trainer(|t| t.post(generation, command, arg, b""))
                .map_err(py_err);
        };
        let (_export, addr, len) = byte_region("payload", payload, false)?;
        // SAFETY: `_export` (a held buffer export) keeps these `len` bytes alive and unmoved
        // for the whole call; we only read them.
        let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
        self.with_trainer(|t| t.post(generation, command, arg, bytes))
            .map_err(py_err)
    }

    /// Trainer: whether request `seq` has been answered.
    fn answered(&self, seq: u64) -> bool {
        self.mem.is_answered(seq)
    }

    /// Trainer: `(generation, status, payload)` of the answer to the latest request.
    fn response<'py>(&self, py: Python<'py>) -> PyResult<(u64, u32, Bound<'py, PyBytes>)> {
        self.with_trainer(|t| {
            let response = t.response().map_err(py_err)?;
            let payload = PyBytes::new_with(py, response.len, |dst| {
                t.read_response(&response, dst).map_err(py_err)
            })?;
            Ok((response.generation, response.status, payload))
        })
    }

    /// Worker: takes the next request, waiting up to `timeout_s` (GIL released, sliced, Ctrl-C
    /// raises KeyboardInterrupt). Returns `(seq, command, arg, payload)`, or `None` on timeout
    /// or shutdown.
    #[pyo3(signature = (timeout_s=None))]
    fn wait_request<'py>(
        &self,
        py: Python<'py>,
        timeout_s: Option<f64>,
    ) -> PyResult<Option<RequestTuple<'py>>> {
        let deadline = deadline(timeout_s)?;
        let policy = WaitPolicy::STEPPING;
        let segment = &self.segment;
        let got = wait_for(py, deadline, |slice_end| {
            self.with_worker(|w| w.wait_request(&policy, Some(slice_end), || segment.is_shutdown()))
        })?;
        let Some(req) = got else {
            return Ok(None);
        };
        self.with_worker(|w| {
            let payload =
                PyBytes::new_with(py, req.len, |dst| w.read_payload(&req, dst).map_err(py_err))?;
            Ok(Some((req.seq, req.command, req.arg, payload)))
        })
    }

    /// Worker: takes the next request if one is posted, never waiting (a rollout worker's
    /// check between two rollouts). Returns `(seq, command, arg, payload)`, or `None`.
    fn poll_request<'py>(&self, py: Python<'py>) -> PyResult<Option<RequestTuple<'py>>> {
        self.with_worker(|w| {
            let Some(req) = w.try_request().map_err(py_err)? else {
                return Ok(None);
            };
            let payload =
                PyBytes::new_with(py, req.len, |dst| w.read_payload(&req, dst).map_err(py_err))?;
            Ok(Some((req.seq, req.command, req.arg, payload)))
        })
    }

    /// Worker: answers the request being served with `status` and `payload` (bytes-like, at
    /// most `mailbox_bytes`), stamped with this end's generation, and rings the trainer's
    /// doorbell. Returns the seq answered.
    #[pyo3(signature = (status, payload=None))]
    fn respond(&self, status: u32, payload: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
        let Some(payload) = payload else {
            return self.with_worker(|w| w.respond(status, b"")).map_err(py_err);
        };
        let (_export, addr, len) = byte_region("payload", payload, false)?;
        // SAFETY: `_export` keeps these `len` bytes alive and unmoved for the whole call; we
        // only read them, with the GIL held.
        let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
        self.with_worker(|w| w.respond(status, bytes))
            .map_err(py_err)
    }

    /// Worker, first thing in a new generation: answers a request left for an older
    /// generation with status RESTARTED (never serving it); returns its seq, or `None`.
    fn skip_pending(&self) -> PyResult<Option<u64>> {
        self.with_worker(|w| w.skip_pending()).map_err(py_err)
    }

    fn __repr__(&self) -> String {
        format!(
            "StepChannel(worker={}, mailbox_bytes={}, requested={}, answered={})",
            self.mem.worker(),
            self.mem.capacity(),
            self.mem.requested(),
            self.mem.answered_seq()
        )
    }
}

/// Waits (GIL released, sliced, Ctrl-C raises KeyboardInterrupt) until every one (or, with
/// `any`, at least one) of `channels[i]` has answered request `seqs[i]`; returns the positions
/// of the answered ones, in order. On timeout or shutdown it returns those answered by then.
#[pyfunction]
#[pyo3(signature = (channels, seqs, *, timeout_s, any=false))]
pub fn wait_answers(
    py: Python<'_>,
    channels: Vec<Py<StepChannel>>,
    seqs: Vec<u64>,
    timeout_s: Option<f64>,
    any: bool,
) -> PyResult<Vec<usize>> {
    if channels.is_empty() {
        return Err(config_error("wait_answers needs at least one channel"));
    }
    if channels.len() != seqs.len() {
        return Err(config_error(format!(
            "wait_answers needs one seq per channel: {} channels, {} seqs",
            channels.len(),
            seqs.len()
        )));
    }
    let segment = Arc::clone(&channels[0].get().segment);
    if let Some(i) = channels
        .iter()
        .position(|c| !Arc::ptr_eq(&c.get().segment, &segment))
    {
        return Err(config_error(format!(
            "wait_answers needs channels of one segment handle: channel {i} belongs to another"
        )));
    }
    let mems: Vec<StepChannelMem<ShmMailbox>> =
        channels.iter().map(|c| c.get().mem.clone()).collect();
    let waits: Vec<(&StepChannelMem<ShmMailbox>, u64)> = mems.iter().zip(seqs).collect();
    let policy = WaitPolicy::STEPPING;
    wait_for_answers(py, &segment, &waits, any, timeout_s, &policy).map(|(hit, _)| hit)
}

/// The wait of [`wait_answers`] and of `StepRequests`: until every one (or, with `any`, at
/// least one) of `waits` (a channel and the request it waits for) is answered; the positions
/// of the answered ones in `waits`, in order (on timeout or shutdown, those answered by then),
/// and how long the wait took.
pub(crate) fn wait_for_answers(
    py: Python<'_>,
    segment: &CoreSegment,
    waits: &[(&StepChannelMem<ShmMailbox>, u64)],
    any: bool,
    timeout_s: Option<f64>,
    policy: &WaitPolicy,
) -> PyResult<(Vec<usize>, Duration)> {
    let deadline = deadline(timeout_s)?;
    let began = Instant::now();
    let answered_now = || -> Vec<usize> {
        (0..waits.len())
            .filter(|&i| waits[i].0.is_answered(waits[i].1))
            .collect()
    };
    let got = wait_sliced(py, deadline, |slice_end| {
        match core_wait_answers(waits, any, policy, Some(slice_end), || {
            segment.is_shutdown()
        }) {
            Ok(Waited::Ready(hit)) => Slice::Done(Ok(hit)),
            Ok(Waited::Aborted) => Slice::Done(Ok(answered_now())),
            Ok(Waited::TimedOut) => Slice::Continue,
            Err(e) => Slice::Done(Err(e)),
        }
    })?;
    let waited = began.elapsed();
    let hit = match got {
        Some(result) => result.map_err(py_err)?,
        None => answered_now(),
    };
    Ok((hit, waited))
}

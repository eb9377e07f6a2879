//! The two ends of a worker's data ring, and `Lease`, a popped slot that returns to its
//! producer only when released or garbage-collected.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use pycollect_core::{
    wait_until, Claim, Consumer as CoreConsumer, Producer as CoreProducer, RingError,
    Segment as CoreSegment, SlotRef, WaitOutcome, WaitPolicy,
};
use pyo3::prelude::*;

// clippy.toml exception: a lease's "released" flag is process-local (a field of a Python
// object, never in shared memory, part of no cross-process protocol), so loom has nothing to
// model and pycollect_core::sync, built for shared memory, is not needed.
#[allow(clippy::disallowed_types)]
type AtomicBool = std::sync::atomic::AtomicBool;

use crate::blocking::{deadline, wait_for, wait_sliced, Slice};
use crate::errors::{config_error, py_err};
use crate::exchange::StepChannel;
use crate::view::{field_index, SlotView};

/// Locks a mutex, ignoring poisoning: the guarded ring state stays consistent because every
/// mutation is a single call into the core, which does not panic midway on valid input.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The producing end of one worker's data ring (use from one process only).
#[derive(Debug)]
#[pyclass(frozen, module = "pycollect._core")]
pub struct Producer {
    segment: Arc<CoreSegment>,
    worker: usize,
    inner: Mutex<CoreProducer>,
    /// Claimed, uncommitted slots in claim order (commits must follow that order).
    claimed: Mutex<VecDeque<Claim>>,
}

impl Producer {
    pub(crate) fn new(
        segment: &Arc<CoreSegment>,
        worker: usize,
        generation: u64,
    ) -> PyResult<Self> {
        let ring = segment.data_ring(worker).map_err(py_err)?;
        Ok(Self {
            segment: Arc::clone(segment),
            worker,
            inner: Mutex::new(CoreProducer::new(ring, generation)),
            claimed: Mutex::new(VecDeque::new()),
        })
    }
}

#[pymethods]
impl Producer {
    /// Worker index.
    #[getter]
    fn worker(&self) -> usize {
        self.worker
    }

    /// Generation stamped on every committed slot.
    #[getter]
    fn generation(&self) -> u64 {
        lock(&self.inner).generation()
    }

    /// Slots in the ring.
    #[getter]
    fn slots(&self) -> usize {
        lock(&self.inner).capacity()
    }

    /// Slots committed to this ring so far, by every generation (the last one, if any, is at
    /// index `(committed - 1) % slots`).
    #[getter]
    fn committed(&self) -> u64 {
        lock(&self.inner).committed()
    }

    /// Claims the next free slot, waiting up to `timeout_s` (GIL released).
    ///
    /// With `until_request` (this worker's step channel), the wait also ends as soon as a
    /// request is posted there (the trainer then rings :meth:`Consumer.wake_producer`).
    /// Returns the slot index, or `None` on timeout, shutdown or such a request.
    #[pyo3(signature = (timeout_s=None, until_request=None))]
    fn claim(
        &self,
        py: Python<'_>,
        timeout_s: Option<f64>,
        until_request: Option<Bound<'_, StepChannel>>,
    ) -> PyResult<Option<usize>> {
        let deadline = deadline(timeout_s)?;
        let policy = WaitPolicy::default();
        let segment = &self.segment;
        let channel = until_request.as_ref().map(|c| c.get());
        let claim = wait_for(py, deadline, |slice_end| {
            Ok::<_, RingError>(lock(&self.inner).claim_wait_unless(
                &policy,
                Some(slice_end),
                || channel.is_some_and(|c| c.has_request()),
                || segment.is_shutdown(),
            ))
        })?;
        Ok(claim.map(|claim| {
            let index = claim.index;
            lock(&self.claimed).push_back(claim);
            index
        }))
    }

    /// Publishes the oldest claimed slot, which must be `slot`.
    #[pyo3(signature = (slot, flags=0))]
    fn commit(&self, slot: usize, flags: u64) -> PyResult<()> {
        let mut claimed = lock(&self.claimed);
        match claimed.front() {
            Some(claim) if claim.index == slot => {}
            Some(claim) => {
                return Err(config_error(format!(
                "commit({slot}): slots are committed in claim order; the oldest claimed slot is {}",
                claim.index
            )))
            }
            None => return Err(config_error(format!("commit({slot}): no slot is claimed"))),
        }
        let claim = claimed.pop_front().expect("checked above");
        lock(&self.inner)
            .commit_with_flags(claim, flags)
            .map_err(py_err)
    }
}

/// The consuming end of one worker's data ring (the trainer).
#[derive(Debug)]
#[pyclass(frozen, module = "pycollect._core")]
pub struct Consumer {
    /// The Python `Segment` this ring belongs to, kept alive by the consumer and its leases.
    segment: Py<PyAny>,
    core: Arc<CoreSegment>,
    worker: usize,
    inner: Arc<Mutex<CoreConsumer>>,
}

impl Consumer {
    /// `segment` is the Python `Segment` whose core is `core`.
    pub(crate) fn new(segment: Py<PyAny>, core: Arc<CoreSegment>, worker: usize) -> PyResult<Self> {
        let consumer = core.consumer(worker).map_err(py_err)?;
        Ok(Self {
            segment,
            core,
            worker,
            inner: Arc::new(Mutex::new(consumer)),
        })
    }

    fn lease(&self, py: Python<'_>, slot: SlotRef) -> Lease {
        Lease {
            _segment: self.segment.clone_ref(py),
            core: Arc::clone(&self.core),
            consumer: Arc::clone(&self.inner),
            worker: self.worker,
            slot,
            released: AtomicBool::new(false),
            home: std::process::id(),
        }
    }
}

#[pymethods]
impl Consumer {
    /// Worker index.
    #[getter]
    fn worker(&self) -> usize {
        self.worker
    }

    /// Wakes the worker if it waits for a free slot, so that it sees a request just posted
    /// on its step channel (see `Producer.claim`'s `until_request`).
    fn wake_producer(&self) {
        lock(&self.inner).wake_producer();
    }

    /// Committed slots not yet popped.
    fn available(&self) -> u64 {
        lock(&self.inner).available()
    }

    /// `(seq, generation, flags)` of the next committed slot, without popping it.
    fn peek(&self) -> PyResult<Option<(u64, u64, u64)>> {
        let slot = lock(&self.inner).peek().map_err(py_err)?;
        Ok(slot.map(|s| (s.seq, s.generation, s.flags)))
    }

    /// Pops the next committed slot if there is one.
    fn try_pop(&self, py: Python<'_>) -> PyResult<Option<Lease>> {
        let slot = lock(&self.inner).try_pop().map_err(py_err)?;
        Ok(slot.map(|s| self.lease(py, s)))
    }

    /// Waits up to `timeout_s` (GIL released) for the next committed slot.
    ///
    /// Returns `None` on timeout or shutdown.
    #[pyo3(signature = (timeout_s=None))]
    fn pop(&self, py: Python<'_>, timeout_s: Option<f64>) -> PyResult<Option<Lease>> {
        let deadline = deadline(timeout_s)?;
        let policy = WaitPolicy::default();
        let segment = Arc::clone(&self.core);
        let inner = &self.inner;
        let popped = wait_for(py, deadline, |slice_end| {
            lock(inner).pop_wait(&policy, Some(slice_end), || segment.is_shutdown())
        })?;
        Ok(popped.map(|slot| self.lease(py, slot)))
    }
}

/// Waits for any of `consumers` to have a committed slot; returns its position.
///
/// The search starts at position `start` (pass one past the last result for fairness).
/// Returns `None` on timeout or when the segment shuts down.
#[pyfunction]
#[pyo3(signature = (consumers, timeout_s=None, start=0))]
pub fn wait_any(
    py: Python<'_>,
    consumers: Vec<Py<Consumer>>,
    timeout_s: Option<f64>,
    start: usize,
) -> PyResult<Option<usize>> {
    if consumers.is_empty() {
        return Err(config_error("wait_any needs at least one consumer"));
    }
    let deadline = deadline(timeout_s)?;
    let segment = Arc::clone(&consumers[0].get().core);
    let rings: Vec<Arc<Mutex<CoreConsumer>>> = consumers
        .iter()
        .map(|c| Arc::clone(&c.get().inner))
        .collect();
    let n = rings.len();
    let find = || {
        (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| lock(&rings[i]).available() > 0)
    };
    let doorbell = segment.doorbell();
    let policy = WaitPolicy::default();
    let found = wait_sliced(py, deadline, |slice_end| {
        let mut hit = None;
        let outcome = wait_until(
            &doorbell,
            &policy,
            Some(slice_end),
            || {
                hit = find();
                hit.is_some()
            },
            || segment.is_shutdown(),
        );
        match outcome {
            WaitOutcome::Ready => Slice::Done(hit),
            WaitOutcome::Aborted => Slice::Done(None),
            WaitOutcome::TimedOut => Slice::Continue,
        }
    })?;
    Ok(found.flatten())
}

/// A popped slot. It goes back to its producer on `release()` or when this object and every
/// view made from it have been garbage-collected, in the process that popped it: a copy
/// inherited through `fork()` gives nothing back (the parent still holds the slot).
#[derive(Debug)]
#[pyclass(frozen, module = "pycollect._core")]
pub struct Lease {
    /// The Python `Segment`, kept alive while the lease lives.
    _segment: Py<PyAny>,
    core: Arc<CoreSegment>,
    consumer: Arc<Mutex<CoreConsumer>>,
    worker: usize,
    slot: SlotRef,
    released: AtomicBool,
    /// The process that popped the slot.
    home: u32,
}

impl Lease {
    fn give_back(&self) -> PyResult<()> {
        // SYNC POINT: AcqRel swap: exactly one caller (release() or Drop, on any thread)
        // gives the slot back.
        if self.released.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if std::process::id() != self.home {
            // A forked copy: the ring's tail is shared with the parent, which still reads the
            // slot; moving it would hand the slot to the producer under the parent's views.
            return Ok(());
        }
        lock(&self.consumer).release(self.slot.seq).map_err(py_err)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // A release that fails here (the ring was reset under us) has nothing left to free.
        let _ = self.give_back();
    }
}

#[pymethods]
impl Lease {
    /// Worker whose ring the slot belongs to.
    #[getter]
    fn worker(&self) -> usize {
        self.worker
    }

    /// Slot index in the ring.
    #[getter]
    fn slot(&self) -> usize {
        self.slot.index
    }

    /// Sequence number of the slot (monotonic per ring).
    #[getter]
    fn seq(&self) -> u64 {
        self.slot.seq
    }

    /// Generation of the producer that committed the slot.
    #[getter]
    fn generation(&self) -> u64 {
        self.slot.generation
    }

    /// Flags the producer committed the slot with.
    #[getter]
    fn flags(&self) -> u64 {
        self.slot.flags
    }

    /// Whether the slot has been given back.
    #[getter]
    fn released(&self) -> bool {
        // SYNC POINT: Acquire pairs with the swap in give_back.
        self.released.load(Ordering::Acquire)
    }

    /// View of this slot's `field` for this worker (`[K, T, *shape]`); it keeps the lease from
    /// being released by garbage collection while it lives. Views are writable by default,
    /// because torch warns about read-only buffers; writes only touch this leased slot.
    #[pyo3(signature = (field, *, writable=true))]
    fn view(slf: Bound<'_, Self>, field: &str, writable: bool) -> PyResult<SlotView> {
        let this = slf.get();
        let index = field_index(&this.core, field)?;
        let owner = slf.clone().into_any().unbind();
        Ok(SlotView::of_worker(
            &this.core,
            index,
            this.slot.index,
            this.worker,
            !writable,
            Some(owner),
        ))
    }

    /// Gives the slot back now (idempotent). Views stay memory-safe but may later show the
    /// producer's next rollout. Does nothing in a process forked from the one that popped it.
    fn release(&self) -> PyResult<()> {
        self.give_back()
    }

    fn __repr__(&self) -> String {
        format!(
            "Lease(worker={}, slot={}, seq={}, generation={}, released={})",
            self.worker,
            self.slot.index,
            self.slot.seq,
            self.slot.generation,
            self.released()
        )
    }
}

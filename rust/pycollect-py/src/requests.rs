//! `StepRequests`: the trainer's step of every worker of a vector env, in few calls.
//!
//! A synchronous step posts one request to each worker and waits for every answer; most
//! answers are "done, nothing to add" (status OK, no payload: the results are in the
//! segment's fields). Doing that through each worker's `StepChannel` costs a Python call per
//! worker and per answer; here it is one call to post, one to wait, and one that returns only
//! the answers that say more. A pool (`recv`/`send`) takes the workers that answered first, in
//! the order their requests were posted, with their unusual answers, in one call
//! (`oldest_answered`). The channels' trainer ends are the `StepChannel` objects' own,
//! so requests posted here and through a channel are one sequence.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pycollect_core::exchange::ShmMailbox;
use pycollect_core::exchange::STATUS_OK;
use pycollect_core::sync::{AtomicU64, Ordering};
use pycollect_core::{step_wait_policy, Segment as CoreSegment, StepChannelMem};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{config_error, py_err};
use crate::exchange::{wait_for_answers, StepChannel};

/// An answer that says more than "done": `(worker, generation, status, payload)`.
type Unusual<'py> = (usize, u64, u32, Bound<'py, PyBytes>);

/// Every worker's step channel of one segment handle, driven together (see the module docs).
#[derive(Debug)]
#[pyclass(frozen, module = "pycollect._core")]
pub struct StepRequests {
    channels: Vec<Py<StepChannel>>,
    mems: Vec<StepChannelMem<ShmMailbox>>,
    segment: Arc<CoreSegment>,
    /// Nanoseconds the last wait took, which choose the next one's policy
    /// ([`step_wait_policy`]): a hint that publishes nothing, hence `Relaxed`.
    last_wait_ns: AtomicU64,
}

impl StepRequests {
    fn channel(&self, worker: usize) -> &StepChannel {
        self.channels[worker].get()
    }

    /// Waits until all (or, with `any`, at least one) of `workers` have answered their latest
    /// request; returns those that have by then (on timeout or shutdown too), in order.
    fn wait(
        &self,
        py: Python<'_>,
        workers: &[usize],
        any: bool,
        timeout_s: Option<f64>,
    ) -> PyResult<Vec<usize>> {
        let waits: Vec<(&StepChannelMem<ShmMailbox>, u64)> = workers
            .iter()
            .map(|&w| (&self.mems[w], self.channel(w).with_trainer(|t| t.posted())))
            .collect();
        let last = Duration::from_nanos(self.last_wait_ns.load(Ordering::Relaxed));
        let policy = step_wait_policy(last);
        let (answered, waited) =
            wait_for_answers(py, &self.segment, &waits, any, timeout_s, &policy)?;
        let waited_ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.last_wait_ns.store(waited_ns, Ordering::Relaxed);
        Ok(answered.into_iter().map(|i| workers[i]).collect())
    }

    /// The answers of `workers` (each's latest request answered) that are not "OK, no payload",
    /// in the order given.
    fn unusual_of<'py>(&self, py: Python<'py>, workers: &[usize]) -> PyResult<Vec<Unusual<'py>>> {
        let mut out = Vec::new();
        for &w in workers {
            let got = self
                .channel(w)
                .with_trainer(|t| -> PyResult<Option<Unusual<'py>>> {
                    let response = t.response().map_err(py_err)?;
                    if response.status == STATUS_OK && response.len == 0 {
                        return Ok(None);
                    }
                    let payload = PyBytes::new_with(py, response.len, |dst| {
                        t.read_response(&response, dst).map_err(py_err)
                    })?;
                    Ok(Some((w, response.generation, response.status, payload)))
                })?;
            out.extend(got);
        }
        Ok(out)
    }

    fn is_answered(&self, worker: usize) -> bool {
        self.channel(worker).with_trainer(|t| t.pending().is_none())
    }

    /// `workers` checked (in range, ascending, each once), or every worker.
    fn chosen(&self, workers: Option<Vec<usize>>) -> PyResult<Vec<usize>> {
        let count = self.channels.len();
        let Some(workers) = workers else {
            return Ok((0..count).collect());
        };
        if workers.windows(2).any(|pair| pair[0] >= pair[1])
            || workers.last().is_some_and(|&w| w >= count)
        {
            return Err(config_error(format!(
                "workers {workers:?}: ascending worker indices below {count}, each once"
            )));
        }
        Ok(workers)
    }
}

#[pymethods]
impl StepRequests {
    /// Drives `channels`, the step channels of workers `0..N` of one segment handle, in order.
    #[new]
    fn new(channels: Vec<Py<StepChannel>>) -> PyResult<Self> {
        let Some(first) = channels.first() else {
            return Err(config_error("StepRequests needs at least one channel"));
        };
        let segment = Arc::clone(first.get().segment());
        for (w, channel) in channels.iter().enumerate() {
            let channel = channel.get();
            if !Arc::ptr_eq(channel.segment(), &segment) || channel.mem().worker() != w {
                return Err(config_error(format!(
                    "channel {w} is not worker {w}'s of the first channel's segment handle"
                )));
            }
        }
        let mems = channels.iter().map(|c| c.get().mem().clone()).collect();
        Ok(Self {
            channels,
            mems,
            segment,
            last_wait_ns: AtomicU64::new(0),
        })
    }

    /// Whether any worker has a request that is not answered yet.
    fn any_pending(&self) -> bool {
        (0..self.channels.len()).any(|w| !self.is_answered(w))
    }

    /// Posts `command` with `payload` (bytes, the same for every worker; none by default) to
    /// every worker (or those of `workers`), worker `w`'s for its generation `generations[w]`
    /// (the request's argument), and rings each one's bell.
    ///
    /// Refused (a `TransportError` naming the worker) while the previous request of a worker it
    /// posts to is unanswered; nothing is posted then.
    #[pyo3(signature = (command, generations, payload = None, workers = None))]
    fn post_all(
        &self,
        command: u32,
        generations: Vec<u64>,
        payload: Option<Vec<u8>>,
        workers: Option<Vec<usize>>,
    ) -> PyResult<()> {
        let payload = payload.unwrap_or_default();
        let workers = self.chosen(workers)?;
        if generations.len() != self.channels.len() {
            return Err(config_error(format!(
                "{} generations for {} workers",
                generations.len(),
                self.channels.len()
            )));
        }
        for &w in &workers {
            if let Some(seq) = self.channel(w).with_trainer(|t| t.pending()) {
                return Err(py_err(pycollect_core::ExchangeError::Pending {
                    worker: w,
                    seq,
                }));
            }
        }
        for &w in &workers {
            let (channel, arg) = (self.channel(w), generations[w]);
            let generation = channel.control_generation();
            channel
                .with_trainer(|t| t.post(generation, command, arg, &payload))
                .map_err(py_err)?;
        }
        Ok(())
    }

    /// The seq of the latest request posted to each worker (0: none).
    fn seqs(&self) -> Vec<u64> {
        (0..self.channels.len())
            .map(|w| self.channel(w).with_trainer(|t| t.posted()))
            .collect()
    }

    /// Waits (GIL released, sliced, Ctrl-C raises KeyboardInterrupt) until every worker has
    /// answered its latest request; `False` if `timeout_s` passed first or the segment shut
    /// down.
    #[pyo3(signature = (*, timeout_s))]
    fn wait_all(&self, py: Python<'_>, timeout_s: Option<f64>) -> PyResult<bool> {
        let every: Vec<usize> = (0..self.channels.len()).collect();
        Ok(self.wait(py, &every, false, timeout_s)?.len() == every.len())
    }

    /// The answers to the latest requests of every worker (or those of `workers`) that are not
    /// "OK, no payload", as `(worker, generation, status, payload)` in worker order; those latest
    /// requests must be answered.
    #[pyo3(signature = (workers = None))]
    fn unusual<'py>(
        &self,
        py: Python<'py>,
        workers: Option<Vec<usize>>,
    ) -> PyResult<Vec<Unusual<'py>>> {
        let workers = self.chosen(workers)?;
        self.unusual_of(py, &workers)
    }

    /// A pool's receive: of `queue` (workers with a request in flight, the longest waiting
    /// first), the first `count` whose latest request is answered, and the answers among them
    /// that are not "OK, no payload" (as `unusual` gives them, in the order picked).
    ///
    /// Waits (GIL released, sliced, Ctrl-C raises KeyboardInterrupt) until `count` of them
    /// have answered; if `timeout_s` passes first, or the segment shuts down, returns two
    /// empty lists (nothing is taken: a later call finds the same answers).
    #[pyo3(signature = (queue, count, *, timeout_s))]
    fn oldest_answered<'py>(
        &self,
        py: Python<'py>,
        queue: Vec<usize>,
        count: usize,
        timeout_s: Option<f64>,
    ) -> PyResult<(Vec<usize>, Vec<Unusual<'py>>)> {
        let mut sorted = queue.clone();
        sorted.sort_unstable();
        self.chosen(Some(sorted))?; // each a worker, each once
        if count == 0 || count > queue.len() {
            return Err(config_error(format!(
                "oldest_answered of {count} workers out of {} in the queue",
                queue.len()
            )));
        }
        let deadline = timeout_s.map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
        loop {
            // One look at every worker, in queue order; with fewer than `count` answered, the
            // rest (at least one, as `count <= queue.len()`) are the ones to wait for.
            let (mut ready, waiting): (Vec<usize>, Vec<usize>) =
                queue.iter().copied().partition(|&w| self.is_answered(w));
            if ready.len() >= count {
                ready.truncate(count);
                let unusual = self.unusual_of(py, &ready)?;
                return Ok((ready, unusual));
            }
            let left = deadline.map(|at| at.saturating_duration_since(Instant::now()));
            if left.is_some_and(|left| left.is_zero()) {
                return Ok((Vec::new(), Vec::new()));
            }
            let answered = self.wait(py, &waiting, true, left.map(|d| d.as_secs_f64()))?;
            if answered.is_empty() && self.segment.is_shutdown() {
                return Ok((Vec::new(), Vec::new()));
            }
        }
    }
}

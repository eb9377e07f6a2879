//! Step channels: one request/response exchange per worker, with a mailbox, in shared memory.
//!
//! The trainer asks a worker to do one thing (step its envs, reset them, call a method, close)
//! and waits for the answer; small variable data (pickled seeds, call arguments, info dicts)
//! travel in the channel's mailbox, bulk data (actions, observations) in the segment's fields.
//! There is at most one request in flight per worker. Protocol:
//!
//! ```text
//! trainer (post)                                 worker (wait_request, respond)
//! response.seq.load(Acquire) == posted?          wait until request.seq.load(Acquire) > answered
//!   (else: the previous request is pending)        (spin, yield, futex sleep on the bell)
//! write request payload, header (Relaxed)         read header (Relaxed) and payload
//! request.seq.store(posted + 1, Release)          ... do the work ...
//! bell.notify()                                   write response payload, header (Relaxed)
//!                                                 response.seq.store(seq, Release)
//! wait until response.seq.load(Acquire) >= seq    doorbell.notify()   (the segment's global one)
//!   (on the global doorbell)
//! read response header and payload
//! ```
//!
//! Why the payloads never race: the trainer writes the request half only when the previous
//! request was answered, and the worker's reads of that request happen-before its Release
//! store of the answer, which the trainer acquired. The worker writes the response half only
//! while serving a request it acquired, and the trainer read the previous response before it
//! posted that request (program order, then the Release store of `request.seq`). Both sequence
//! numbers are 64-bit and monotonic (never wrap in practice), and `request - response` is 0 (idle)
//! or 1 (pending); anything else is corruption, reported as [`ExchangeError::Corrupt`].
//!
//! Every request names the worker generation it is for (the trainer reads it from the worker's
//! control block when it posts; the supervisor begins a generation just before it starts the
//! process). A worker that restarts finds the channel as its dead predecessor left it. A
//! request for an older generation was meant for the predecessor, whose envs are gone, so it
//! must not be served: the worker answers it with [`STATUS_RESTARTED`] and no payload
//! ([`StepWorker::skip_pending`] at start, and [`StepWorker::try_request`] whenever one
//! arrives). The trainer sees that status (and the new generation in the response header) and
//! re-posts what the new generation needs (a reset). A request posted for the new generation
//! before its process got going is served by it: whether a request is skipped depends on what
//! the trainer knew when it posted, never on how fast the new process starts.
//!
//! Payload bytes are copied with `ptr::copy` through the [`Mailbox`] trait (shared memory in
//! production, loom cells in the loom model), never borrowed as slices of shared memory.

use crate::eventcount::EventCount;
use crate::shared::{Owner, SharedRef};
use crate::sync::{AtomicU32, AtomicU64, Ordering, Padded};
use crate::wait::{wait_until, WaitOutcome, WaitPolicy, Waited};
use std::fmt;
use std::time::Instant;

/// Status of a request served normally.
pub const STATUS_OK: u32 = 0;
/// Status of a request whose serving failed (the payload says why, in the caller's format).
pub const STATUS_ERROR: u32 = 1;
/// Status of a request a restarted worker did not serve (see [`StepWorker::skip_pending`]);
/// only `skip_pending` answers with it.
pub const STATUS_RESTARTED: u32 = 2;

/// Command: step the worker's envs with the actions in its action rows.
pub const CMD_STEP: u32 = 1;
/// Command: reset the worker's envs (seeds and options in the payload).
pub const CMD_RESET: u32 = 2;
/// Command: call a method or get/set an attribute of the envs (pickled in the payload).
pub const CMD_CALL: u32 = 3;
/// Command: close the envs and stop serving.
pub const CMD_CLOSE: u32 = 4;

/// Words the trainer writes (one line).
#[repr(C)]
#[derive(Debug, Default)]
struct RequestWords {
    /// Sequence number of the latest request (0: none yet).
    seq: AtomicU64,
    /// The request's argument.
    arg: AtomicU64,
    /// Bytes of request payload.
    len: AtomicU64,
    /// The worker generation the request is for.
    generation: AtomicU64,
    /// The request's command.
    command: AtomicU32,
}

/// Words the worker writes (one line).
#[repr(C)]
#[derive(Debug, Default)]
struct ResponseWords {
    /// Sequence number of the latest answered request (0: none yet).
    seq: AtomicU64,
    /// Generation of the worker that answered.
    generation: AtomicU64,
    /// Bytes of response payload.
    len: AtomicU64,
    /// The answer's status.
    status: AtomicU32,
}

/// Control words of one step channel (lives in shared memory; 384 bytes outside loom).
///
/// The header words are atomics, written Relaxed and published by the Release store of their
/// sequence number, so a corrupted or concurrently written header is a detectable error, never
/// undefined behaviour.
#[repr(C)]
#[derive(Debug, Default)]
pub struct StepCtl {
    /// Request seq and header (trainer-written; the worker spins on this line).
    request: Padded<RequestWords>,
    /// Response seq and header (worker-written; the trainer polls this line).
    response: Padded<ResponseWords>,
    /// The bell the worker sleeps on while it waits for a request.
    bell: Padded<EventCount>,
}

impl StepCtl {
    /// A zeroed control block (heap use).
    pub fn new() -> Self {
        Self::default()
    }
}

// SAFETY: `#[repr(C)]`, three Padded lines: two of AtomicU64/AtomicU32 words (their padding is
// never read) and one EventCount.
#[cfg(not(loom))]
unsafe impl crate::shared::ShmSafe for StepCtl {}

// A step channel is StepCtl, then its mailbox halves.
#[cfg(not(loom))]
const _: () = {
    assert!(std::mem::size_of::<StepCtl>() == crate::consts::STEP_CTL_SIZE);
    assert!(std::mem::align_of::<StepCtl>() == crate::consts::LINE);
};

/// Which half of a mailbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Half {
    /// Written by the trainer, read by the worker.
    Request,
    /// Written by the worker, read by the trainer.
    Response,
}

impl fmt::Display for Half {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Request => "request",
            Self::Response => "response",
        })
    }
}

/// Storage for the payload bytes of one channel (shared memory, or loom cells in tests).
pub trait Mailbox: Send + Sync {
    /// Bytes each half holds.
    fn capacity(&self) -> usize;
    /// Copies `src` (at most `capacity` bytes) into the start of `half`.
    ///
    /// # Safety
    /// The caller must own `half` for writing: the protocol guarantees nobody reads it.
    unsafe fn write(&self, half: Half, src: &[u8]);
    /// Copies the start of `half` into `dst` (at most `capacity` bytes).
    ///
    /// # Safety
    /// The caller must own `half` for reading: the protocol guarantees nobody writes it.
    unsafe fn read(&self, half: Half, dst: &mut [u8]);
}

impl<M: Mailbox> Mailbox for std::sync::Arc<M> {
    fn capacity(&self) -> usize {
        (**self).capacity()
    }
    unsafe fn write(&self, half: Half, src: &[u8]) {
        // SAFETY: forwarded contract.
        unsafe { (**self).write(half, src) }
    }
    unsafe fn read(&self, half: Half, dst: &mut [u8]) {
        // SAFETY: forwarded contract.
        unsafe { (**self).read(half, dst) }
    }
}

/// A mailbox in the mapped segment: two areas of `capacity` bytes.
#[derive(Clone)]
pub struct ShmMailbox {
    request: *mut u8,
    response: *mut u8,
    capacity: usize,
    _owner: Owner,
}

impl fmt::Debug for ShmMailbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShmMailbox")
            .field("request", &self.request)
            .field("response", &self.response)
            .field("capacity", &self.capacity)
            .finish()
    }
}

// SAFETY: raw pointers into a mapping kept alive by the owner Arc; all access goes through
// the unsafe read/write methods, whose callers follow the channel protocol.
unsafe impl Send for ShmMailbox {}
// SAFETY: as for Send.
unsafe impl Sync for ShmMailbox {}

impl ShmMailbox {
    /// Wraps a request area and a response area of `capacity` bytes each.
    ///
    /// # Safety
    /// Both areas must lie inside memory kept mapped by `owner` and must not overlap.
    pub unsafe fn from_raw(
        request: *mut u8,
        response: *mut u8,
        capacity: usize,
        owner: Owner,
    ) -> Self {
        Self {
            request,
            response,
            capacity,
            _owner: owner,
        }
    }

    fn area(&self, half: Half) -> *mut u8 {
        match half {
            Half::Request => self.request,
            Half::Response => self.response,
        }
    }
}

impl Mailbox for ShmMailbox {
    fn capacity(&self) -> usize {
        self.capacity
    }
    unsafe fn write(&self, half: Half, src: &[u8]) {
        assert!(src.len() <= self.capacity);
        // SAFETY: the area is mapped and writable (from_raw), src fits (checked), src is
        // process memory so it cannot overlap, and the caller owns `half` (no reader).
        unsafe { std::ptr::copy(src.as_ptr(), self.area(half), src.len()) }
    }
    unsafe fn read(&self, half: Half, dst: &mut [u8]) {
        assert!(dst.len() <= self.capacity);
        // SAFETY: as for write; the caller owns `half` for reading (no writer).
        unsafe { std::ptr::copy(self.area(half), dst.as_mut_ptr(), dst.len()) }
    }
}

/// Errors of the step exchange; each names the worker and the values that disagreed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExchangeError {
    /// `post` while the previous request is not answered yet.
    Pending {
        /// The worker.
        worker: usize,
        /// The unanswered request.
        seq: u64,
    },
    /// `response` before the latest request was answered.
    NotAnswered {
        /// The worker.
        worker: usize,
        /// The unanswered request.
        seq: u64,
    },
    /// `response` before any request was posted through this end.
    NothingPosted {
        /// The worker.
        worker: usize,
    },
    /// A response that belongs to another request than the one passed in.
    Stale {
        /// The worker.
        worker: usize,
        /// The request the caller named.
        seq: u64,
        /// The request this end serves or awaits now.
        current: u64,
    },
    /// `respond` without a request being served.
    NotServing {
        /// The worker.
        worker: usize,
    },
    /// `wait_request` or `skip_pending` while a request is being served (respond first).
    AlreadyServing {
        /// The worker.
        worker: usize,
        /// The request being served.
        seq: u64,
    },
    /// A payload larger than the mailbox.
    TooLarge {
        /// The worker.
        worker: usize,
        /// Which half.
        half: Half,
        /// Bytes offered.
        len: usize,
        /// Bytes the mailbox holds (`mailbox_bytes`).
        capacity: usize,
    },
    /// A destination whose length is not the payload's.
    WrongLength {
        /// The payload's length.
        len: usize,
        /// The destination's length.
        dst: usize,
    },
    /// A status only [`StepWorker::skip_pending`] may answer with.
    ReservedStatus {
        /// The worker.
        worker: usize,
        /// The status passed in.
        status: u32,
    },
    /// The channel's words are out of protocol (another writer, or memory corruption).
    Corrupt {
        /// The worker.
        worker: usize,
        /// Latest request seq.
        request: u64,
        /// Latest response seq.
        response: u64,
        /// Payload length stored in the header (0 when not the problem).
        len: u64,
    },
    /// A request for a newer generation than the worker's own: this process was replaced.
    Superseded {
        /// The worker.
        worker: usize,
        /// This end's generation.
        generation: u64,
        /// The request.
        seq: u64,
        /// The generation the request is for.
        request_generation: u64,
    },
    /// `wait_answers` over no channel at all.
    NothingToWait,
    /// `wait_answers` over channels that ring different doorbells (different segments).
    MixedDoorbells,
}

impl fmt::Display for ExchangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pending { worker, seq } => write!(
                f,
                "worker {worker} has not answered request {seq} yet: post the next request to \
                 it only after that answer"
            ),
            Self::NotAnswered { worker, seq } => write!(
                f,
                "worker {worker} has not answered request {seq} yet: no response to read"
            ),
            Self::NothingPosted { worker } => {
                write!(
                    f,
                    "no request was posted to worker {worker}: no response to read"
                )
            }
            Self::Stale {
                worker,
                seq,
                current,
            } => write!(
                f,
                "request {seq} of worker {worker} is not the current one ({current})"
            ),
            Self::NotServing { worker } => write!(
                f,
                "worker {worker} serves no request: respond only to a request wait_request returned"
            ),
            Self::AlreadyServing { worker, seq } => write!(
                f,
                "worker {worker} is serving request {seq}: respond to it first"
            ),
            Self::TooLarge {
                worker,
                half,
                len,
                capacity,
            } => write!(
                f,
                "{half} payload of {len} bytes for worker {worker} exceeds the mailbox of \
                 {capacity} bytes (mailbox_bytes)"
            ),
            Self::WrongLength { len, dst } => write!(
                f,
                "destination of {dst} bytes does not match the payload of {len} bytes"
            ),
            Self::ReservedStatus { worker, status } => write!(
                f,
                "worker {worker}: status {status} (RESTARTED) is reserved for skip_pending"
            ),
            Self::Corrupt {
                worker,
                request,
                response,
                len,
            } => write!(
                f,
                "step channel of worker {worker} is corrupt: request seq {request}, response seq \
                 {response}, payload length {len}"
            ),
            Self::Superseded {
                worker,
                generation,
                seq,
                request_generation,
            } => write!(
                f,
                "worker {worker} generation {generation} was superseded: request {seq} is for \
                 generation {request_generation}"
            ),
            Self::NothingToWait => f.write_str("wait_answers needs at least one channel"),
            Self::MixedDoorbells => f.write_str(
                "wait_answers needs channels of one segment (they ring different doorbells)",
            ),
        }
    }
}

impl std::error::Error for ExchangeError {}

/// The shared parts of one worker's step channel.
#[derive(Debug, Clone)]
pub struct StepChannelMem<M> {
    ctl: SharedRef<StepCtl>,
    /// The trainer's doorbell (the segment's global one), rung after every answer.
    doorbell: SharedRef<EventCount>,
    mailbox: M,
    worker: usize,
}

impl<M: Mailbox> StepChannelMem<M> {
    /// Assembles a channel from shared parts.
    pub fn new(
        ctl: SharedRef<StepCtl>,
        doorbell: SharedRef<EventCount>,
        mailbox: M,
        worker: usize,
    ) -> Self {
        Self {
            ctl,
            doorbell,
            mailbox,
            worker,
        }
    }

    /// A channel on the heap (loom and unit tests); channels that share `doorbell` can be
    /// waited on together.
    pub fn new_heap(mailbox: M, doorbell: SharedRef<EventCount>, worker: usize) -> Self {
        Self::new(
            SharedRef::new_heap(StepCtl::new()),
            doorbell,
            mailbox,
            worker,
        )
    }

    /// The worker this channel belongs to.
    pub fn worker(&self) -> usize {
        self.worker
    }

    /// Bytes each half of the mailbox holds.
    pub fn capacity(&self) -> usize {
        self.mailbox.capacity()
    }

    /// The mailbox.
    pub fn mailbox(&self) -> &M {
        &self.mailbox
    }

    /// The bell the worker sleeps on (rung by `post`, and by shutdown).
    pub fn bell(&self) -> &EventCount {
        &self.ctl.bell
    }

    /// The doorbell the worker rings after answering.
    pub fn doorbell(&self) -> &SharedRef<EventCount> {
        &self.doorbell
    }

    /// Latest posted request seq (0: none).
    pub fn requested(&self) -> u64 {
        // SYNC POINT: Acquire pairs with post's Release (diagnostics; the worker's path is
        // try_request).
        self.ctl.request.seq.load(Ordering::Acquire)
    }

    /// Latest answered request seq (0: none).
    pub fn answered_seq(&self) -> u64 {
        // SYNC POINT: Acquire pairs with the worker's Release of the response seq: the
        // response header and payload of every seq up to it are visible after this load.
        self.ctl.response.seq.load(Ordering::Acquire)
    }

    /// Whether request `seq` has been answered.
    pub fn is_answered(&self, seq: u64) -> bool {
        self.answered_seq() >= seq
    }

    fn corrupt(&self, request: u64, response: u64, len: u64) -> ExchangeError {
        ExchangeError::Corrupt {
            worker: self.worker,
            request,
            response,
            len,
        }
    }
}

/// A posted request, as the worker reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Its sequence number (1, 2, ... per channel).
    pub seq: u64,
    /// The worker generation it is for (the worker's own: others are never handed out).
    pub generation: u64,
    /// The command.
    pub command: u32,
    /// The argument.
    pub arg: u64,
    /// Bytes of payload (read them with [`StepWorker::read_payload`]).
    pub len: usize,
}

/// An answer, as the trainer reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    /// The request it answers.
    pub seq: u64,
    /// Generation of the worker that answered.
    pub generation: u64,
    /// The status ([`STATUS_OK`], [`STATUS_ERROR`], [`STATUS_RESTARTED`] or the caller's).
    pub status: u32,
    /// Bytes of payload (read them with [`StepTrainer::read_response`]).
    pub len: usize,
}

/// The trainer's end of one step channel (one per channel, in the trainer).
#[derive(Debug)]
pub struct StepTrainer<M> {
    mem: StepChannelMem<M>,
    /// Our last posted seq. The single trainer end never needs to reload it.
    posted: u64,
}

impl<M: Mailbox> StepTrainer<M> {
    /// Opens the trainer's end, continuing from the last posted request.
    pub fn new(mem: StepChannelMem<M>) -> Self {
        // SYNC POINT: Acquire of our own published seq (a re-opened end sees the last one).
        let posted = mem.ctl.request.seq.load(Ordering::Acquire);
        Self { mem, posted }
    }

    /// The shared parts.
    pub fn mem(&self) -> &StepChannelMem<M> {
        &self.mem
    }

    /// The seq of the latest request posted (0: none).
    pub fn posted(&self) -> u64 {
        self.posted
    }

    /// The latest request if it is still unanswered.
    pub fn pending(&self) -> Option<u64> {
        (!self.mem.is_answered(self.posted)).then_some(self.posted)
    }

    /// Whether request `seq` has been answered.
    pub fn answered(&self, seq: u64) -> bool {
        self.mem.is_answered(seq)
    }

    /// Posts a request for worker generation `generation` (the one in the worker's control
    /// block now: a request for an older one is answered RESTARTED, unserved): writes the
    /// payload and header, publishes the seq and rings the worker's bell. Refused while the
    /// previous request is unanswered. Returns the new seq.
    pub fn post(
        &mut self,
        generation: u64,
        command: u32,
        arg: u64,
        payload: &[u8],
    ) -> Result<u64, ExchangeError> {
        let capacity = self.mem.capacity();
        if payload.len() > capacity {
            return Err(ExchangeError::TooLarge {
                worker: self.mem.worker,
                half: Half::Request,
                len: payload.len(),
                capacity,
            });
        }
        let answered = self.mem.answered_seq();
        if answered != self.posted {
            return Err(if answered < self.posted {
                ExchangeError::Pending {
                    worker: self.mem.worker,
                    seq: self.posted,
                }
            } else {
                self.mem.corrupt(self.posted, answered, 0)
            });
        }
        // SAFETY: every request up to `posted` is answered, and the worker's reads of the
        // request half happen-before its Release of that answer, which we just acquired; it
        // reads the half again only after acquiring the seq we publish below.
        unsafe { self.mem.mailbox.write(Half::Request, payload) };
        let words = &self.mem.ctl.request;
        // Relaxed: published by the Release store of the seq below.
        words.command.store(command, Ordering::Relaxed);
        words.generation.store(generation, Ordering::Relaxed);
        words.arg.store(arg, Ordering::Relaxed);
        words.len.store(payload.len() as u64, Ordering::Relaxed);
        self.posted += 1;
        // SYNC POINT: Release publishes the payload and header stores above.
        words.seq.store(self.posted, Ordering::Release);
        self.mem.ctl.bell.notify();
        Ok(self.posted)
    }

    /// The header of the answer to the latest request. An error when nothing was posted or
    /// the latest request is not answered yet.
    pub fn response(&self) -> Result<Response, ExchangeError> {
        let worker = self.mem.worker;
        if self.posted == 0 {
            return Err(ExchangeError::NothingPosted { worker });
        }
        let answered = self.mem.answered_seq();
        if answered < self.posted {
            return Err(ExchangeError::NotAnswered {
                worker,
                seq: self.posted,
            });
        }
        if answered > self.posted {
            return Err(self.mem.corrupt(self.posted, answered, 0));
        }
        let words = &self.mem.ctl.response;
        // Relaxed: ordered after the Acquire load of the response seq above.
        let len = words.len.load(Ordering::Relaxed);
        if len > self.mem.capacity() as u64 {
            return Err(self.mem.corrupt(self.posted, answered, len));
        }
        Ok(Response {
            seq: self.posted,
            generation: words.generation.load(Ordering::Relaxed),
            status: words.status.load(Ordering::Relaxed),
            len: len as usize,
        })
    }

    /// Copies the payload of `response` (from [`response`](Self::response)) into `dst`, whose
    /// length must be `response.len`.
    pub fn read_response(&self, response: &Response, dst: &mut [u8]) -> Result<(), ExchangeError> {
        if response.seq != self.posted || !self.mem.is_answered(response.seq) {
            return Err(ExchangeError::Stale {
                worker: self.mem.worker,
                seq: response.seq,
                current: self.posted,
            });
        }
        if dst.len() != response.len || response.len > self.mem.capacity() {
            return Err(ExchangeError::WrongLength {
                len: response.len,
                dst: dst.len(),
            });
        }
        // SAFETY: the latest request is answered (Acquire above), so the worker wrote the
        // response half before its Release and writes it again only while serving a request
        // we have not posted yet.
        unsafe { self.mem.mailbox.read(Half::Response, dst) };
        Ok(())
    }

    /// [`response`](Self::response) and its payload, copied out.
    pub fn response_bytes(&self) -> Result<(Response, Vec<u8>), ExchangeError> {
        let response = self.response()?;
        let mut payload = vec![0; response.len];
        self.read_response(&response, &mut payload)?;
        Ok((response, payload))
    }
}

/// The worker's end of one step channel (one per channel, in the worker process).
#[derive(Debug)]
pub struct StepWorker<M> {
    mem: StepChannelMem<M>,
    /// This process's generation, stamped on every answer.
    generation: u64,
    /// The seq of our last answer (published).
    answered: u64,
    /// The request taken and not answered yet.
    serving: Option<Request>,
}

impl<M: Mailbox> StepWorker<M> {
    /// Opens the worker's end for worker generation `generation`, continuing from the last
    /// answer (a predecessor's, after a restart: call [`skip_pending`](Self::skip_pending)
    /// first).
    pub fn new(mem: StepChannelMem<M>, generation: u64) -> Self {
        // SYNC POINT: Acquire of the last published answer (a predecessor's, after a restart).
        let answered = mem.ctl.response.seq.load(Ordering::Acquire);
        Self {
            mem,
            generation,
            answered,
            serving: None,
        }
    }

    /// The generation stamped on every answer.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The shared parts.
    pub fn mem(&self) -> &StepChannelMem<M> {
        &self.mem
    }

    /// The request being served, if any.
    pub fn serving(&self) -> Option<Request> {
        self.serving
    }

    /// For a worker generation that just started: answers a request left for an older
    /// generation (its dead predecessor) with [`STATUS_RESTARTED`] and no payload, so that it
    /// is never served. Returns that request's seq, or `None` when nothing such was pending (a
    /// request for this generation stays pending, to be served).
    ///
    /// Also forgets a sleeper the predecessor left on the worker's bell (a killed sleeper never
    /// decrements), which would otherwise cost the trainer a wake syscall per request. Only
    /// this worker ever sleeps on that bell, and its predecessor is dead.
    pub fn skip_pending(&mut self) -> Result<Option<u64>, ExchangeError> {
        if let Some(req) = self.serving {
            return Err(ExchangeError::AlreadyServing {
                worker: self.mem.worker,
                seq: req.seq,
            });
        }
        self.mem.ctl.bell.reset_sleepers();
        let Some(header) = self.pending_header()? else {
            return Ok(None);
        };
        if header.generation < self.generation {
            self.publish(header.seq, STATUS_RESTARTED, 0);
            return Ok(Some(header.seq));
        }
        self.check_not_superseded(&header)?;
        Ok(None)
    }

    /// The header of the request posted after our last answer, if any.
    fn pending_header(&self) -> Result<Option<Request>, ExchangeError> {
        // SYNC POINT: Acquire pairs with post's Release: the header and payload of this
        // request are visible after this load.
        let seq = self.mem.ctl.request.seq.load(Ordering::Acquire);
        if seq == self.answered {
            return Ok(None);
        }
        if seq != self.answered + 1 {
            return Err(self.mem.corrupt(seq, self.answered, 0));
        }
        let words = &self.mem.ctl.request;
        // Relaxed: ordered after the Acquire load of the seq above.
        let len = words.len.load(Ordering::Relaxed);
        if len > self.mem.capacity() as u64 {
            return Err(self.mem.corrupt(seq, self.answered, len));
        }
        Ok(Some(Request {
            seq,
            generation: words.generation.load(Ordering::Relaxed),
            command: words.command.load(Ordering::Relaxed),
            arg: words.arg.load(Ordering::Relaxed),
            len: len as usize,
        }))
    }

    fn check_not_superseded(&self, header: &Request) -> Result<(), ExchangeError> {
        if header.generation > self.generation {
            return Err(ExchangeError::Superseded {
                worker: self.mem.worker,
                generation: self.generation,
                seq: header.seq,
                request_generation: header.generation,
            });
        }
        Ok(())
    }

    /// Whether a request is posted that this end has not answered yet: the next
    /// [`Self::try_request`] takes it (or answers it RESTARTED, if it was left for an older
    /// generation). False while a request is being served.
    pub fn has_request(&self) -> bool {
        if self.serving.is_some() {
            return false;
        }
        // SYNC POINT: Acquire pairs with post's Release of the request seq.
        self.mem.ctl.request.seq.load(Ordering::Acquire) != self.answered
    }

    /// Takes the next request for this generation if one is posted. One for an older
    /// generation is answered RESTARTED on the way (never served); one for a newer generation
    /// means this process was replaced: [`ExchangeError::Superseded`].
    pub fn try_request(&mut self) -> Result<Option<Request>, ExchangeError> {
        if let Some(req) = self.serving {
            return Err(ExchangeError::AlreadyServing {
                worker: self.mem.worker,
                seq: req.seq,
            });
        }
        let Some(header) = self.pending_header()? else {
            return Ok(None);
        };
        if header.generation < self.generation {
            self.publish(header.seq, STATUS_RESTARTED, 0);
            return Ok(None);
        }
        self.check_not_superseded(&header)?;
        self.serving = Some(header);
        Ok(Some(header))
    }

    /// Takes the next request, waiting (spin, yield, futex sleep on the worker's bell in
    /// slices) until one is posted, the deadline passes or `should_abort` says so.
    pub fn wait_request(
        &mut self,
        policy: &WaitPolicy,
        deadline: Option<Instant>,
        should_abort: impl FnMut() -> bool,
    ) -> Result<Waited<Request>, ExchangeError> {
        let ctl = self.mem.ctl.clone();
        let mut should_abort = should_abort;
        loop {
            if let Some(req) = self.try_request()? {
                return Ok(Waited::Ready(req));
            }
            // Nothing to serve (or a request for an older generation, answered just now).
            let answered = self.answered;
            let outcome = wait_until(
                &ctl.bell,
                policy,
                deadline,
                // SYNC POINT: Acquire pairs with post's Release (try_request reloads it).
                || ctl.request.seq.load(Ordering::Acquire) != answered,
                &mut should_abort,
            );
            match outcome {
                WaitOutcome::Ready => {}
                WaitOutcome::TimedOut => return Ok(Waited::TimedOut),
                WaitOutcome::Aborted => return Ok(Waited::Aborted),
            }
        }
    }

    /// Copies the payload of `req` (the request being served) into `dst`, whose length must
    /// be `req.len`.
    pub fn read_payload(&self, req: &Request, dst: &mut [u8]) -> Result<(), ExchangeError> {
        match self.serving {
            Some(serving) if serving.seq == req.seq => {}
            other => {
                return Err(ExchangeError::Stale {
                    worker: self.mem.worker,
                    seq: req.seq,
                    current: other.map_or(self.answered, |r| r.seq),
                })
            }
        }
        if dst.len() != req.len || req.len > self.mem.capacity() {
            return Err(ExchangeError::WrongLength {
                len: req.len,
                dst: dst.len(),
            });
        }
        // SAFETY: we serve this request (its seq was acquired in try_request), so the
        // trainer wrote the request half before its Release and writes it again only after
        // acquiring our answer, which we publish after this read.
        unsafe { self.mem.mailbox.read(Half::Request, dst) };
        Ok(())
    }

    /// The payload of `req` (the request being served), copied out.
    pub fn payload(&self, req: &Request) -> Result<Vec<u8>, ExchangeError> {
        let mut out = vec![0; req.len];
        self.read_payload(req, &mut out)?;
        Ok(out)
    }

    /// Answers the request being served: writes the payload and header (stamped with this
    /// end's generation), publishes the seq and rings the trainer's doorbell. Returns the seq.
    pub fn respond(&mut self, status: u32, payload: &[u8]) -> Result<u64, ExchangeError> {
        let worker = self.mem.worker;
        let Some(req) = self.serving else {
            return Err(ExchangeError::NotServing { worker });
        };
        if status == STATUS_RESTARTED {
            return Err(ExchangeError::ReservedStatus { worker, status });
        }
        let capacity = self.mem.capacity();
        if payload.len() > capacity {
            return Err(ExchangeError::TooLarge {
                worker,
                half: Half::Response,
                len: payload.len(),
                capacity,
            });
        }
        // SAFETY: the trainer reads the response half only after acquiring an answer seq; it
        // read the previous answer before posting the request we acquired, and cannot see this
        // one before the Release below.
        unsafe { self.mem.mailbox.write(Half::Response, payload) };
        self.publish(req.seq, status, payload.len());
        Ok(req.seq)
    }

    fn publish(&mut self, seq: u64, status: u32, len: usize) {
        let words = &self.mem.ctl.response;
        // Relaxed: published by the Release store of the seq below.
        words.generation.store(self.generation, Ordering::Relaxed);
        words.status.store(status, Ordering::Relaxed);
        words.len.store(len as u64, Ordering::Relaxed);
        self.answered = seq;
        self.serving = None;
        // SYNC POINT: Release publishes the payload and header, and orders our reads of the
        // request payload before the trainer's next write of it.
        words.seq.store(seq, Ordering::Release);
        self.mem.doorbell.notify();
    }
}

/// Waits on the channels' doorbell until all (`any == false`) or at least one (`any == true`)
/// of `waits` — `(channel, seq)` pairs — is answered, the deadline passes or `should_abort`
/// says so. `Ready` carries the positions in `waits` of the answered ones, in order.
///
/// Every channel must ring the same doorbell (be of one segment).
pub fn wait_answers<M: Mailbox>(
    waits: &[(&StepChannelMem<M>, u64)],
    any: bool,
    policy: &WaitPolicy,
    deadline: Option<Instant>,
    should_abort: impl FnMut() -> bool,
) -> Result<Waited<Vec<usize>>, ExchangeError> {
    let Some((first, _)) = waits.first() else {
        return Err(ExchangeError::NothingToWait);
    };
    let doorbell = first.doorbell.clone();
    if waits
        .iter()
        .any(|(mem, _)| mem.doorbell.as_ptr() != doorbell.as_ptr())
    {
        return Err(ExchangeError::MixedDoorbells);
    }
    let mut hit = Vec::with_capacity(waits.len());
    let outcome = wait_until(
        &doorbell,
        policy,
        deadline,
        || {
            hit.clear();
            hit.extend(
                waits
                    .iter()
                    .enumerate()
                    .filter(|(_, (mem, seq))| mem.is_answered(*seq))
                    .map(|(i, _)| i),
            );
            if any {
                !hit.is_empty()
            } else {
                hit.len() == waits.len()
            }
        },
        should_abort,
    );
    Ok(match outcome {
        WaitOutcome::Ready => Waited::Ready(hit),
        WaitOutcome::TimedOut => Waited::TimedOut,
        WaitOutcome::Aborted => Waited::Aborted,
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::cell::UnsafeCell;
    use std::sync::Arc;
    use std::time::Duration;

    /// Two heap areas; accesses follow the channel protocol (which the loom model checks).
    #[derive(Debug)]
    struct HeapBox([UnsafeCell<Vec<u8>>; 2]);
    // SAFETY: test-only; accesses follow the channel protocol, which the loom model checks.
    unsafe impl Sync for HeapBox {}
    // SAFETY: as for Sync.
    unsafe impl Send for HeapBox {}
    impl Mailbox for HeapBox {
        fn capacity(&self) -> usize {
            // SAFETY: the length never changes after construction.
            unsafe { (*self.0[0].get()).len() }
        }
        unsafe fn write(&self, half: Half, src: &[u8]) {
            // SAFETY: the caller owns `half` (trait contract).
            unsafe { (&mut *self.0[half as usize].get())[..src.len()].copy_from_slice(src) }
        }
        unsafe fn read(&self, half: Half, dst: &mut [u8]) {
            // SAFETY: the caller owns `half` (trait contract).
            unsafe { dst.copy_from_slice(&(&*self.0[half as usize].get())[..dst.len()]) }
        }
    }

    fn channel(capacity: usize) -> StepChannelMem<Arc<HeapBox>> {
        let boxes = HeapBox([
            UnsafeCell::new(vec![0; capacity]),
            UnsafeCell::new(vec![0; capacity]),
        ]);
        StepChannelMem::new_heap(Arc::new(boxes), SharedRef::new_heap(EventCount::new()), 3)
    }

    #[test]
    fn round_trip_carries_header_and_payloads() {
        let mem = channel(8);
        let mut t = StepTrainer::new(mem.clone());
        let mut w = StepWorker::new(mem, 7);
        assert_eq!(w.try_request().unwrap(), None);
        assert_eq!(t.post(7, CMD_RESET, 42, b"seed").unwrap(), 1);
        assert_eq!(t.pending(), Some(1));
        let req = w.try_request().unwrap().unwrap();
        assert_eq!(
            req,
            Request {
                seq: 1,
                generation: 7,
                command: CMD_RESET,
                arg: 42,
                len: 4
            }
        );
        assert_eq!(w.payload(&req).unwrap(), b"seed");
        assert!(!t.answered(1));
        assert_eq!(w.respond(STATUS_OK, b"obs!ok").unwrap(), 1);
        assert!(t.answered(1) && t.pending().is_none());
        let (resp, payload) = t.response_bytes().unwrap();
        assert_eq!((resp.seq, resp.generation, resp.status), (1, 7, STATUS_OK));
        assert_eq!(payload, b"obs!ok");
        // An empty payload, then a full one.
        assert_eq!(t.post(7, CMD_STEP, 0, b"").unwrap(), 2);
        let req = w.try_request().unwrap().unwrap();
        assert_eq!((req.seq, req.len), (2, 0));
        w.respond(STATUS_ERROR, &[9; 8]).unwrap();
        let (resp, payload) = t.response_bytes().unwrap();
        assert_eq!((resp.status, payload), (STATUS_ERROR, vec![9; 8]));
    }

    #[test]
    fn post_while_pending_is_refused_naming_worker_and_seq() {
        let mem = channel(8);
        let mut t = StepTrainer::new(mem.clone());
        let mut w = StepWorker::new(mem, 1);
        t.post(1, CMD_STEP, 0, b"").unwrap();
        let e = t.post(1, CMD_STEP, 0, b"").unwrap_err();
        assert_eq!(e, ExchangeError::Pending { worker: 3, seq: 1 });
        assert_eq!(
            e.to_string(),
            "worker 3 has not answered request 1 yet: post the next request to it only after \
             that answer"
        );
        assert_eq!(
            t.response().unwrap_err(),
            ExchangeError::NotAnswered { worker: 3, seq: 1 }
        );
        // Taking it is not answering it.
        w.try_request().unwrap().unwrap();
        assert!(matches!(
            t.post(1, CMD_STEP, 0, b""),
            Err(ExchangeError::Pending { seq: 1, .. })
        ));
        assert!(matches!(
            w.try_request(),
            Err(ExchangeError::AlreadyServing { seq: 1, .. })
        ));
        w.respond(STATUS_OK, b"").unwrap();
        assert_eq!(t.post(1, CMD_STEP, 0, b"").unwrap(), 2);
    }

    #[test]
    fn oversize_payloads_are_refused_naming_both_sizes() {
        let mem = channel(4);
        let mut t = StepTrainer::new(mem.clone());
        let mut w = StepWorker::new(mem, 1);
        let e = t.post(1, CMD_CALL, 0, b"12345").unwrap_err();
        assert_eq!(
            e.to_string(),
            "request payload of 5 bytes for worker 3 exceeds the mailbox of 4 bytes \
             (mailbox_bytes)"
        );
        assert_eq!(t.posted(), 0, "a refused post publishes nothing");
        t.post(1, CMD_CALL, 0, b"1234").unwrap();
        w.try_request().unwrap().unwrap();
        let e = w.respond(STATUS_OK, b"abcde").unwrap_err();
        assert_eq!(
            e,
            ExchangeError::TooLarge {
                worker: 3,
                half: Half::Response,
                len: 5,
                capacity: 4
            }
        );
        // Still serving: a smaller answer goes through.
        w.respond(STATUS_OK, b"abcd").unwrap();
        assert_eq!(t.response_bytes().unwrap().1, b"abcd");
    }

    #[test]
    fn misuse_is_named() {
        let mem = channel(4);
        let t = StepTrainer::new(mem.clone());
        let mut w = StepWorker::new(mem, 1);
        assert_eq!(
            t.response().unwrap_err(),
            ExchangeError::NothingPosted { worker: 3 }
        );
        assert_eq!(
            w.respond(STATUS_OK, b"").unwrap_err(),
            ExchangeError::NotServing { worker: 3 }
        );
        let mut t = t;
        t.post(1, CMD_STEP, 0, b"ab").unwrap();
        let req = w.try_request().unwrap().unwrap();
        assert_eq!(
            w.respond(STATUS_RESTARTED, b"").unwrap_err(),
            ExchangeError::ReservedStatus {
                worker: 3,
                status: STATUS_RESTARTED
            }
        );
        assert!(matches!(
            w.read_payload(&req, &mut [0; 1]),
            Err(ExchangeError::WrongLength { len: 2, dst: 1 })
        ));
        w.respond(STATUS_OK, b"").unwrap();
        // The request is answered: its payload is no longer ours to read.
        assert!(matches!(
            w.payload(&req),
            Err(ExchangeError::Stale { seq: 1, .. })
        ));
    }

    #[test]
    fn skip_pending_answers_the_predecessors_request_restarted() {
        let mem = channel(8);
        let mut t = StepTrainer::new(mem.clone());
        // Generation 1 serves request 1, takes request 2 and dies before answering.
        let mut w1 = StepWorker::new(mem.clone(), 1);
        t.post(1, CMD_STEP, 0, b"a").unwrap();
        w1.try_request().unwrap().unwrap();
        w1.respond(STATUS_OK, b"one").unwrap();
        t.post(1, CMD_STEP, 0, b"b").unwrap();
        w1.try_request().unwrap().unwrap();
        drop(w1);
        // Generation 2 starts: request 2 is answered RESTARTED, never served.
        let mut w2 = StepWorker::new(mem.clone(), 2);
        assert_eq!(w2.skip_pending().unwrap(), Some(2));
        assert_eq!(w2.try_request().unwrap(), None);
        let (resp, payload) = t.response_bytes().unwrap();
        assert_eq!(
            (resp.seq, resp.generation, resp.status),
            (2, 2, STATUS_RESTARTED)
        );
        assert!(payload.is_empty());
        // Nothing pending now: a second skip does nothing, and the next request is served.
        assert_eq!(w2.skip_pending().unwrap(), None);
        t.post(2, CMD_RESET, 5, b"c").unwrap();
        let req = w2.try_request().unwrap().unwrap();
        assert_eq!((req.seq, req.command, req.arg), (3, CMD_RESET, 5));
        assert!(matches!(
            w2.skip_pending(),
            Err(ExchangeError::AlreadyServing { seq: 3, .. })
        ));
        w2.respond(STATUS_OK, b"").unwrap();
        assert_eq!(t.response().unwrap().generation, 2);
        // A generation that starts with nothing pending skips nothing.
        let mut w3 = StepWorker::new(mem, 3);
        assert_eq!(w3.skip_pending().unwrap(), None);
    }

    #[test]
    fn what_is_skipped_depends_on_the_generation_posted_for_not_on_timing() {
        let mem = channel(8);
        let mut t = StepTrainer::new(mem.clone());
        // Posted for generation 2 before its process opened its end: served, not skipped.
        t.post(2, CMD_RESET, 0, b"r").unwrap();
        let mut w2 = StepWorker::new(mem.clone(), 2);
        assert_eq!(w2.skip_pending().unwrap(), None);
        let req = w2.try_request().unwrap().unwrap();
        assert_eq!((req.seq, req.generation), (1, 2));
        w2.respond(STATUS_OK, b"").unwrap();
        // Posted for generation 1 (the trainer had not seen the restart) after generation 2
        // started: answered RESTARTED when it arrives, and the wait goes on.
        t.post(1, CMD_STEP, 0, b"s").unwrap();
        let soon = Some(Instant::now() + Duration::from_millis(10));
        let got = w2.wait_request(&WaitPolicy::BLOCKING, soon, || false);
        assert_eq!(got.unwrap(), Waited::TimedOut);
        let resp = t.response().unwrap();
        assert_eq!(
            (resp.seq, resp.generation, resp.status),
            (2, 2, STATUS_RESTARTED)
        );
        // Posted for generation 3: generation 2 has been replaced and must not serve it.
        t.post(3, CMD_STEP, 0, b"").unwrap();
        let e = w2.try_request().unwrap_err();
        assert_eq!(
            e.to_string(),
            "worker 3 generation 2 was superseded: request 3 is for generation 3"
        );
        assert_eq!(w2.skip_pending().unwrap_err(), e);
        assert_eq!(t.pending(), Some(3), "left pending for generation 3");
        let mut w3 = StepWorker::new(mem, 3);
        assert_eq!(w3.try_request().unwrap().unwrap().seq, 3);
    }

    #[test]
    fn corrupt_seqs_are_detected() {
        let mem = channel(4);
        let mut w = StepWorker::new(mem.clone(), 1);
        mem.ctl.request.seq.store(5, Ordering::Relaxed);
        assert!(matches!(
            w.try_request(),
            Err(ExchangeError::Corrupt {
                request: 5,
                response: 0,
                ..
            })
        ));
        mem.ctl.request.seq.store(1, Ordering::Relaxed);
        mem.ctl.request.len.store(99, Ordering::Relaxed);
        assert!(matches!(
            w.try_request(),
            Err(ExchangeError::Corrupt { len: 99, .. })
        ));
    }

    #[test]
    fn waits_time_out_and_end_when_answered() {
        let bell = SharedRef::new_heap(EventCount::new());
        let boxes = || {
            Arc::new(HeapBox([
                UnsafeCell::new(vec![0; 4]),
                UnsafeCell::new(vec![0; 4]),
            ]))
        };
        let a = StepChannelMem::new_heap(boxes(), bell.clone(), 0);
        let b = StepChannelMem::new_heap(boxes(), bell, 1);
        let (mut ta, mut tb) = (StepTrainer::new(a.clone()), StepTrainer::new(b.clone()));
        let policy = WaitPolicy::BLOCKING;
        let soon = || Some(Instant::now() + Duration::from_millis(10));
        let mut wa = StepWorker::new(a.clone(), 1);
        assert_eq!(
            wa.wait_request(&policy, soon(), || false).unwrap(),
            Waited::TimedOut
        );
        let sa = ta.post(1, CMD_STEP, 0, b"").unwrap();
        let sb = tb.post(1, CMD_STEP, 0, b"").unwrap();
        let waits = [(&a, sa), (&b, sb)];
        let got = wait_answers(&waits, true, &policy, soon(), || false).unwrap();
        assert_eq!(got, Waited::TimedOut);
        // Worker b answers from another thread while the trainer sleeps.
        let b2 = b.clone();
        let handle = std::thread::spawn(move || {
            let mut wb = StepWorker::new(b2, 1);
            let Waited::Ready(_) = wb.wait_request(&policy, None, || false).unwrap() else {
                panic!("no request");
            };
            std::thread::sleep(Duration::from_millis(5));
            wb.respond(STATUS_OK, b"b").unwrap();
        });
        let long = Some(Instant::now() + Duration::from_secs(10));
        let got = wait_answers(&waits, true, &policy, long, || false).unwrap();
        assert_eq!(got, Waited::Ready(vec![1]));
        handle.join().unwrap();
        let got = wait_answers(&waits, false, &policy, soon(), || false).unwrap();
        assert_eq!(got, Waited::TimedOut, "worker a has not answered");
        let Waited::Ready(_) = wa.wait_request(&policy, soon(), || false).unwrap() else {
            panic!("request to a not taken");
        };
        wa.respond(STATUS_OK, b"").unwrap();
        let got = wait_answers(&waits, false, &policy, soon(), || false).unwrap();
        assert_eq!(got, Waited::Ready(vec![0, 1]));
        let mut n = 0;
        let aborted = wait_answers(&[(&a, 99)], false, &policy, None, || {
            n += 1;
            n > 2
        });
        assert_eq!(aborted.unwrap(), Waited::Aborted);
        assert_eq!(
            wait_answers::<Arc<HeapBox>>(&[], true, &policy, None, || false).unwrap_err(),
            ExchangeError::NothingToWait
        );
        let other = channel(4);
        assert_eq!(
            wait_answers(&[(&a, 1), (&other, 1)], true, &policy, None, || false).unwrap_err(),
            ExchangeError::MixedDoorbells
        );
    }
}

//! Single-producer single-consumer ring of slot indices, in shared memory.
//!
//! The ring moves *ownership of slots*, not data: the producer claims a slot index, writes the
//! slot's payload wherever the layout puts it, then commits; the consumer pops the index,
//! reads the payload, then releases it. Protocol (Lamport ring with cached peer indices):
//!
//! * `tail` (written only by the producer) and `head` (written only by the consumer) are
//!   64-bit monotonic counters on their own 128-byte lines; slot `i` is `i & (capacity-1)`.
//!   They never wrap in practice (2^64 commits at 10^9/s is ~584 years), so there is no ABA.
//! * Producer: payload stores and the slot-header stamp, then `tail.store(Release)`. Consumer:
//!   `tail.load(Acquire)`, then payload reads. The mirror pair (`head` Release / Acquire)
//!   guarantees the consumer's reads finish before the producer overwrites a released slot.
//! * Each side caches the peer's counter in process-local memory and reloads it only when the
//!   ring looks full/empty, so the fast path costs one shared atomic store per operation.
//! * A producer that dies between claim and commit publishes nothing: `tail` never moved.
//!
//! The consumer may release popped slots in any order (Python leases die in GC order); it
//! keeps a local bitmap and publishes `head` over the contiguous released prefix.

use crate::eventcount::EventCount;
#[cfg(not(loom))]
use crate::shared::ShmSafe;
use crate::shared::{SharedRef, SharedSlice};
use crate::sync::{AtomicU64, Ordering, Padded};
use crate::wait::{wait_until, WaitOutcome, WaitPolicy, Waited};
use std::fmt;
use std::time::Instant;

/// Control words of one ring (lives in shared memory; 384 bytes outside loom).
#[repr(C)]
#[derive(Debug, Default)]
pub struct RingCtl {
    /// Next sequence number the producer will publish (producer-written).
    tail: Padded<AtomicU64>,
    /// Next sequence number the consumer will release (consumer-written).
    head: Padded<AtomicU64>,
    /// "A slot was freed" bell, for a producer waiting on a full ring.
    space: Padded<EventCount>,
}

impl RingCtl {
    /// A zeroed control block (heap use).
    pub fn new() -> Self {
        Self::default()
    }

    /// The eventcount a full producer sleeps on.
    pub fn space_bell(&self) -> &EventCount {
        &self.space
    }

    /// Published tail (diagnostics and supervision).
    pub fn tail(&self) -> u64 {
        // SYNC POINT: Acquire, so slots below the returned tail are fully written.
        self.tail.load(Ordering::Acquire)
    }

    /// Published head (diagnostics and supervision).
    pub fn head(&self) -> u64 {
        // SYNC POINT: Acquire, so slots below the returned head are no longer read.
        self.head.load(Ordering::Acquire)
    }
}

/// Per-slot header, stamped by the producer before publishing (64 bytes outside loom).
///
/// The fields are atomics so that a corrupted or concurrently written header is a detectable
/// error, never undefined behaviour.
#[repr(C)]
#[derive(Debug, Default)]
pub struct SlotHeader {
    seq: AtomicU64,
    generation: AtomicU64,
    flags: AtomicU64,
    _reserved: [u64; 5],
}

// SAFETY: `#[repr(C)]`, three Padded lines of atomics (two AtomicU64, one EventCount).
#[cfg(not(loom))]
unsafe impl ShmSafe for RingCtl {}
// SAFETY: `#[repr(C)]`, three AtomicU64 and reserved `u64`s that nobody reads or writes.
#[cfg(not(loom))]
unsafe impl ShmSafe for SlotHeader {}

#[cfg(not(loom))]
const _: () = {
    use crate::consts::{LINE, RING_CTL_SIZE, SLOT_HEADER_SIZE};
    use std::mem::{align_of, size_of};
    // A ring region is RingCtl then SlotHeaders at SLOT_HEADER_SIZE strides.
    assert!(size_of::<RingCtl>() == RING_CTL_SIZE);
    assert!(align_of::<RingCtl>() == LINE);
    assert!(size_of::<SlotHeader>() == SLOT_HEADER_SIZE);
    assert!(align_of::<SlotHeader>() == 8);
};

impl SlotHeader {
    /// A zeroed header (heap use).
    pub fn new() -> Self {
        Self::default()
    }
}

/// Errors from ring operations. Each names the values that disagreed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingError {
    /// A slot header carried a different sequence number than its position.
    Corrupt {
        /// Sequence number the consumer expected at this position.
        expected: u64,
        /// Sequence number found in the slot header.
        found: u64,
    },
    /// Claims must be committed in the order they were made.
    OutOfOrder {
        /// The sequence number that must be committed next.
        expected: u64,
        /// The sequence number passed in.
        found: u64,
    },
    /// `release` of a slot that is not currently popped.
    NotOutstanding {
        /// The sequence number passed in.
        seq: u64,
        /// Lowest unreleased sequence number.
        head: u64,
        /// Next sequence number to be popped.
        read: u64,
    },
    /// The ring capacity must be a non-zero power of two.
    BadCapacity(usize),
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Corrupt { expected, found } => write!(
                f,
                "ring slot header is corrupt: expected sequence number {expected}, found {found}"
            ),
            Self::OutOfOrder { expected, found } => write!(
                f,
                "claims must be committed in order: next to commit is {expected}, got {found}"
            ),
            Self::NotOutstanding { seq, head, read } => write!(
                f,
                "slot with sequence number {seq} is not popped and unreleased \
                 (outstanding range is {head}..{read})"
            ),
            Self::BadCapacity(c) => {
                write!(f, "ring capacity must be a non-zero power of two, got {c}")
            }
        }
    }
}

impl std::error::Error for RingError {}

/// Everything a ring endpoint needs: control words, slot headers and the bell that the
/// producer rings after publishing (the global doorbell for data rings).
#[derive(Debug, Clone)]
pub struct RingMem {
    ctl: SharedRef<RingCtl>,
    slots: SharedSlice<SlotHeader>,
    data_bell: SharedRef<EventCount>,
}

impl RingMem {
    /// Assembles a ring from shared parts; `slots.len()` is the capacity.
    pub fn new(
        ctl: SharedRef<RingCtl>,
        slots: SharedSlice<SlotHeader>,
        data_bell: SharedRef<EventCount>,
    ) -> Result<Self, RingError> {
        let cap = slots.len();
        if cap == 0 || !cap.is_power_of_two() {
            return Err(RingError::BadCapacity(cap));
        }
        Ok(Self {
            ctl,
            slots,
            data_bell,
        })
    }

    /// A ring on the heap with its own data bell (loom and unit tests).
    pub fn new_heap(capacity: usize) -> Result<Self, RingError> {
        let slots = (0..capacity).map(|_| SlotHeader::new()).collect();
        Self::new(
            SharedRef::new_heap(RingCtl::new()),
            SharedSlice::new_heap(slots),
            SharedRef::new_heap(EventCount::new()),
        )
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The control words.
    pub fn ctl(&self) -> &RingCtl {
        &self.ctl
    }

    /// The bell rung after each publish.
    pub fn data_bell(&self) -> &SharedRef<EventCount> {
        &self.data_bell
    }

    fn mask(&self) -> u64 {
        self.slots.len() as u64 - 1
    }
}

/// A claimed, not yet committed slot.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a claimed slot is lost until committed"]
pub struct Claim {
    /// Slot index in `0..capacity` (where the payload goes).
    pub index: usize,
    /// Monotonic sequence number of this slot.
    pub seq: u64,
}

/// A run of consecutive claimed slots (`claim_many`).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "claimed slots are lost until committed"]
pub struct ClaimBatch {
    /// Sequence number of the first slot.
    pub first_seq: u64,
    /// Number of slots.
    pub count: usize,
    mask: u64,
}

impl ClaimBatch {
    /// Slot index of the `i`-th claimed slot.
    pub fn index(&self, i: usize) -> usize {
        assert!(
            i < self.count,
            "claim batch index {i} out of range (count {})",
            self.count
        );
        ((self.first_seq + i as u64) & self.mask) as usize
    }
}

/// The producing end of a ring (one per ring, in the worker).
#[derive(Debug)]
pub struct Producer {
    mem: RingMem,
    /// Local copy of the published tail.
    tail: u64,
    /// Claimed but uncommitted slots beyond `tail`.
    claimed: u64,
    /// Last head value read from shared memory.
    cached_head: u64,
    generation: u64,
}

impl Producer {
    /// Opens the producing end; continues from the published tail (restart-safe).
    pub fn new(mem: RingMem, generation: u64) -> Self {
        let mut p = Self {
            mem,
            tail: 0,
            claimed: 0,
            cached_head: 0,
            generation,
        };
        p.reset(generation);
        p
    }

    /// Forgets uncommitted claims and continues from the published tail with a new generation.
    ///
    /// Used when a worker restarts: slots the previous generation committed stay in the ring
    /// and are delivered (their headers carry the old generation, so the consumer can decide).
    pub fn reset(&mut self, new_generation: u64) {
        // SYNC POINT: Acquire of our own published tail; a new process must see the last value.
        self.tail = self.mem.ctl.tail.load(Ordering::Acquire);
        // SYNC POINT: Acquire pairs with the consumer's Release of head.
        self.cached_head = self.mem.ctl.head.load(Ordering::Acquire);
        self.claimed = 0;
        self.generation = new_generation;
    }

    /// The generation stamped into every committed slot.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Slots this ring's producers (every generation) committed so far; the last one, if
    /// any, is at index `(committed - 1) & (capacity - 1)`.
    pub fn committed(&self) -> u64 {
        self.tail
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.mem.capacity()
    }

    /// The ring's shared parts.
    pub fn mem(&self) -> &RingMem {
        &self.mem
    }

    /// Free slots, reloading the consumer's head only when the cached value says "full".
    fn free(&mut self, want: u64) -> u64 {
        let cap = self.mem.capacity() as u64;
        let used = self.tail + self.claimed - self.cached_head;
        if cap - used >= want {
            return cap - used;
        }
        // SYNC POINT: Acquire pairs with the consumer's Release of head: its reads of the
        // released slots happen-before our overwrite.
        self.cached_head = self.mem.ctl.head.load(Ordering::Acquire);
        cap - (self.tail + self.claimed - self.cached_head)
    }

    /// Claims the next slot without blocking; `None` when the ring is full.
    pub fn claim(&mut self) -> Option<Claim> {
        if self.free(1) == 0 {
            return None;
        }
        let seq = self.tail + self.claimed;
        self.claimed += 1;
        Some(Claim {
            index: (seq & self.mem.mask()) as usize,
            seq,
        })
    }

    /// Claims up to `max` consecutive slots; `None` when the ring is full or `max == 0`.
    pub fn claim_many(&mut self, max: usize) -> Option<ClaimBatch> {
        let n = self.free(max as u64).min(max as u64);
        if n == 0 {
            return None;
        }
        let first_seq = self.tail + self.claimed;
        self.claimed += n;
        Some(ClaimBatch {
            first_seq,
            count: n as usize,
            mask: self.mem.mask(),
        })
    }

    /// Publishes a claimed slot (flags 0).
    pub fn commit(&mut self, claim: Claim) -> Result<(), RingError> {
        self.commit_with_flags(claim, 0)
    }

    /// Publishes a claimed slot with `flags` (a word the ring carries for the caller and never
    /// reads) in its header.
    pub fn commit_with_flags(&mut self, claim: Claim, flags: u64) -> Result<(), RingError> {
        if claim.seq != self.tail || self.claimed == 0 {
            return Err(RingError::OutOfOrder {
                expected: self.tail,
                found: claim.seq,
            });
        }
        self.stamp(claim.seq, flags);
        self.publish(1);
        Ok(())
    }

    /// Publishes every slot of a batch with one store and at most one wake-up.
    pub fn commit_many(&mut self, batch: ClaimBatch, flags: u64) -> Result<(), RingError> {
        if batch.first_seq != self.tail || (batch.count as u64) > self.claimed {
            return Err(RingError::OutOfOrder {
                expected: self.tail,
                found: batch.first_seq,
            });
        }
        for i in 0..batch.count as u64 {
            self.stamp(batch.first_seq + i, flags);
        }
        self.publish(batch.count as u64);
        Ok(())
    }

    fn stamp(&self, seq: u64, flags: u64) {
        let hdr = self.mem.slots.get((seq & self.mem.mask()) as usize);
        // Relaxed: these become visible through the Release store of tail in `publish`.
        hdr.seq.store(seq, Ordering::Relaxed);
        hdr.generation.store(self.generation, Ordering::Relaxed);
        hdr.flags.store(flags, Ordering::Relaxed);
    }

    fn publish(&mut self, n: u64) {
        self.tail += n;
        self.claimed -= n;
        // SYNC POINT: Release publishes the payload and header stores of slots < tail.
        self.mem.ctl.tail.store(self.tail, Ordering::Release);
        self.mem.data_bell.notify();
    }

    /// Claims a slot, waiting (spin → yield → futex) for the consumer to free one.
    pub fn claim_wait(
        &mut self,
        policy: &WaitPolicy,
        deadline: Option<Instant>,
        should_abort: impl FnMut() -> bool,
    ) -> Waited<Claim> {
        self.claim_wait_unless(policy, deadline, || false, should_abort)
    }

    /// [`Self::claim_wait`] that also gives up ([`Waited::Aborted`]) once `interrupted()`
    /// holds: a rollout worker waiting for a free slot, which a request on its step channel
    /// interrupts. `interrupted` is checked as the wait's condition is, after the waiter
    /// registers on the space bell, so whoever makes it hold and then rings that bell
    /// ([`Consumer::wake_producer`]) wakes the waiter: no wake-up is lost.
    pub fn claim_wait_unless(
        &mut self,
        policy: &WaitPolicy,
        deadline: Option<Instant>,
        mut interrupted: impl FnMut() -> bool,
        should_abort: impl FnMut() -> bool,
    ) -> Waited<Claim> {
        if let Some(c) = self.claim() {
            return Waited::Ready(c);
        }
        if interrupted() {
            return Waited::Aborted;
        }
        let ctl = self.mem.ctl.clone();
        let outcome = wait_until(
            ctl.space_bell(),
            policy,
            deadline,
            || self.free(1) > 0 || interrupted(),
            should_abort,
        );
        match outcome {
            WaitOutcome::Ready => match self.claim() {
                Some(c) => Waited::Ready(c),
                None if interrupted() => Waited::Aborted,
                None => Waited::TimedOut,
            },
            WaitOutcome::TimedOut => Waited::TimedOut,
            WaitOutcome::Aborted => Waited::Aborted,
        }
    }

    /// Slots published but not yet released by the consumer (reloads the head).
    pub fn in_flight(&mut self) -> u64 {
        // SYNC POINT: Acquire pairs with the consumer's Release of head.
        self.cached_head = self.mem.ctl.head.load(Ordering::Acquire);
        self.tail - self.cached_head
    }
}

/// A popped slot: where its payload is and what its header said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotRef {
    /// Slot index in `0..capacity`.
    pub index: usize,
    /// Monotonic sequence number.
    pub seq: u64,
    /// Generation of the producer that committed it.
    pub generation: u64,
    /// Flags the producer committed it with.
    pub flags: u64,
}

/// The consuming end of a ring (one per ring, in the trainer).
#[derive(Debug)]
pub struct Consumer {
    mem: RingMem,
    /// Lowest unreleased sequence number (the published head).
    head: u64,
    /// Next sequence number to pop.
    read: u64,
    /// Last tail value read from shared memory.
    cached_tail: u64,
    /// Released-but-not-yet-published flags, indexed by slot index.
    released: Vec<bool>,
    /// Popped and not yet released.
    live: u64,
}

impl Consumer {
    /// Opens the consuming end, continuing from the published head.
    pub fn new(mem: RingMem) -> Self {
        // SYNC POINT: Acquire our own published head (a re-opened consumer sees the last one).
        let head = mem.ctl.head.load(Ordering::Acquire);
        let released = vec![false; mem.capacity()];
        Self {
            mem,
            head,
            read: head,
            cached_tail: head,
            released,
            live: 0,
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.mem.capacity()
    }

    /// The ring's shared parts.
    pub fn mem(&self) -> &RingMem {
        &self.mem
    }

    /// Rings the space bell without freeing a slot, so that a producer waiting in
    /// [`Producer::claim_wait_unless`] checks its `interrupted` condition again. Call it after
    /// publishing what makes that condition hold (a request posted on the worker's step channel).
    pub fn wake_producer(&self) {
        self.mem.ctl.space.notify();
    }

    /// Number of committed slots not yet popped (always reloads the tail).
    pub fn available(&mut self) -> u64 {
        self.avail(u64::MAX)
    }

    /// Committed, unpopped slots; reloads the tail only if the cache shows fewer than `want`.
    fn avail(&mut self, want: u64) -> u64 {
        if self.cached_tail - self.read < want {
            // SYNC POINT: Acquire pairs with the producer's Release of tail: the payload and
            // header of every slot below it are visible after this load.
            self.cached_tail = self.mem.ctl.tail.load(Ordering::Acquire);
        }
        self.cached_tail - self.read
    }

    /// Popped slots not yet released.
    pub fn outstanding(&self) -> u64 {
        self.live
    }

    fn slot_at(&self, seq: u64) -> Result<SlotRef, RingError> {
        let index = (seq & self.mem.mask()) as usize;
        let hdr = self.mem.slots.get(index);
        // Relaxed: ordered after the Acquire load of tail in `available`.
        let found = hdr.seq.load(Ordering::Relaxed);
        if found != seq {
            return Err(RingError::Corrupt {
                expected: seq,
                found,
            });
        }
        Ok(SlotRef {
            index,
            seq,
            generation: hdr.generation.load(Ordering::Relaxed),
            flags: hdr.flags.load(Ordering::Relaxed),
        })
    }

    /// The next committed slot, without popping it.
    pub fn peek(&mut self) -> Result<Option<SlotRef>, RingError> {
        if self.avail(1) == 0 {
            return Ok(None);
        }
        self.slot_at(self.read).map(Some)
    }

    /// Pops the next committed slot; release it when done reading.
    pub fn try_pop(&mut self) -> Result<Option<SlotRef>, RingError> {
        let slot = self.peek()?;
        if slot.is_some() {
            self.read += 1;
            self.live += 1;
        }
        Ok(slot)
    }

    /// Pops up to `max` committed slots into `out` (cleared first); returns how many.
    pub fn pop_many(&mut self, max: usize, out: &mut Vec<SlotRef>) -> Result<usize, RingError> {
        out.clear();
        let n = self.avail(max as u64).min(max as u64);
        for i in 0..n {
            out.push(self.slot_at(self.read + i)?);
        }
        self.read += n;
        self.live += n;
        Ok(n as usize)
    }

    /// Pops a slot, waiting (spin → yield → futex on the data bell) until one is committed.
    pub fn pop_wait(
        &mut self,
        policy: &WaitPolicy,
        deadline: Option<Instant>,
        should_abort: impl FnMut() -> bool,
    ) -> Result<Waited<SlotRef>, RingError> {
        if let Some(s) = self.try_pop()? {
            return Ok(Waited::Ready(s));
        }
        let bell = self.mem.data_bell.clone();
        match wait_until(&bell, policy, deadline, || self.avail(1) > 0, should_abort) {
            WaitOutcome::Ready => Ok(match self.try_pop()? {
                Some(s) => Waited::Ready(s),
                None => Waited::TimedOut,
            }),
            WaitOutcome::TimedOut => Ok(Waited::TimedOut),
            WaitOutcome::Aborted => Ok(Waited::Aborted),
        }
    }

    /// Returns a popped slot to the producer (any order; `head` advances over the prefix).
    pub fn release(&mut self, seq: u64) -> Result<(), RingError> {
        self.mark_released(seq)?;
        self.advance_head();
        Ok(())
    }

    /// Returns `count` popped slots starting at `first_seq`, with one store and one wake-up.
    pub fn release_many(&mut self, first_seq: u64, count: usize) -> Result<(), RingError> {
        for i in 0..count as u64 {
            self.mark_released(first_seq + i)?;
        }
        self.advance_head();
        Ok(())
    }

    fn mark_released(&mut self, seq: u64) -> Result<(), RingError> {
        let index = (seq & self.mem.mask()) as usize;
        if seq < self.head || seq >= self.read || self.released[index] {
            return Err(RingError::NotOutstanding {
                seq,
                head: self.head,
                read: self.read,
            });
        }
        self.released[index] = true;
        self.live -= 1;
        Ok(())
    }

    fn advance_head(&mut self) {
        let old = self.head;
        let mask = self.mem.mask();
        while self.head < self.read && self.released[(self.head & mask) as usize] {
            self.released[(self.head & mask) as usize] = false;
            self.head += 1;
        }
        if self.head != old {
            // SYNC POINT: Release: our reads of the released slots happen-before the
            // producer's Acquire of head and its subsequent overwrite.
            self.mem.ctl.head.store(self.head, Ordering::Release);
            self.mem.ctl.space.notify();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fifo_and_full() {
        let mem = RingMem::new_heap(4).unwrap();
        let mut p = Producer::new(mem.clone(), 7);
        let mut c = Consumer::new(mem);
        for i in 0..4 {
            let cl = p.claim().unwrap();
            assert_eq!(cl.seq, i);
            p.commit(cl).unwrap();
        }
        assert!(p.claim().is_none());
        let s = c.try_pop().unwrap().unwrap();
        assert_eq!((s.seq, s.generation, s.index), (0, 7, 0));
        assert!(p.claim().is_none(), "not released yet");
        c.release(s.seq).unwrap();
        assert_eq!(p.claim().unwrap().index, 0);
    }

    #[test]
    fn out_of_order_release_publishes_prefix() {
        let mem = RingMem::new_heap(4).unwrap();
        let mut p = Producer::new(mem.clone(), 1);
        let mut c = Consumer::new(mem.clone());
        let b = p.claim_many(3).unwrap();
        p.commit_many(b, 0).unwrap();
        let mut v = Vec::new();
        assert_eq!(c.pop_many(8, &mut v).unwrap(), 3);
        c.release(1).unwrap();
        assert_eq!(mem.ctl().head(), 0);
        c.release(0).unwrap();
        assert_eq!(mem.ctl().head(), 2);
        assert!(matches!(
            c.release(1),
            Err(RingError::NotOutstanding { .. })
        ));
        c.release(2).unwrap();
        assert_eq!(mem.ctl().head(), 3);
    }

    #[test]
    fn dead_producer_publishes_nothing_and_restart_continues() {
        let mem = RingMem::new_heap(2).unwrap();
        let mut p = Producer::new(mem.clone(), 1);
        let cl = p.claim().unwrap();
        p.commit(cl).unwrap();
        let _lost = p.claim().unwrap();
        drop(p); // "dies" between claim and commit
        let mut c = Consumer::new(mem.clone());
        let mut p2 = Producer::new(mem, 2);
        let cl = p2.claim().unwrap();
        assert_eq!(cl.seq, 1);
        p2.commit(cl).unwrap();
        assert_eq!(c.try_pop().unwrap().unwrap().generation, 1);
        assert_eq!(c.try_pop().unwrap().unwrap().generation, 2);
        assert_eq!(c.try_pop().unwrap(), None);
    }

    #[test]
    fn corrupt_header_detected() {
        let mem = RingMem::new_heap(2).unwrap();
        let mut p = Producer::new(mem.clone(), 1);
        let cl = p.claim().unwrap();
        p.commit(cl).unwrap();
        mem.slots.get(0).seq.store(99, Ordering::Relaxed);
        let mut c = Consumer::new(mem);
        assert_eq!(
            c.try_pop(),
            Err(RingError::Corrupt {
                expected: 0,
                found: 99
            })
        );
    }

    #[test]
    fn commit_out_of_order_rejected() {
        let mem = RingMem::new_heap(4).unwrap();
        let mut p = Producer::new(mem, 1);
        let a = p.claim().unwrap();
        let b = p.claim().unwrap();
        assert_eq!(
            p.commit(b),
            Err(RingError::OutOfOrder {
                expected: 0,
                found: 1
            })
        );
        p.commit(a).unwrap();
    }

    #[test]
    fn bad_capacity() {
        assert_eq!(RingMem::new_heap(3).unwrap_err(), RingError::BadCapacity(3));
        assert!(RingMem::new_heap(0).is_err());
    }
}

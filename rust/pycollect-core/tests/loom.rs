//! Loom models of the lock-free protocols (run with `RUSTFLAGS="--cfg loom"`).
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test -p pycollect-core --release --test loom
//! ```
//!
//! Payloads live in `loom::cell::UnsafeCell`, so loom reports any access to a slot, weights
//! buffer or step-channel mailbox that is not ordered by the protocol as a data race.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU32, Ordering};
use loom::sync::Arc;
use loom::thread;
use pycollect_core::eventcount::EventCount;
use pycollect_core::exchange::{
    wait_answers, Half, Mailbox, StepChannelMem, StepTrainer, StepWorker, CMD_STEP, STATUS_OK,
    STATUS_RESTARTED,
};
use pycollect_core::metrics::WorkerMetricsMem;
use pycollect_core::ring::{Consumer, Producer, RingMem};
use pycollect_core::shared::SharedRef;
use pycollect_core::wait::{wait_until, WaitOutcome, WaitPolicy, Waited};
use pycollect_core::weights::{WeightBuffers, WeightsMem, WeightsReader, WeightsWriter};

/// Payload storage for a ring of `n` slots.
struct Slots(Vec<UnsafeCell<u64>>);

impl Slots {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(Self((0..n).map(|_| UnsafeCell::new(0)).collect()))
    }
}

// SAFETY: test code; access is checked by loom's UnsafeCell tracking.
unsafe impl Sync for Slots {}

#[test]
fn publish_consume_payload_capacity_2() {
    loom::model(|| {
        let mem = RingMem::new_heap(2).unwrap();
        let slots = Slots::new(2);
        let pslots = Arc::clone(&slots);
        // Endpoints are built before spawning (see the weights test).
        let mut p = Producer::new(mem.clone(), 1);
        let producer = thread::spawn(move || {
            for v in 1..=3u64 {
                let c = loop {
                    match p.claim() {
                        Some(c) => break c,
                        None => thread::yield_now(),
                    }
                };
                // SAFETY: test code; the claimed slot is ours until commit.
                pslots.0[c.index].with_mut(|p| unsafe { *p = v * 10 });
                p.commit(c).unwrap();
            }
        });
        let mut c = Consumer::new(mem);
        for v in 1..=3u64 {
            let s = loop {
                match c.try_pop().unwrap() {
                    Some(s) => break s,
                    None => thread::yield_now(),
                }
            };
            assert_eq!(s.seq, v - 1);
            assert_eq!(s.generation, 1);
            // SAFETY: test code; the popped slot is ours until release.
            let got = slots.0[s.index].with(|p| unsafe { *p });
            assert_eq!(got, v * 10);
            c.release(s.seq).unwrap();
        }
        producer.join().unwrap();
    });
}

#[test]
fn full_and_empty_batches_capacity_2() {
    loom::model(|| {
        let mem = RingMem::new_heap(2).unwrap();
        let slots = Slots::new(2);
        let pslots = Arc::clone(&slots);
        // Endpoints are built before spawning (see the weights test).
        let mut p = Producer::new(mem.clone(), 1);
        let producer = thread::spawn(move || {
            let mut next = 0u64;
            while next < 3 {
                let Some(b) = p.claim_many(2) else {
                    thread::yield_now();
                    continue;
                };
                for i in 0..b.count {
                    // SAFETY: test code; claimed slots are ours until commit.
                    pslots.0[b.index(i)].with_mut(|p| unsafe { *p = next + i as u64 });
                }
                next += b.count as u64;
                p.commit_many(b, 0).unwrap();
            }
            // Ring capacity is 2, so at most 2 may ever be in flight.
            assert!(p.in_flight() <= 2);
        });
        let mut c = Consumer::new(mem);
        let mut out = Vec::new();
        let mut expect = 0u64;
        while expect < 3 {
            if c.pop_many(2, &mut out).unwrap() == 0 {
                thread::yield_now();
                continue;
            }
            for s in &out {
                // SAFETY: test code; popped slots are ours until released.
                assert_eq!(slots.0[s.index].with(|p| unsafe { *p }), expect);
                assert_eq!(s.seq, expect);
                expect += 1;
            }
            c.release_many(out[0].seq, out.len()).unwrap();
        }
        producer.join().unwrap();
    });
}

#[test]
fn eventcount_loses_no_wakeup() {
    // The futex model ignores timeouts, so a lost wake-up would deadlock and loom would fail.
    loom::model(|| {
        let ec = Arc::new(EventCount::new());
        let flag = Arc::new(AtomicU32::new(0));
        let (ec2, flag2) = (Arc::clone(&ec), Arc::clone(&flag));
        let t = thread::spawn(move || {
            flag2.store(1, Ordering::Release);
            ec2.notify();
        });
        let r = wait_until(
            &ec,
            &WaitPolicy::BLOCKING,
            None,
            || flag.load(Ordering::Acquire) == 1,
            || false,
        );
        assert_eq!(r, WaitOutcome::Ready);
        t.join().unwrap();
    });
}

#[test]
fn blocking_pop_and_blocking_claim_wake_each_other() {
    loom::model(|| {
        let mem = RingMem::new_heap(1).unwrap();
        let mut p = Producer::new(mem.clone(), 1);
        let producer = thread::spawn(move || {
            for _ in 0..2 {
                match p.claim_wait(&WaitPolicy::BLOCKING, None, || false) {
                    Waited::Ready(c) => p.commit(c).unwrap(),
                    other => panic!("claim_wait ended with {other:?}"),
                }
            }
        });
        let mut c = Consumer::new(mem);
        for seq in 0..2 {
            match c.pop_wait(&WaitPolicy::BLOCKING, None, || false).unwrap() {
                Waited::Ready(s) => {
                    assert_eq!(s.seq, seq);
                    c.release(s.seq).unwrap();
                }
                other => panic!("pop_wait ended with {other:?}"),
            }
        }
        producer.join().unwrap();
    });
}

#[test]
fn request_posted_to_a_worker_waiting_for_a_slot_wakes_it() {
    // A rollout worker whose ring is full waits for a free slot, interrupted by a request on
    // its step channel: the trainer posts the request, then rings the space bell
    // (`wake_producer`). The futex model ignores timeouts, so a lost wake-up deadlocks.
    loom::model(|| {
        let ring = RingMem::new_heap(1).unwrap();
        let mut p = Producer::new(ring.clone(), 1);
        let c = Consumer::new(ring);
        let mem = step_channel();
        let mut trainer = StepTrainer::new(mem.clone());
        let worker = StepWorker::new(mem, 7);
        let first = p.claim().unwrap();
        p.commit(first).unwrap(); // the ring is full: the next claim waits
        let waiting = thread::spawn(move || {
            let got = p.claim_wait_unless(
                &WaitPolicy::BLOCKING,
                None,
                || worker.has_request(),
                || false,
            );
            assert!(matches!(got, Waited::Aborted), "claim ended with {got:?}");
            assert!(worker.has_request());
        });
        trainer.post(7, CMD_STEP, 1, &[1, 1]).unwrap();
        c.wake_producer();
        waiting.join().unwrap();
    });
}

/// Weights buffers of 2 bytes each; a consistent buffer holds `[v, v]`.
struct Bufs(Vec<UnsafeCell<[u8; 2]>>);

// SAFETY: test code; access is checked by loom's UnsafeCell tracking.
unsafe impl Sync for Bufs {}
// SAFETY: test code; as above.
unsafe impl Send for Bufs {}

impl WeightBuffers for Bufs {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn capacity(&self) -> usize {
        2
    }
    unsafe fn write(&self, buf: usize, src: &[u8]) {
        // Two separate stores, so a torn write would be observable.
        // SAFETY: test code; protocol ownership, checked by loom.
        self.0[buf].with_mut(|p| unsafe {
            (*p)[0] = src[0];
            (*p)[1] = src[1];
        });
    }
    unsafe fn read(&self, buf: usize, dst: &mut [u8]) {
        // SAFETY: test code; protocol ownership, checked by loom.
        self.0[buf].with(|p| unsafe {
            dst[0] = (*p)[0];
            dst[1] = (*p)[1];
        });
    }
}

#[test]
fn weights_reader_never_sees_torn_or_stale_version() {
    loom::model(|| {
        let bufs = std::sync::Arc::new(Bufs((0..3).map(|_| UnsafeCell::new([0; 2])).collect()));
        let mem = WeightsMem::new_heap(bufs, 1).unwrap();
        // Endpoints are built before spawning: their constructors' loads would otherwise
        // precede the first store and hide interleavings from loom's partial-order reduction.
        let mut w = WeightsWriter::new(mem.clone());
        let writer = thread::spawn(move || {
            // Version 4 reuses a buffer, which is where a broken pin protocol would tear.
            for v in 1..=4u8 {
                // One reader and three buffers: a free buffer always exists.
                assert_eq!(w.publish(&[v, v]).unwrap(), u64::from(v));
            }
        });
        let mut r = WeightsReader::new(mem, 0).unwrap();
        let mut last = 0u64;
        for _ in 0..2 {
            let mut dst = [0u8; 2];
            if let Some((version, len)) = r.read_latest(&mut dst).unwrap() {
                assert_eq!(len, 2);
                assert_eq!(
                    dst,
                    [version as u8, version as u8],
                    "torn or mismatched read"
                );
                assert!(version >= last, "version went backwards");
                last = version;
            }
        }
        writer.join().unwrap();
    });
}

/// A step-channel mailbox of 2 bytes per half; a consistent payload holds `[v, v]`.
struct Boxes([UnsafeCell<[u8; 2]>; 2]);

// SAFETY: test code; access is checked by loom's UnsafeCell tracking.
unsafe impl Sync for Boxes {}
// SAFETY: test code; as above.
unsafe impl Send for Boxes {}

impl Mailbox for Boxes {
    fn capacity(&self) -> usize {
        2
    }
    unsafe fn write(&self, half: Half, src: &[u8]) {
        // Byte by byte, so a torn write would be observable; the cell is touched even for an
        // empty payload, so every post and answer is checked for ownership.
        // SAFETY: test code; protocol ownership, checked by loom.
        self.0[half as usize].with_mut(|p| unsafe {
            for (i, &b) in src.iter().enumerate() {
                (*p)[i] = b;
            }
        });
    }
    unsafe fn read(&self, half: Half, dst: &mut [u8]) {
        // SAFETY: test code; protocol ownership, checked by loom.
        self.0[half as usize].with(|p| unsafe {
            for (i, d) in dst.iter_mut().enumerate() {
                *d = (*p)[i];
            }
        });
    }
}

fn step_channel() -> StepChannelMem<std::sync::Arc<Boxes>> {
    let boxes = Boxes([UnsafeCell::new([0; 2]), UnsafeCell::new([0; 2])]);
    StepChannelMem::new_heap(
        std::sync::Arc::new(boxes),
        SharedRef::new_heap(EventCount::new()),
        0,
    )
}

#[test]
fn step_exchange_rounds_lose_no_wakeup_and_never_race_on_payloads() {
    // Both sides sleep on eventcounts (the futex model ignores timeouts, so a lost wake-up
    // deadlocks and fails); payloads are loom cells (a write during a read is a reported race).
    loom::model(|| {
        let mem = step_channel();
        // Endpoints are built before spawning (see the weights test).
        let mut trainer = StepTrainer::new(mem.clone());
        let mut worker = StepWorker::new(mem, 7);
        let served = thread::spawn(move || {
            for round in 1..=3u64 {
                let req = match worker
                    .wait_request(&WaitPolicy::BLOCKING, None, || false)
                    .unwrap()
                {
                    Waited::Ready(req) => req,
                    other => panic!("wait_request ended with {other:?}"),
                };
                assert_eq!((req.seq, req.command, req.arg), (round, CMD_STEP, round));
                let v = round as u8;
                assert_eq!(
                    worker.payload(&req).unwrap(),
                    [v, v],
                    "torn or stale request"
                );
                worker.respond(STATUS_OK, &[v + 100, v + 100]).unwrap();
            }
        });
        for round in 1..=3u64 {
            let v = round as u8;
            let seq = trainer.post(7, CMD_STEP, round, &[v, v]).unwrap();
            assert_eq!(seq, round);
            let got = wait_answers(
                &[(trainer.mem(), seq)],
                false,
                &WaitPolicy::BLOCKING,
                None,
                || false,
            )
            .unwrap();
            assert_eq!(got, Waited::Ready(vec![0]));
            let (resp, payload) = trainer.response_bytes().unwrap();
            assert_eq!(
                (resp.seq, resp.generation, resp.status),
                (seq, 7, STATUS_OK)
            );
            assert_eq!(payload, [v + 100, v + 100], "torn or stale response");
        }
        served.join().unwrap();
    });
}

/// Worker generation 2 starts (`skip_pending`, then serves one request) while the trainer
/// posts a request for each of `generations` in turn: one for generation 1 (the trainer had
/// not seen the restart) must be answered RESTARTED, unserved, whether it arrives before or
/// after the new process's `skip_pending`; one for generation 2 must be served.
fn restart_model(generations: &'static [u64]) {
    loom::model(move || {
        let mem = step_channel();
        let mut trainer = StepTrainer::new(mem.clone());
        let mut worker = StepWorker::new(mem, 2);
        let started = thread::spawn(move || {
            worker.skip_pending().unwrap();
            let req = match worker
                .wait_request(&WaitPolicy::BLOCKING, None, || false)
                .unwrap()
            {
                Waited::Ready(req) => req,
                other => panic!("wait_request ended with {other:?}"),
            };
            assert_eq!(req.generation, 2, "a request for generation 1 was served");
            assert_eq!(worker.payload(&req).unwrap(), [2, 2]);
            worker.respond(STATUS_OK, &[3, 3]).unwrap();
        });
        for &generation in generations {
            let v = generation as u8;
            let seq = trainer.post(generation, CMD_STEP, 0, &[v, v]).unwrap();
            let got = wait_answers(
                &[(trainer.mem(), seq)],
                false,
                &WaitPolicy::BLOCKING,
                None,
                || false,
            )
            .unwrap();
            assert_eq!(got, Waited::Ready(vec![0]));
            let (resp, payload) = trainer.response_bytes().unwrap();
            assert_eq!((resp.seq, resp.generation), (seq, 2));
            if generation == 1 {
                assert_eq!((resp.status, payload.len()), (STATUS_RESTARTED, 0));
            } else {
                assert_eq!((resp.status, payload), (STATUS_OK, vec![3, 3]));
            }
        }
        started.join().unwrap();
    });
}

#[test]
fn step_exchange_request_left_for_a_dead_generation_is_answered_restarted() {
    restart_model(&[1, 2]);
}

#[test]
fn step_exchange_request_for_a_starting_generation_is_served() {
    restart_model(&[2]);
}

/// A worker's applied weights are read as a pair: never one update's version with another's digest.
#[test]
fn applied_weights_pair_is_never_torn() {
    loom::model(|| {
        let metrics = Arc::new(WorkerMetricsMem::default());
        let worker = Arc::clone(&metrics);
        let writer = thread::spawn(move || {
            worker.weights_applied(1, 10);
            worker.weights_applied(2, 20);
        });
        if let Some((version, digest)) = metrics.applied_weights() {
            assert_eq!(
                digest,
                version * 10,
                "a torn pair: version {version}, digest {digest}"
            );
        }
        writer.join().unwrap();
        assert_eq!(metrics.applied_weights(), Some((2, 20)));
    });
}

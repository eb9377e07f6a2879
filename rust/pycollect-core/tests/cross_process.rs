//! Cross-process tests over a real memfd: the test binary re-executes itself as the producer.
//!
//! The parent runs `current_exe() child_entry --exact` with `PYCOLLECT_TEST_ROLE` set and the
//! segment fd inherited (a dup without close-on-exec); `child_entry` is a no-op otherwise.
#![cfg(not(loom))]

use pycollect_core::layout::{DType, Field, Layout, LayoutParams};
use pycollect_core::segment::{AttachOptions, Segment, SegmentError};
use pycollect_core::wait::{wait_until, WaitOutcome, WaitPolicy, Waited};
use rustix::fd::{AsRawFd, BorrowedFd};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const K: usize = 2;
const T: usize = 4;
const DIM: usize = 3;
const WORDS: usize = K * T * DIM;

fn layout(n_workers: usize) -> Layout {
    Layout::new(LayoutParams::new(
        vec![Field::new("payload", DType::U64, &[DIM])],
        n_workers,
        K,
        T,
        8,
    ))
    .unwrap()
}

/// The value of word `i` of the slot (worker, generation, seq): detects torn or stale data.
fn word(worker: u64, generation: u64, seq: u64, i: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for v in [worker, generation, seq, i] {
        h ^= v;
        h = h.wrapping_mul(0x0000_0100_0000_01b3).rotate_left(17);
    }
    h
}

fn spawn_child(seg: &Segment, role: &str, worker: usize, extra: &[(&str, String)]) -> Child {
    // dup() clears close-on-exec, so the child inherits this fd number.
    let fd = rustix::io::dup(seg.fd()).unwrap();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env("PYCOLLECT_TEST_ROLE", role)
        .env("PYCOLLECT_TEST_FD", fd.as_raw_fd().to_string())
        .env("PYCOLLECT_TEST_WORKER", worker.to_string())
        .stdout(Stdio::piped());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap();
    drop(fd);
    child
}

fn env_usize(k: &str) -> usize {
    std::env::var(k).unwrap().parse().unwrap()
}

/// Entry point of the re-executed child; does nothing in a normal test run.
#[test]
fn child_entry() {
    let Ok(role) = std::env::var("PYCOLLECT_TEST_ROLE") else {
        return;
    };
    let fd = env_usize("PYCOLLECT_TEST_FD") as i32;
    // SAFETY: the parent passed this fd number and keeps it open for us (inherited).
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    let w = env_usize("PYCOLLECT_TEST_WORKER");
    let expected = std::env::var("PYCOLLECT_TEST_HASH")
        .ok()
        .map(|h| h.parse().unwrap());
    let opts = AttachOptions {
        expected_layout_hash: expected,
        ..Default::default()
    };
    let seg = match Segment::attach(fd, opts) {
        Ok(s) => s,
        Err(e) => {
            println!("ATTACH_ERROR {e}");
            let code = if matches!(e, SegmentError::LayoutMismatch { .. }) {
                3
            } else {
                4
            };
            std::process::exit(code);
        }
    };
    let field = seg.layout().field_index("payload").unwrap();
    let mut p = seg.producer(w).unwrap();
    let gen = p.generation();
    let write = |p: &mut pycollect_core::Producer, upto: usize| {
        let cl = match p.claim_wait(&WaitPolicy::BLOCKING, None, || seg.is_shutdown()) {
            Waited::Ready(c) => c,
            other => panic!("claim_wait: {other:?}"),
        };
        let dst = seg.field_ptr(field, cl.index, w).cast::<u64>();
        for i in 0..upto {
            // SAFETY: the claimed slot's block of WORDS u64s is ours until commit.
            unsafe { dst.add(i).write(word(w as u64, gen, cl.seq, i as u64)) };
        }
        cl
    };
    match role.as_str() {
        "producer" => {
            let n = env_usize("PYCOLLECT_TEST_N");
            for _ in 0..n {
                let cl = write(&mut p, WORDS);
                p.commit(cl).unwrap();
            }
        }
        "die_mid_write" => {
            let n = env_usize("PYCOLLECT_TEST_N");
            for _ in 0..n {
                let cl = write(&mut p, WORDS);
                p.commit(cl).unwrap();
            }
            let _half = write(&mut p, WORDS / 2);
            println!("MID_WRITE");
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        r => panic!("unknown role {r}"),
    }
    std::process::exit(0);
}

fn check_slot(seg: &Segment, w: usize, s: &pycollect_core::SlotRef, gen: u64) {
    let field = seg.layout().field_index("payload").unwrap();
    let src = seg.field_ptr(field, s.index, w).cast::<u64>();
    assert_eq!(s.generation, gen);
    for i in 0..WORDS {
        // SAFETY: the popped slot is ours until release.
        let v = unsafe { src.add(i).read() };
        assert_eq!(
            v,
            word(w as u64, gen, s.seq, i as u64),
            "worker {w} seq {} word {i}",
            s.seq
        );
    }
}

#[test]
fn two_producers_every_slot_exactly_once_in_order() {
    const N: usize = 3000;
    let seg = Segment::create(layout(2)).unwrap();
    let gens: Vec<u64> = (0..2)
        .map(|w| seg.worker(w).unwrap().begin_generation())
        .collect();
    let mut children: Vec<Child> = (0..2)
        .map(|w| spawn_child(&seg, "producer", w, &[("PYCOLLECT_TEST_N", N.to_string())]))
        .collect();
    let mut consumers: Vec<_> = (0..2).map(|w| seg.consumer(w).unwrap()).collect();
    let mut next = [0u64; 2];
    let deadline = Instant::now() + Duration::from_secs(60);
    let bell = seg.doorbell();
    while next.iter().any(|&n| n < N as u64) {
        let r = wait_until(
            &bell,
            &WaitPolicy::default(),
            Some(deadline),
            || consumers.iter_mut().any(|c| c.available() > 0),
            || false,
        );
        assert_eq!(r, WaitOutcome::Ready, "stalled at {next:?}");
        for (w, c) in consumers.iter_mut().enumerate() {
            while let Some(s) = c.try_pop().unwrap() {
                assert_eq!(s.seq, next[w], "worker {w} out of order");
                check_slot(&seg, w, &s, gens[w]);
                c.release(s.seq).unwrap();
                next[w] += 1;
            }
        }
    }
    for c in &mut children {
        assert!(c.wait().unwrap().success());
    }
    assert_eq!(consumers[0].try_pop().unwrap(), None);
}

#[test]
fn sigkill_mid_write_delivers_no_partial_slot_and_restart_continues() {
    const N: usize = 5;
    let seg = Segment::create(layout(1)).unwrap();
    let gen1 = seg.worker(0).unwrap().begin_generation();
    let mut child = spawn_child(
        &seg,
        "die_mid_write",
        0,
        &[("PYCOLLECT_TEST_N", N.to_string())],
    );
    // The child's stdout also carries the test harness's chatter; wait for our marker.
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("MID_WRITE") {
        line.clear();
        assert_ne!(
            out.read_line(&mut line).unwrap(),
            0,
            "child exited before the marker"
        );
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let mut c = seg.consumer(0).unwrap();
    for seq in 0..N as u64 {
        let s = c.try_pop().unwrap().expect("committed slot missing");
        assert_eq!(s.seq, seq);
        check_slot(&seg, 0, &s, gen1);
        c.release(s.seq).unwrap();
    }
    assert_eq!(
        c.try_pop().unwrap(),
        None,
        "a half-written slot was delivered"
    );
    // The supervisor restarts the worker with a new generation; it continues at seq N.
    let gen2 = seg.worker(0).unwrap().begin_generation();
    let mut child = spawn_child(&seg, "producer", 0, &[("PYCOLLECT_TEST_N", "3".into())]);
    assert!(child.wait().unwrap().success());
    for seq in N as u64..N as u64 + 3 {
        let s = c
            .try_pop()
            .unwrap()
            .expect("restarted worker's slot missing");
        assert_eq!(s.seq, seq);
        check_slot(&seg, 0, &s, gen2);
        c.release(s.seq).unwrap();
    }
}

#[test]
fn child_rejects_wrong_layout_hash() {
    let seg = Segment::create(layout(1)).unwrap();
    let wrong = seg.layout().hash() ^ 1;
    let child = spawn_child(
        &seg,
        "producer",
        0,
        &[("PYCOLLECT_TEST_HASH", wrong.to_string())],
    );
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.contains(&format!("{wrong:#018x}")), "{text}");
    assert!(
        text.contains(&format!("{:#018x}", seg.layout().hash())),
        "{text}"
    );
}

//! Two-process slot handoff over one segment, each next to a pipe doing the same handoff in
//! the same run.
//!
//! * Round-trip latency (p50/p99): shm spinning, shm futex (`WaitPolicy::BLOCKING` on both
//!   sides), shm with the default policy (spin 64, yield 2, then futex), and a pipe, with the
//!   two processes pinned to different cores (0 and 1), unpinned, and pinned to one core.
//! * Throughput (slots/s, GB/s) for 64 B, 4 KiB, 64 KiB and 1 MiB slots, the way the product
//!   uses a ring: the producer claims, fills and commits freely, the consumer pops, copies the
//!   payload out, checks it and releases, both with the default `WaitPolicy` (a busy stream
//!   pays no wake-up per slot). Once per slot (`claim`/`commit`, `pop_wait`/`release`) and in
//!   batches (`claim_many`/`commit_many`, `pop_many`/`release_many`), next to a pipe writing
//!   the same messages one per syscall and the same batches per syscall.
//!
//! ```sh
//! cargo bench -p pycollect-core --bench handoff                          # full, ~2-3 min
//! PYCOLLECT_BENCH_QUICK=1 cargo bench -p pycollect-core --bench handoff  # ~15 s after build
//! cargo bench -p pycollect-core --bench handoff -- --quick               # same quick mode
//! PYCOLLECT_BENCH_SUMMARY_ONLY=1 cargo bench -p pycollect-core --bench handoff  # no criterion
//! ```
//!
//! The bench binary re-executes itself as the peer process (`PYCOLLECT_BENCH_CHILD`). After
//! criterion's output it prints a summary: p50/p99 latencies with pipe ÷ shm ratios per
//! placement, throughput per size with shm ÷ pipe ratios, and the issue's targets.

#[cfg(loom)]
fn main() {}

#[cfg(not(loom))]
fn main() {
    imp::main();
}

#[cfg(not(loom))]
mod imp {
    use criterion::{BenchmarkId, Criterion, Throughput};
    use pycollect_core::layout::{DType, Field, Layout, LayoutParams};
    use pycollect_core::segment::{AttachOptions, Segment};
    use pycollect_core::wait::{wait_until, WaitOutcome, WaitPolicy, Waited};
    use pycollect_core::{Consumer, Producer, SlotRef};
    use rustix::fd::{AsRawFd, BorrowedFd, FromRawFd};
    use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};
    use std::fs::File;
    use std::io::{Read, Write};
    use std::process::{Child, Command};
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    const SIZES: [usize; 4] = [64, 4096, 64 * 1024, 1024 * 1024];
    /// Bytes of the latency payload (a sequence stamp, echoed back and checked).
    const STAMP: usize = 8;

    // ------------------------------------------------------------ wait policies

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Pol {
        /// Busy-poll (bounded; then yield and futex).
        Spin,
        /// `WaitPolicy::BLOCKING`: straight to the futex.
        Futex,
        /// `WaitPolicy::default()`: spin 64, yield 2, then futex (what the bindings use).
        Default,
    }

    impl Pol {
        fn policy(self) -> WaitPolicy {
            match self {
                // Bounded: the spin phase does not poll `should_abort`, so shutdown waits for it.
                Pol::Spin => WaitPolicy::spinning(1 << 20),
                Pol::Futex => WaitPolicy::BLOCKING,
                Pol::Default => WaitPolicy::default(),
            }
        }

        fn name(self) -> &'static str {
            match self {
                Pol::Spin => "spin",
                Pol::Futex => "futex",
                Pol::Default => "default",
            }
        }

        fn from_name(s: &str) -> Self {
            match s {
                "spin" => Pol::Spin,
                "futex" => Pol::Futex,
                _ => Pol::Default,
            }
        }
    }

    // ------------------------------------------------------------ placement

    /// The affinity mask the bench started with ("unpinned").
    static ORIGINAL: OnceLock<CpuSet> = OnceLock::new();

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Placement {
        /// Parent on CPU 0, child on CPU 1.
        Cores01,
        /// Whatever the scheduler does (the starting affinity mask).
        Unpinned,
        /// Both on CPU 0.
        Core00,
    }

    impl Placement {
        fn name(self) -> &'static str {
            match self {
                Placement::Cores01 => "pinned 0/1",
                Placement::Unpinned => "unpinned",
                Placement::Core00 => "same core 0/0",
            }
        }

        fn slug(self) -> &'static str {
            match self {
                Placement::Cores01 => "pinned01",
                Placement::Unpinned => "unpinned",
                Placement::Core00 => "core00",
            }
        }

        /// Whether this machine allows it (pinning needs CPUs 0 and 1 in our mask).
        fn available(self) -> bool {
            let orig = original();
            match self {
                Placement::Cores01 => orig.is_set(0) && orig.is_set(1),
                Placement::Unpinned => true,
                Placement::Core00 => orig.is_set(0),
            }
        }

        /// Pins this (parent) process; returns the CPU the child should pin itself to.
        fn apply(self) -> Option<usize> {
            let (parent, child) = match self {
                Placement::Cores01 => (Some(0), Some(1)),
                Placement::Unpinned => (None, None),
                Placement::Core00 => (Some(0), Some(0)),
            };
            pin(parent);
            child
        }
    }

    fn original() -> CpuSet {
        *ORIGINAL.get_or_init(|| sched_getaffinity(None).expect("sched_getaffinity"))
    }

    /// Pins the calling process to `cpu`, or restores the starting mask for `None`.
    fn pin(cpu: Option<usize>) {
        let set = match cpu {
            Some(c) => {
                let mut s = CpuSet::new();
                s.set(c);
                s
            }
            None => original(),
        };
        sched_setaffinity(None, &set).expect("sched_setaffinity");
    }

    fn spawn_child(mut cmd: Command, cpu: Option<usize>) -> Child {
        if let Some(c) = cpu {
            cmd.env("PYCOLLECT_BENCH_CPU", c.to_string());
        }
        cmd.spawn().expect("spawn bench child")
    }

    // ------------------------------------------------------------ helpers

    fn env(k: &str) -> String {
        std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"))
    }

    fn layout(size: usize, workers: usize, slots: usize) -> Layout {
        Layout::new(LayoutParams::new(
            vec![Field::new("payload", DType::U8, &[size])],
            workers,
            1,
            1,
            slots,
        ))
        .unwrap()
    }

    /// Ring slots for a throughput run: about 4 MiB of payload, between 4 and 256 slots.
    fn ring_slots(size: usize) -> usize {
        ((4 << 20) / size).clamp(4, 256)
    }

    /// Slots per `claim_many`/`pop_many` (and messages per pipe syscall) in batched mode.
    fn batch_len(size: usize) -> usize {
        (ring_slots(size) / 2).clamp(1, 64)
    }

    /// Writes `seq` into the first and last 8 bytes of a `size`-byte message at `p`.
    ///
    /// # Safety
    /// `p` must be valid for writes of `size` ≥ 8 bytes that no other party touches now.
    unsafe fn stamp(p: *mut u8, size: usize, seq: u64) {
        // SAFETY: the caller guarantees `size` writable bytes at `p`, `size` >= 8.
        unsafe {
            p.cast::<u64>().write_unaligned(seq);
            p.add(size - 8).cast::<u64>().write_unaligned(seq);
        }
    }

    /// Checks the stamps written by [`stamp`] in an owned copy of a message.
    fn check(msg: &[u8], seq: u64) {
        let first = u64::from_le_bytes(msg[..8].try_into().unwrap());
        let last = u64::from_le_bytes(msg[msg.len() - 8..].try_into().unwrap());
        assert!(
            first == seq && last == seq,
            "payload check failed: expected seq {seq}, found {first}/{last}"
        );
    }

    /// Copies a popped slot's payload out of the segment and checks it.
    fn consume(seg: &Segment, slot: &SlotRef, worker: usize, sink: &mut [u8]) {
        let src = seg.field_ptr(0, slot.index, worker);
        // SAFETY: the popped slot is ours until release (the producer does not touch it), the
        // field holds `sink.len()` bytes per slot, and `sink` is a distinct local buffer.
        unsafe { std::ptr::copy_nonoverlapping(src, sink.as_mut_ptr(), sink.len()) };
        check(sink, slot.seq);
    }

    // ------------------------------------------------------------ child side

    fn child(role: &str) {
        if let Ok(c) = std::env::var("PYCOLLECT_BENCH_CPU") {
            pin(Some(c.parse().unwrap()));
        }
        if role.starts_with("pipe") {
            return pipe_child(role);
        }
        let fd: i32 = env("PYCOLLECT_BENCH_FD").parse().unwrap();
        // SAFETY: the parent passed this inherited fd number and keeps it open.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let seg = Segment::attach(fd, AttachOptions::default()).unwrap();
        let pol = Pol::from_name(&env("PYCOLLECT_BENCH_POLICY")).policy();
        let size = seg.layout().params().fields[0].shape[0];
        let mut rx = seg.consumer(0).unwrap();
        let mut sink = vec![0u8; size];
        match role {
            "echo" => {
                let mut tx = seg.producer(1).unwrap();
                loop {
                    let Waited::Ready(s) = rx.pop_wait(&pol, None, || seg.is_shutdown()).unwrap()
                    else {
                        return;
                    };
                    consume(&seg, &s, 0, &mut sink);
                    rx.release(s.seq).unwrap();
                    let Waited::Ready(c) = tx.claim_wait(&pol, None, || seg.is_shutdown()) else {
                        return;
                    };
                    // SAFETY: the claimed slot's `size` bytes are ours until commit.
                    unsafe { stamp(seg.field_ptr(0, c.index, 1), size, s.seq) };
                    tx.commit(c).unwrap();
                }
            }
            "sink" => loop {
                let Waited::Ready(s) = rx.pop_wait(&pol, None, || seg.is_shutdown()).unwrap()
                else {
                    return;
                };
                consume(&seg, &s, 0, &mut sink);
                rx.release(s.seq).unwrap();
            },
            "sink_batch" => {
                let batch = batch_len(size);
                let bell = rx.mem().data_bell().clone();
                let mut popped = Vec::with_capacity(batch);
                loop {
                    let n = rx.pop_many(batch, &mut popped).unwrap();
                    if n == 0 {
                        let r = wait_until(
                            &bell,
                            &pol,
                            None,
                            || rx.available() > 0,
                            || seg.is_shutdown(),
                        );
                        if r != WaitOutcome::Ready {
                            return;
                        }
                        continue;
                    }
                    for s in &popped {
                        consume(&seg, s, 0, &mut sink);
                    }
                    rx.release_many(popped[0].seq, n).unwrap();
                }
            }
            other => panic!("unknown child role {other}"),
        }
    }

    fn pipe_child(role: &str) {
        // SAFETY: inherited fd numbers passed by the parent; we own them from here on.
        let (mut r, mut w) = unsafe {
            (
                File::from_raw_fd(env("PYCOLLECT_BENCH_RFD").parse().unwrap()),
                File::from_raw_fd(env("PYCOLLECT_BENCH_WFD").parse().unwrap()),
            )
        };
        let size: usize = env("PYCOLLECT_BENCH_SIZE").parse().unwrap();
        let chunk: usize = env("PYCOLLECT_BENCH_CHUNK").parse().unwrap();
        let mut buf = vec![0u8; size * chunk];
        let mut expected = 0u64;
        loop {
            if role == "pipe_echo" {
                if r.read_exact(&mut buf[..size]).is_err() {
                    return;
                }
                w.write_all(&buf[..size]).unwrap();
            } else {
                let mut n = [0u8; 8];
                if r.read_exact(&mut n).is_err() {
                    return;
                }
                let mut left = u64::from_le_bytes(n) as usize;
                while left > 0 {
                    let k = left.min(chunk);
                    r.read_exact(&mut buf[..k * size]).unwrap();
                    for m in buf[..k * size].chunks_exact(size) {
                        check(m, expected);
                        expected += 1;
                    }
                    left -= k;
                }
                w.write_all(&[1]).unwrap();
            }
        }
    }

    // ------------------------------------------------------------ parent side

    struct ShmPeer {
        seg: Segment,
        child: Child,
        tx: Producer,
        rx: Option<Consumer>,
        pol: WaitPolicy,
        src: Vec<u8>,
        sink: Vec<u8>,
        batch: usize,
    }

    impl ShmPeer {
        /// An echo peer for round trips (ring 0 out, ring 1 back, 8-byte payload).
        fn echo(pol: Pol, place: Placement) -> Self {
            Self::spawn("echo", pol, place, STAMP, 2, 8, 1)
        }

        /// A sink peer for throughput; `batched` selects claim_many/pop_many on both sides.
        fn sink(size: usize, batched: bool, place: Placement) -> Self {
            let (role, batch) = if batched {
                ("sink_batch", batch_len(size))
            } else {
                ("sink", 1)
            };
            Self::spawn(role, Pol::Default, place, size, 1, ring_slots(size), batch)
        }

        fn spawn(
            role: &str,
            pol: Pol,
            place: Placement,
            size: usize,
            workers: usize,
            slots: usize,
            batch: usize,
        ) -> Self {
            let child_cpu = place.apply();
            let seg = Segment::create(layout(size, workers, slots)).unwrap();
            let fd = rustix::io::dup(seg.fd()).unwrap(); // no close-on-exec: inherited
            let mut cmd = Command::new(std::env::current_exe().unwrap());
            cmd.env("PYCOLLECT_BENCH_CHILD", role)
                .env("PYCOLLECT_BENCH_FD", fd.as_raw_fd().to_string())
                .env("PYCOLLECT_BENCH_POLICY", pol.name());
            let child = spawn_child(cmd, child_cpu);
            drop(fd);
            let tx = seg.producer(0).unwrap();
            let rx = (workers > 1).then(|| seg.consumer(1).unwrap());
            Self {
                seg,
                child,
                tx,
                rx,
                pol: pol.policy(),
                src: vec![0xa5; size],
                sink: vec![0; size],
                batch,
            }
        }

        fn round_trip(&mut self) {
            let Waited::Ready(c) = self.tx.claim_wait(&self.pol, None, || false) else {
                panic!("claim_wait gave up")
            };
            let seq = c.seq;
            // SAFETY: the claimed slot's STAMP bytes are ours until commit.
            unsafe { stamp(self.seg.field_ptr(0, c.index, 0), STAMP, seq) };
            self.tx.commit(c).unwrap();
            let rx = self.rx.as_mut().expect("echo peer");
            let Waited::Ready(s) = rx.pop_wait(&self.pol, None, || false).unwrap() else {
                panic!("pop_wait gave up")
            };
            consume(&self.seg, &s, 1, &mut self.sink);
            // The echo stamps its reply with the sequence number it received.
            let echoed = u64::from_le_bytes(self.sink[..8].try_into().unwrap());
            assert_eq!(echoed, seq);
            rx.release(s.seq).unwrap();
        }

        /// Fills slot `index` with the source payload stamped with `seq`.
        fn fill(&self, index: usize, seq: u64) {
            let size = self.src.len();
            let dst = self.seg.field_ptr(0, index, 0);
            // SAFETY: the claimed slot's `size` bytes are ours until commit; `src` is a
            // distinct local buffer of `size` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(self.src.as_ptr(), dst, size);
                stamp(dst, size, seq);
            }
        }

        /// Waits (with the peer's policy) until the consumer released a slot, or all of them.
        fn wait_space(&mut self, all: bool) {
            let ring = self.tx.mem().clone();
            let cap = self.tx.capacity() as u64;
            let tx = &mut self.tx;
            let r = wait_until(
                ring.ctl().space_bell(),
                &self.pol,
                None,
                || {
                    let f = tx.in_flight();
                    if all {
                        f == 0
                    } else {
                        f < cap
                    }
                },
                || false,
            );
            assert_eq!(r, WaitOutcome::Ready);
        }

        /// Sends `n` full-size slots and waits until the peer has checked and released all.
        fn stream(&mut self, n: u64) {
            if self.batch == 1 {
                for _ in 0..n {
                    let Waited::Ready(c) = self.tx.claim_wait(&self.pol, None, || false) else {
                        panic!("claim_wait gave up")
                    };
                    self.fill(c.index, c.seq);
                    self.tx.commit(c).unwrap();
                }
            } else {
                let mut left = n as usize;
                while left > 0 {
                    match self.tx.claim_many(left.min(self.batch)) {
                        Some(b) => {
                            for i in 0..b.count {
                                self.fill(b.index(i), b.first_seq + i as u64);
                            }
                            left -= b.count;
                            self.tx.commit_many(b, 0).unwrap();
                        }
                        None => self.wait_space(false),
                    }
                }
            }
            self.wait_space(true);
        }
    }

    impl Drop for ShmPeer {
        fn drop(&mut self) {
            self.seg.shutdown();
            let _ = self.child.wait();
            pin(None);
        }
    }

    struct PipePeer {
        child: Child,
        w: File,
        r: File,
        size: usize,
        chunk: usize,
        buf: Vec<u8>,
        sent: u64,
    }

    impl PipePeer {
        fn echo(place: Placement) -> Self {
            Self::spawn("pipe_echo", STAMP, 1, place)
        }

        /// A pipe sink reading `chunk` messages of `size` bytes per syscall.
        fn sink(size: usize, chunk: usize, place: Placement) -> Self {
            Self::spawn("pipe_sink", size, chunk, place)
        }

        fn spawn(role: &str, size: usize, chunk: usize, place: Placement) -> Self {
            let child_cpu = place.apply();
            // Close-on-exec everywhere, then non-CLOEXEC dups of just the child's two ends:
            // a child that inherited the parent's write end would never see EOF.
            let cloexec = rustix::pipe::PipeFlags::CLOEXEC;
            let (to_child_r, to_child_w) = rustix::pipe::pipe_with(cloexec).unwrap();
            let (from_child_r, from_child_w) = rustix::pipe::pipe_with(cloexec).unwrap();
            let to_child_r = rustix::io::dup(&to_child_r).unwrap();
            let from_child_w = rustix::io::dup(&from_child_w).unwrap();
            let mut cmd = Command::new(std::env::current_exe().unwrap());
            cmd.env("PYCOLLECT_BENCH_CHILD", role)
                .env("PYCOLLECT_BENCH_RFD", to_child_r.as_raw_fd().to_string())
                .env("PYCOLLECT_BENCH_WFD", from_child_w.as_raw_fd().to_string())
                .env("PYCOLLECT_BENCH_SIZE", size.to_string())
                .env("PYCOLLECT_BENCH_CHUNK", chunk.to_string());
            let child = spawn_child(cmd, child_cpu);
            drop((to_child_r, from_child_w));
            Self {
                child,
                w: File::from(to_child_w),
                r: File::from(from_child_r),
                size,
                chunk,
                buf: vec![0xa5; size * chunk],
                sent: 0,
            }
        }

        fn round_trip(&mut self) {
            let seq = self.sent;
            self.sent += 1;
            self.w.write_all(&seq.to_le_bytes()).unwrap();
            let mut b = [0u8; STAMP];
            self.r.read_exact(&mut b).unwrap();
            assert_eq!(u64::from_le_bytes(b), seq);
        }

        /// Writes `n` stamped messages (`chunk` per syscall) and waits for the child's ack.
        fn stream(&mut self, n: u64) {
            self.w.write_all(&n.to_le_bytes()).unwrap();
            let mut left = n as usize;
            while left > 0 {
                let k = left.min(self.chunk);
                for m in self.buf[..k * self.size].chunks_exact_mut(self.size) {
                    // SAFETY: `m` is an exclusively borrowed message of `size` >= 8 bytes.
                    unsafe { stamp(m.as_mut_ptr(), self.size, self.sent) };
                    self.sent += 1;
                }
                self.w.write_all(&self.buf[..k * self.size]).unwrap();
                left -= k;
            }
            let mut b = [0u8; 1];
            self.r.read_exact(&mut b).unwrap();
        }
    }

    impl Drop for PipePeer {
        fn drop(&mut self) {
            // Closing our write end gives the child EOF.
            let (null_r, null_w) =
                rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
            drop(null_r);
            drop(std::mem::replace(&mut self.w, File::from(null_w)));
            let _ = self.child.wait();
            pin(None);
        }
    }

    // ------------------------------------------------------------ measurement

    /// (p50, p99) in µs of `n` timed calls after `n / 10` warm-up calls.
    fn percentiles(mut f: impl FnMut(), n: usize) -> (f64, f64) {
        let mut one: [&mut dyn FnMut(); 1] = [&mut f];
        interleaved(&mut one, n, 1)[0]
    }

    /// (p50, p99) in µs for each of `fs`: `n / 10` warm-up calls each, then `rounds` rounds
    /// of `n / rounds` timed calls of every function in turn, so that the machine's drift
    /// over the run affects all of them alike.
    fn interleaved(fs: &mut [&mut dyn FnMut()], n: usize, rounds: usize) -> Vec<(f64, f64)> {
        for f in fs.iter_mut() {
            (0..n / 10).for_each(|_| f());
        }
        let per = n / rounds;
        let mut samples = vec![Vec::with_capacity(per * rounds); fs.len()];
        for _ in 0..rounds {
            for (f, v) in fs.iter_mut().zip(samples.iter_mut()) {
                v.extend((0..per).map(|_| {
                    let t = Instant::now();
                    f();
                    t.elapsed().as_secs_f64() * 1e6
                }));
            }
        }
        samples
            .into_iter()
            .map(|mut v| {
                v.sort_by(|a, b| a.total_cmp(b));
                (v[v.len() / 2], v[v.len() * 99 / 100])
            })
            .collect()
    }

    /// Median over `reps` of slots/s moving `n` slots (after a warm-up of n/10).
    fn slots_per_s(mut f: impl FnMut(u64), n: u64, reps: usize) -> f64 {
        f(n.div_ceil(10));
        let mut v: Vec<f64> = (0..reps)
            .map(|_| {
                let t = Instant::now();
                f(n);
                n as f64 / t.elapsed().as_secs_f64()
            })
            .collect();
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    }

    struct Lat {
        place: Placement,
        rows: Vec<(String, (f64, f64))>,
    }

    fn latencies(place: Placement, n: usize) -> Lat {
        let mut rows = Vec::new();
        if place != Placement::Core00 {
            // Measured alone: a spinning peer would steal cycles from the others. (Two
            // spinners on one core cost a time slice per round trip, so not on Core00.)
            let mut p = ShmPeer::echo(Pol::Spin, place);
            rows.push(("shm spin".to_string(), percentiles(|| p.round_trip(), n)));
        }
        // The blocking mechanisms, interleaved in rounds against the same drift.
        let mut futex = ShmPeer::echo(Pol::Futex, place);
        let mut default = ShmPeer::echo(Pol::Default, place);
        let mut pipe = PipePeer::echo(place);
        let (mut f1, mut f2, mut f3) = (
            || futex.round_trip(),
            || default.round_trip(),
            || pipe.round_trip(),
        );
        let mut fs: [&mut dyn FnMut(); 3] = [&mut f1, &mut f2, &mut f3];
        let r = interleaved(&mut fs, n, 10);
        for (name, v) in ["shm futex", "shm default", "pipe"].into_iter().zip(r) {
            rows.push((name.to_string(), v));
        }
        Lat { place, rows }
    }

    fn print_latencies(all: &[Lat], n: usize) {
        println!("\n== round trip, 2 processes, {n} samples each (µs) ==");
        println!(
            "{:<14} {:<12} {:>9} {:>9} {:>14} {:>14}",
            "placement", "mechanism", "p50", "p99", "pipe/this p50", "pipe/this p99"
        );
        for lat in all {
            let (pp50, pp99) = lat.rows.last().unwrap().1;
            for (name, (p50, p99)) in &lat.rows {
                println!(
                    "{:<14} {name:<12} {p50:>9.2} {p99:>9.2} {:>13.2}x {:>13.2}x",
                    lat.place.name(),
                    pp50 / p50,
                    pp99 / p99
                );
            }
        }
        println!("targets (same run): spin p50 >= 10x faster than pipe; futex p50 <= pipe p50");
        for lat in all {
            let get = |k: &str| lat.rows.iter().find(|r| r.0 == k).map(|r| r.1 .0);
            let pipe = get("pipe").unwrap();
            if let Some(spin) = get("shm spin") {
                let ok = pipe / spin >= 10.0;
                println!(
                    "  {:<14} spin  {:>8.1}x  {}",
                    lat.place.name(),
                    pipe / spin,
                    if ok { "MET" } else { "MISSED" }
                );
            }
            let futex = get("shm futex").unwrap();
            println!(
                "  {:<14} futex {:>8.2}x  {}",
                lat.place.name(),
                pipe / futex,
                if futex <= pipe { "MET" } else { "MISSED" }
            );
        }
    }

    fn throughput(place: Placement, quick: bool, reps: usize) {
        println!(
            "\n== throughput, {} (default WaitPolicy; consumer copies out + checks every slot) ==",
            place.name()
        );
        println!(
            "{:>8} {:>5} {:>9} {:>13} {:>9} {:>13} {:>9} {:>9}",
            "size",
            "slots",
            "mode",
            "shm slots/s",
            "shm GB/s",
            "pipe slots/s",
            "pipe GB/s",
            "shm/pipe"
        );
        let bytes: u64 = if quick { 64 << 20 } else { 512 << 20 };
        let max_count: u64 = if quick { 100_000 } else { 1_000_000 };
        for size in SIZES {
            let count = (bytes / size as u64).clamp(64, max_count);
            for batched in [false, true] {
                let chunk = if batched { batch_len(size) } else { 1 };
                let mut s = ShmPeer::sink(size, batched, place);
                let shm = slots_per_s(|k| s.stream(k), count, reps);
                drop(s);
                let mut p = PipePeer::sink(size, chunk, place);
                let pipe = slots_per_s(|k| p.stream(k), count, reps);
                drop(p);
                let gb = |r: f64| r * size as f64 / 1e9;
                let mode = if batched {
                    format!("batch {chunk}")
                } else {
                    "per slot".to_string()
                };
                println!(
                    "{:>8} {:>5} {mode:>9} {shm:>13.0} {:>9.3} {pipe:>13.0} {:>9.3} {:>8.2}x",
                    human(size),
                    ring_slots(size),
                    gb(shm),
                    gb(pipe),
                    shm / pipe
                );
            }
        }
    }

    fn human(size: usize) -> String {
        match size {
            s if s >= 1 << 20 => format!("{} MiB", s >> 20),
            s if s >= 1 << 10 => format!("{} KiB", s >> 10),
            s => format!("{s} B"),
        }
    }

    // ------------------------------------------------------------ criterion

    /// Wall time of `run(iters)`, for criterion's `iter_custom`.
    fn timed(iters: u64, mut run: impl FnMut(u64)) -> Duration {
        let t = Instant::now();
        run(iters);
        t.elapsed()
    }

    fn criterion_benches(c: &mut Criterion) {
        {
            let mut g = c.benchmark_group("round_trip");
            for place in [Placement::Cores01, Placement::Unpinned] {
                if !place.available() {
                    continue;
                }
                for pol in [Pol::Spin, Pol::Futex] {
                    let mut p = ShmPeer::echo(pol, place);
                    let id = BenchmarkId::new(format!("shm_{}", pol.name()), place.slug());
                    g.bench_function(id, |b| {
                        b.iter_custom(|iters| timed(iters, |n| (0..n).for_each(|_| p.round_trip())))
                    });
                }
                let mut p = PipePeer::echo(place);
                g.bench_function(BenchmarkId::new("pipe", place.slug()), |b| {
                    b.iter_custom(|iters| timed(iters, |n| (0..n).for_each(|_| p.round_trip())))
                });
            }
            g.finish();
        }
        {
            let place = Placement::Unpinned;
            let mut g = c.benchmark_group("throughput");
            for size in SIZES {
                g.throughput(Throughput::Bytes(size as u64));
                for batched in [false, true] {
                    let chunk = if batched { batch_len(size) } else { 1 };
                    let suffix = if batched { "_batch" } else { "" };
                    let mut p = ShmPeer::sink(size, batched, place);
                    g.bench_with_input(
                        BenchmarkId::new(format!("shm{suffix}"), size),
                        &size,
                        |b, _| b.iter_custom(|iters| timed(iters, |n| p.stream(n))),
                    );
                    drop(p);
                    let mut p = PipePeer::sink(size, chunk, place);
                    g.bench_with_input(
                        BenchmarkId::new(format!("pipe{suffix}"), size),
                        &size,
                        |b, _| b.iter_custom(|iters| timed(iters, |n| p.stream(n))),
                    );
                }
            }
            g.finish();
        }
    }

    pub fn main() {
        if let Ok(role) = std::env::var("PYCOLLECT_BENCH_CHILD") {
            return child(&role);
        }
        original();
        let flag = |k: &str| std::env::var(k).is_ok_and(|v| !v.is_empty() && v != "0");
        let quick = flag("PYCOLLECT_BENCH_QUICK") || std::env::args().any(|a| a == "--quick");
        if !flag("PYCOLLECT_BENCH_SUMMARY_ONLY") {
            let mut c = Criterion::default().configure_from_args();
            if quick {
                c = c
                    .sample_size(10)
                    .warm_up_time(Duration::from_millis(100))
                    .measurement_time(Duration::from_millis(300));
            }
            criterion_benches(&mut c);
        }

        // ------------------------------------------------------------ summary
        let n = if quick { 2000 } else { 20_000 };
        let reps = if quick { 1 } else { 3 };
        let cpus = (0..CpuSet::MAX_CPU)
            .filter(|&c| original().is_set(c))
            .count();
        println!(
            "\n==== pycollect handoff summary ({} mode, {cpus} CPUs in mask) ====",
            if quick { "quick" } else { "full" }
        );
        let places: Vec<Placement> = [Placement::Cores01, Placement::Unpinned, Placement::Core00]
            .into_iter()
            .filter(|p| p.available())
            .collect();
        let lat: Vec<Lat> = places.iter().map(|&p| latencies(p, n)).collect();
        print_latencies(&lat, n);
        for place in [Placement::Unpinned, Placement::Cores01] {
            if place.available() {
                throughput(place, quick, reps);
            }
        }
        pin(None);
    }
}

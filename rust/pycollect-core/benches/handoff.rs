//! Two-process slot handoff: round-trip latency (spinning and futex) and throughput for
//! 64 B .. 1 MiB slots, each next to a pipe doing the same handoff in the same run.
//!
//! ```sh
//! cargo bench -p pycollect-core --bench handoff                 # full
//! PYCOLLECT_BENCH_QUICK=1 cargo bench -p pycollect-core --bench handoff   # < 1 min
//! cargo bench -p pycollect-core --bench handoff -- --quick      # same quick mode
//! ```
//!
//! The bench binary re-executes itself as the peer process (`PYCOLLECT_BENCH_CHILD`). After
//! criterion's output it prints a summary with p50/p99 latencies and shm/pipe ratios.

#[cfg(loom)]
fn main() {}

#[cfg(not(loom))]
fn main() {
    imp::main();
}

#[cfg(not(loom))]
mod imp {
    use criterion::{BenchmarkId, Criterion, Throughput};
    use pycollect_core::layout::{DType, FieldSpec, Layout, LayoutParams};
    use pycollect_core::segment::{AttachOptions, Segment};
    use pycollect_core::wait::{wait_until, WaitOutcome, WaitPolicy, Waited};
    use pycollect_core::{Consumer, Producer};
    use rustix::fd::{AsRawFd, BorrowedFd, FromRawFd};
    use std::fs::File;
    use std::io::{Read, Write};
    use std::process::{Child, Command};
    use std::time::{Duration, Instant};

    const SIZES: [usize; 4] = [64, 4096, 64 * 1024, 1024 * 1024];

    fn spin_policy() -> WaitPolicy {
        // Bounded: the spin phase does not poll `should_abort`, so shutdown waits for it.
        WaitPolicy {
            spin_iters: 1 << 20,
            ..WaitPolicy::default()
        }
    }

    fn policy(spin: bool) -> WaitPolicy {
        if spin {
            spin_policy()
        } else {
            WaitPolicy::BLOCKING
        }
    }

    fn layout(size: usize) -> Layout {
        // Worker 0's ring carries parent → child, worker 1's ring child → parent.
        Layout::new(LayoutParams::new(
            vec![FieldSpec::new("payload", DType::U8, &[size])],
            2,
            1,
            1,
            8,
        ))
        .unwrap()
    }

    fn env(k: &str) -> String {
        std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"))
    }

    // ---------------------------------------------------------------- child side

    fn child(role: &str) {
        if role.starts_with("pipe") {
            return pipe_child(role);
        }
        let fd: i32 = env("PYCOLLECT_BENCH_FD").parse().unwrap();
        // SAFETY: the parent passed this inherited fd number and keeps it open.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let seg = Segment::attach(fd, AttachOptions::default()).unwrap();
        let pol = policy(std::env::var("PYCOLLECT_BENCH_SPIN").is_ok());
        let size = seg.layout().params().fields[0].shape[0];
        let mut rx = seg.consumer(0).unwrap();
        let mut tx = seg.producer(1).unwrap();
        let mut sink = vec![0u8; size];
        loop {
            let s = match rx.pop_wait(&pol, None, || seg.is_shutdown()).unwrap() {
                Waited::Ready(s) => s,
                _ => return,
            };
            if role == "sink" {
                // Copy the payload out, as a consumer building an owned batch would.
                let src = seg.field_ptr(0, s.index, 0);
                // SAFETY: the popped slot is ours until release; sink holds `size` bytes.
                unsafe { std::ptr::copy_nonoverlapping(src, sink.as_mut_ptr(), size) };
                std::hint::black_box(&sink);
                rx.release(s.seq).unwrap();
            } else {
                rx.release(s.seq).unwrap();
                let c = match tx.claim_wait(&pol, None, || seg.is_shutdown()) {
                    Waited::Ready(c) => c,
                    _ => return,
                };
                tx.commit(c).unwrap();
            }
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
        let mut buf = vec![0u8; size.max(8)];
        loop {
            if role == "pipe_echo" {
                if r.read_exact(&mut buf[..1]).is_err() {
                    return;
                }
                w.write_all(&buf[..1]).unwrap();
            } else {
                let mut n = [0u8; 8];
                if r.read_exact(&mut n).is_err() {
                    return;
                }
                for _ in 0..u64::from_le_bytes(n) {
                    r.read_exact(&mut buf[..size]).unwrap();
                }
                w.write_all(&[1]).unwrap();
            }
        }
    }

    // ---------------------------------------------------------------- parent side

    struct ShmPeer {
        seg: Segment,
        child: Child,
        tx: Producer,
        rx: Consumer,
        pol: WaitPolicy,
        src: Vec<u8>,
    }

    impl ShmPeer {
        fn spawn(role: &str, size: usize, spin: bool) -> Self {
            let seg = Segment::create(layout(size)).unwrap();
            let fd = rustix::io::dup(seg.fd()).unwrap(); // no close-on-exec: inherited
            let mut cmd = Command::new(std::env::current_exe().unwrap());
            cmd.env("PYCOLLECT_BENCH_CHILD", role)
                .env("PYCOLLECT_BENCH_FD", fd.as_raw_fd().to_string());
            if spin {
                cmd.env("PYCOLLECT_BENCH_SPIN", "1");
            }
            let child = cmd.spawn().unwrap();
            drop(fd);
            let (tx, rx) = (seg.producer(0).unwrap(), seg.consumer(1).unwrap());
            Self {
                seg,
                child,
                tx,
                rx,
                pol: policy(spin),
                src: vec![0xa5; size],
            }
        }

        fn round_trip(&mut self) {
            let Waited::Ready(c) = self.tx.claim_wait(&self.pol, None, || false) else {
                panic!()
            };
            self.tx.commit(c).unwrap();
            let Waited::Ready(s) = self.rx.pop_wait(&self.pol, None, || false).unwrap() else {
                panic!()
            };
            self.rx.release(s.seq).unwrap();
        }

        /// Sends `n` slots of the full payload size and waits until the peer released all.
        fn stream(&mut self, n: u64) {
            let size = self.src.len();
            for _ in 0..n {
                let Waited::Ready(c) = self.tx.claim_wait(&self.pol, None, || false) else {
                    panic!()
                };
                let dst = self.seg.field_ptr(0, c.index, 0);
                // SAFETY: the claimed slot's `size` bytes are ours until commit.
                unsafe { std::ptr::copy_nonoverlapping(self.src.as_ptr(), dst, size) };
                self.tx.commit(c).unwrap();
            }
            let ring = self.tx.mem().clone();
            let tx = &mut self.tx;
            let r = wait_until(
                ring.ctl().space_bell(),
                &self.pol,
                None,
                || tx.in_flight() == 0,
                || false,
            );
            assert_eq!(r, WaitOutcome::Ready);
        }
    }

    impl Drop for ShmPeer {
        fn drop(&mut self) {
            self.seg.shutdown();
            let _ = self.child.wait();
        }
    }

    struct PipePeer {
        child: Child,
        w: File,
        r: File,
        src: Vec<u8>,
    }

    impl PipePeer {
        fn spawn(role: &str, size: usize) -> Self {
            // Close-on-exec everywhere, then non-CLOEXEC dups of just the child's two ends:
            // a child that inherited the parent's write end would never see EOF.
            let cloexec = rustix::pipe::PipeFlags::CLOEXEC;
            let (to_child_r, to_child_w) = rustix::pipe::pipe_with(cloexec).unwrap();
            let (from_child_r, from_child_w) = rustix::pipe::pipe_with(cloexec).unwrap();
            let to_child_r = rustix::io::dup(&to_child_r).unwrap();
            let from_child_w = rustix::io::dup(&from_child_w).unwrap();
            let child = Command::new(std::env::current_exe().unwrap())
                .env("PYCOLLECT_BENCH_CHILD", role)
                .env("PYCOLLECT_BENCH_RFD", to_child_r.as_raw_fd().to_string())
                .env("PYCOLLECT_BENCH_WFD", from_child_w.as_raw_fd().to_string())
                .env("PYCOLLECT_BENCH_SIZE", size.to_string())
                .spawn()
                .unwrap();
            drop((to_child_r, from_child_w));
            let w = File::from(to_child_w);
            let r = File::from(from_child_r);
            Self {
                child,
                w,
                r,
                src: vec![0xa5; size],
            }
        }

        fn round_trip(&mut self) {
            self.w.write_all(&[1]).unwrap();
            let mut b = [0u8; 1];
            self.r.read_exact(&mut b).unwrap();
        }

        fn stream(&mut self, n: u64) {
            self.w.write_all(&n.to_le_bytes()).unwrap();
            for _ in 0..n {
                self.w.write_all(&self.src).unwrap();
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
        }
    }

    fn percentiles(mut f: impl FnMut(), n: usize) -> (f64, f64) {
        for _ in 0..n / 10 {
            f();
        }
        let mut v: Vec<f64> = (0..n)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        v.sort_by(|a, b| a.total_cmp(b));
        (v[n / 2], v[n * 99 / 100])
    }

    fn rate(mut f: impl FnMut(u64), n: u64, size: usize) -> f64 {
        f(n.div_ceil(10)); // warm up
        let t = Instant::now();
        f(n);
        (n as f64 * size as f64) / t.elapsed().as_secs_f64() / 1e9
    }

    pub fn main() {
        if let Ok(role) = std::env::var("PYCOLLECT_BENCH_CHILD") {
            return child(&role);
        }
        let quick = std::env::var("PYCOLLECT_BENCH_QUICK").is_ok_and(|v| v != "0")
            || std::env::args().any(|a| a == "--quick");
        let mut c = Criterion::default().configure_from_args();
        if quick {
            c = c
                .sample_size(10)
                .warm_up_time(Duration::from_millis(100))
                .measurement_time(Duration::from_millis(400));
        }

        {
            let mut g = c.benchmark_group("round_trip");
            for (name, spin) in [("shm_spin", true), ("shm_futex", false)] {
                let mut p = ShmPeer::spawn("echo", 8, spin);
                g.bench_function(name, |b| {
                    b.iter_custom(|iters| {
                        let t = Instant::now();
                        (0..iters).for_each(|_| p.round_trip());
                        t.elapsed()
                    })
                });
            }
            let mut p = PipePeer::spawn("pipe_echo", 1);
            g.bench_function("pipe", |b| {
                b.iter_custom(|iters| {
                    let t = Instant::now();
                    (0..iters).for_each(|_| p.round_trip());
                    t.elapsed()
                })
            });
            g.finish();
        }
        {
            let mut g = c.benchmark_group("throughput");
            for size in SIZES {
                g.throughput(Throughput::Bytes(size as u64));
                let mut p = ShmPeer::spawn("sink", size, false);
                g.bench_with_input(BenchmarkId::new("shm", size), &size, |b, _| {
                    b.iter_custom(|iters| {
                        let t = Instant::now();
                        p.stream(iters);
                        t.elapsed()
                    })
                });
                drop(p);
                let mut p = PipePeer::spawn("pipe_sink", size);
                g.bench_with_input(BenchmarkId::new("pipe", size), &size, |b, _| {
                    b.iter_custom(|iters| {
                        let t = Instant::now();
                        p.stream(iters);
                        t.elapsed()
                    })
                });
            }
            g.finish();
        }

        // ------------------------------------------------------------ summary
        let n = if quick { 2000 } else { 20_000 };
        println!(
            "\n== pycollect handoff summary (2 processes, {} samples) ==",
            n
        );
        let mut lat = Vec::new();
        for (name, spin) in [("shm spin", true), ("shm futex", false)] {
            let mut p = ShmPeer::spawn("echo", 8, spin);
            lat.push((name, percentiles(|| p.round_trip(), n)));
        }
        let mut p = PipePeer::spawn("pipe_echo", 1);
        lat.push(("pipe", percentiles(|| p.round_trip(), n)));
        drop(p);
        let pipe_p50 = lat[2].1 .0;
        println!("round trip        p50 µs    p99 µs   pipe p50 / this p50");
        for (name, (p50, p99)) in &lat {
            println!(
                "{name:<14} {p50:>9.2} {p99:>9.2}   {:>6.2}x",
                pipe_p50 / p50
            );
        }
        println!("throughput        shm GB/s  pipe GB/s  shm/pipe   (futex wake-ups, 8 slots)");
        let bytes = if quick { 64 << 20 } else { 512 << 20 };
        for size in SIZES {
            let count = (bytes / size as u64).max(200);
            let mut s = ShmPeer::spawn("sink", size, false);
            let shm = rate(|k| s.stream(k), count, size);
            drop(s);
            let mut p = PipePeer::spawn("pipe_sink", size);
            let pipe = rate(|k| p.stream(k), count, size);
            drop(p);
            println!(
                "{:>8} B      {shm:>9.3} {pipe:>10.3} {:>8.2}x",
                size,
                shm / pipe
            );
        }
    }
}

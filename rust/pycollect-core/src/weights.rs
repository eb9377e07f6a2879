//! Versioned weights store: one writer (the trainer), many readers (workers), K ≥ 3 buffers.
//!
//! Readers never see a half-written set of weights, and the writer never waits on a dead
//! reader, using hazard pins instead of a seqlock (a seqlock over plain bytes is a data race):
//!
//! ```text
//! reader r                                      writer
//! loop { l = latest.load(Acquire)               reserve: fence(SeqCst)
//!        pin[r].store(l, Relaxed)                        cur = latest (own value)
//!        fence(SeqCst)                                   pick b != buf(cur), b not in
//!        if latest.load(Acquire) == l: break }              {buf(pin[i].load(Acquire))}
//! copy buffer buf(l) out                        write bytes into b; len[b] = n
//! pin[r].store(NONE, Release)                   latest.store((ver+1) << 8 | b, Release)
//! ```
//!
//! The fences form a Dekker pair: either the writer's scan sees the pin, or the reader's
//! recheck sees a newer `latest` and retries. Versions are part of `latest`, so a buffer
//! reused for a newer version never passes the recheck (no ABA). A reader that dies while
//! pinned only blocks one buffer until its pin is cleared ([`WeightsMem::clear_pin`]), which
//! the supervisor does as soon as the dead reader's process has been reaped.

use crate::shared::{Owner, SharedRef, SharedSlice};
use crate::sync::{fence, AtomicU64, Ordering, Padded};
use crate::wait::{Waited, MAX_SLICE};
use std::fmt;
use std::time::{Duration, Instant};

/// Pin value meaning "not reading".
pub const NO_PIN: u64 = u64::MAX;
pub use crate::consts::MAX_BUFFERS;

/// Errors from the weights store; each names the offending value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeightsError {
    /// The weights do not fit in one buffer.
    TooLarge {
        /// Bytes offered.
        len: usize,
        /// Bytes per buffer.
        capacity: usize,
    },
    /// Every buffer other than the latest is pinned by a reader.
    AllPinned {
        /// Number of buffers.
        buffers: usize,
    },
    /// The destination is smaller than the published weights.
    DestinationTooSmall {
        /// Bytes published.
        len: usize,
        /// Bytes offered.
        dst: usize,
    },
    /// A reader index outside `0..readers`.
    NoSuchReader {
        /// The index passed in.
        reader: usize,
        /// Number of readers.
        readers: usize,
    },
    /// Fewer than 3 or more than [`MAX_BUFFERS`] buffers.
    BadBufferCount(usize),
}

impl fmt::Display for WeightsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge { len, capacity } => {
                write!(
                    f,
                    "weights of {len} bytes exceed the buffer capacity of {capacity} bytes"
                )
            }
            Self::AllPinned { buffers } => {
                write!(
                    f,
                    "all {buffers} weight buffers except the latest are pinned by readers"
                )
            }
            Self::DestinationTooSmall { len, dst } => {
                write!(
                    f,
                    "destination of {dst} bytes cannot hold published weights of {len} bytes"
                )
            }
            Self::NoSuchReader { reader, readers } => {
                write!(
                    f,
                    "weights reader {reader} does not exist (there are {readers})"
                )
            }
            Self::BadBufferCount(n) => {
                write!(
                    f,
                    "a weights store needs 3..={MAX_BUFFERS} buffers, got {n}"
                )
            }
        }
    }
}

impl std::error::Error for WeightsError {}

/// Storage for the weight bytes (shared memory in production, loom cells in tests).
pub trait WeightBuffers: Send + Sync {
    /// Number of buffers.
    fn count(&self) -> usize;
    /// Bytes per buffer.
    fn capacity(&self) -> usize;
    /// Copies `src` into the start of buffer `buf`.
    ///
    /// # Safety
    /// The caller must own buffer `buf` for writing (the protocol guarantees no reader).
    unsafe fn write(&self, buf: usize, src: &[u8]);
    /// Copies the start of buffer `buf` into `dst`.
    ///
    /// # Safety
    /// The caller must hold a validated pin on `buf` (the protocol guarantees no writer).
    unsafe fn read(&self, buf: usize, dst: &mut [u8]);
}

impl<B: WeightBuffers> WeightBuffers for std::sync::Arc<B> {
    fn count(&self) -> usize {
        (**self).count()
    }
    fn capacity(&self) -> usize {
        (**self).capacity()
    }
    unsafe fn write(&self, buf: usize, src: &[u8]) {
        // SAFETY: forwarded contract.
        unsafe { (**self).write(buf, src) }
    }
    unsafe fn read(&self, buf: usize, dst: &mut [u8]) {
        // SAFETY: forwarded contract.
        unsafe { (**self).read(buf, dst) }
    }
}

/// Weight buffers in the mapped segment: `count` buffers of `capacity` bytes, `stride` apart.
#[derive(Debug, Clone)]
pub struct ShmBuffers {
    base: *mut u8,
    stride: usize,
    count: usize,
    capacity: usize,
    _owner: OwnerDebug,
}

#[derive(Clone)]
struct OwnerDebug(#[allow(dead_code)] Owner);

impl fmt::Debug for OwnerDebug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Owner")
    }
}

// SAFETY: ShmBuffers is a raw pointer into a mapping kept alive by the owner Arc; all access
// goes through the unsafe read/write methods whose callers follow the pin protocol.
unsafe impl Send for ShmBuffers {}
// SAFETY: as for Send.
unsafe impl Sync for ShmBuffers {}

impl ShmBuffers {
    /// Wraps `count` buffers of `capacity` bytes starting at `base`, `stride` bytes apart.
    ///
    /// # Safety
    /// `base + count * stride` must lie inside memory kept mapped by `owner`, and
    /// `capacity <= stride`.
    pub unsafe fn from_raw(
        base: *mut u8,
        stride: usize,
        count: usize,
        capacity: usize,
        owner: Owner,
    ) -> Self {
        Self {
            base,
            stride,
            count,
            capacity,
            _owner: OwnerDebug(owner),
        }
    }

    /// Address of buffer `buf` (for zero-copy reads while pinned, or writes while reserved).
    pub fn buffer_ptr(&self, buf: usize) -> *mut u8 {
        assert!(
            buf < self.count,
            "weights buffer {buf} out of range ({} buffers)",
            self.count
        );
        // SAFETY: buf < count, so the offset stays inside the region from_raw vouched for.
        unsafe { self.base.add(buf * self.stride) }
    }
}

impl WeightBuffers for ShmBuffers {
    fn count(&self) -> usize {
        self.count
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    unsafe fn write(&self, buf: usize, src: &[u8]) {
        assert!(src.len() <= self.capacity);
        // SAFETY: the region is mapped and writable (from_raw), src fits (checked), the two
        // cannot overlap (src is process memory or another buffer the caller owns), and the
        // caller owns `buf` (no concurrent reader).
        unsafe { std::ptr::copy(src.as_ptr(), self.buffer_ptr(buf), src.len()) }
    }
    unsafe fn read(&self, buf: usize, dst: &mut [u8]) {
        assert!(dst.len() <= self.capacity);
        // SAFETY: as for write; the caller's validated pin excludes a concurrent writer.
        unsafe { std::ptr::copy(self.buffer_ptr(buf), dst.as_mut_ptr(), dst.len()) }
    }
}

/// The shared words of a weights store.
#[derive(Debug, Clone)]
pub struct WeightsMem<B> {
    /// `version << 8 | buffer`; 0 means nothing published yet.
    latest: SharedRef<Padded<AtomicU64>>,
    /// Bytes published in each buffer.
    lens: SharedSlice<AtomicU64>,
    /// One pin per reader.
    pins: SharedSlice<Padded<AtomicU64>>,
    bufs: B,
}

impl<B: WeightBuffers> WeightsMem<B> {
    /// Assembles a store; `lens.len()` must equal `bufs.count()`.
    pub fn new(
        latest: SharedRef<Padded<AtomicU64>>,
        lens: SharedSlice<AtomicU64>,
        pins: SharedSlice<Padded<AtomicU64>>,
        bufs: B,
    ) -> Result<Self, WeightsError> {
        let n = bufs.count();
        if !(3..=MAX_BUFFERS).contains(&n) || lens.len() != n {
            return Err(WeightsError::BadBufferCount(n));
        }
        Ok(Self {
            latest,
            lens,
            pins,
            bufs,
        })
    }

    /// A heap store with `readers` pins (tests); pins start as [`NO_PIN`].
    pub fn new_heap(bufs: B, readers: usize) -> Result<Self, WeightsError> {
        let n = bufs.count();
        let lens = (0..n).map(|_| AtomicU64::new(0)).collect();
        let pins = (0..readers)
            .map(|_| Padded(AtomicU64::new(NO_PIN)))
            .collect();
        Self::new(
            SharedRef::new_heap(Padded(AtomicU64::new(0))),
            SharedSlice::new_heap(lens),
            SharedSlice::new_heap(pins),
            bufs,
        )
    }

    /// The underlying buffers.
    pub fn buffers(&self) -> &B {
        &self.bufs
    }

    /// Latest published version (0: none).
    pub fn latest_version(&self) -> u64 {
        // SYNC POINT: Acquire pairs with the writer's Release publish.
        self.latest.load(Ordering::Acquire) >> 8
    }

    /// Drops reader `reader`'s pin, so the writer may reuse the buffer it held.
    ///
    /// Only for a reader that can no longer read: its process has ended and been reaped (the
    /// supervisor's `on_exit` hook), and no new one reads as `reader` yet. Clearing the pin of
    /// a live reader would let the writer overwrite the buffer under its copy. Safe to call
    /// from any thread while the writer publishes: the writer either still sees the pin and
    /// skips the buffer, or sees it cleared and may take it.
    pub fn clear_pin(&self, reader: usize) -> Result<(), WeightsError> {
        let readers = self.pins.len();
        if reader >= readers {
            return Err(WeightsError::NoSuchReader { reader, readers });
        }
        // SYNC POINT: Release, pairing with the writer's Acquire pin scan, though a dead
        // reader has nothing left to order (its reads ended with its process).
        self.pins.get(reader).store(NO_PIN, Ordering::Release);
        Ok(())
    }
}

/// A buffer reserved for writing by [`WeightsWriter::reserve`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a reservation is published with WeightsWriter::commit"]
pub struct Reservation {
    /// Buffer index (use `ShmBuffers::buffer_ptr` to write in place).
    pub buf: usize,
    /// Bytes that will be published.
    pub len: usize,
}

/// The single writer of a weights store (the trainer).
#[derive(Debug)]
pub struct WeightsWriter<B> {
    mem: WeightsMem<B>,
    /// Our last published `latest` value. The single writer never needs to reload it, which
    /// also keeps loom's exploration precise (a redundant load hides interleavings from it).
    cur: u64,
}

impl<B: WeightBuffers> WeightsWriter<B> {
    /// Wraps the store. There must be only one writer per store.
    pub fn new(mem: WeightsMem<B>) -> Self {
        // SYNC POINT: Acquire, to continue from a previous writer's last publish.
        let cur = mem.latest.load(Ordering::Acquire);
        Self { mem, cur }
    }

    /// The shared parts.
    pub fn mem(&self) -> &WeightsMem<B> {
        &self.mem
    }

    /// Picks a buffer that is neither the latest nor pinned by any reader.
    pub fn reserve(&mut self, len: usize) -> Result<Reservation, WeightsError> {
        let capacity = self.mem.bufs.capacity();
        if len > capacity {
            return Err(WeightsError::TooLarge { len, capacity });
        }
        // SYNC POINT: Dekker fence; orders our previous publish before the pin scan.
        fence(Ordering::SeqCst);
        let cur = self.cur;
        let n = self.mem.bufs.count();
        let cur_buf = if cur == 0 {
            usize::MAX
        } else {
            (cur & 0xff) as usize
        };
        // Prefer the buffer after the latest so consecutive versions rotate.
        let start = if cur == 0 { 0 } else { cur_buf + 1 };
        'candidates: for k in 0..n {
            let b = (start + k) % n;
            if b == cur_buf {
                continue;
            }
            for r in 0..self.mem.pins.len() {
                // SYNC POINT: Acquire pairs with the reader's Release unpin: its copy-out of
                // this buffer happens-before our overwrite.
                let pin = self.mem.pins.get(r).load(Ordering::Acquire);
                if pin != NO_PIN && (pin & 0xff) as usize == b {
                    continue 'candidates;
                }
            }
            return Ok(Reservation { buf: b, len });
        }
        Err(WeightsError::AllPinned { buffers: n })
    }

    /// Publishes a reserved buffer (its bytes must be written); returns the new version.
    pub fn commit(&mut self, res: Reservation) -> u64 {
        let version = (self.cur >> 8) + 1;
        self.mem
            .lens
            .get(res.buf)
            .store(res.len as u64, Ordering::Relaxed);
        self.cur = version << 8 | res.buf as u64;
        // SYNC POINT: Release publishes the buffer bytes and its length.
        self.mem.latest.store(self.cur, Ordering::Release);
        version
    }

    /// Copies `bytes` into a free buffer and publishes it; returns the new version.
    pub fn publish(&mut self, bytes: &[u8]) -> Result<u64, WeightsError> {
        let res = self.reserve(bytes.len())?;
        // SAFETY: `reserve` picked a buffer that is not the latest and not pinned, and the
        // Dekker pair guarantees no reader can validate a pin on it until we publish.
        unsafe { self.mem.bufs.write(res.buf, bytes) };
        Ok(self.commit(res))
    }

    /// Like [`reserve`](Self::reserve), but if every buffer is pinned, retries (yielding, then
    /// sleeping ≤ 1 ms) until `deadline` or `should_abort`; it never waits on a reader
    /// indefinitely. A store with more buffers than readers + 1 never waits.
    pub fn reserve_wait(
        &mut self,
        len: usize,
        deadline: Option<Instant>,
        mut should_abort: impl FnMut() -> bool,
    ) -> Result<Waited<Reservation>, WeightsError> {
        let mut round = 0u32;
        loop {
            match self.reserve(len) {
                Ok(res) => return Ok(Waited::Ready(res)),
                Err(WeightsError::AllPinned { .. }) => {}
                Err(e) => return Err(e),
            }
            if should_abort() {
                return Ok(Waited::Aborted);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(Waited::TimedOut);
            }
            round += 1;
            if round < 16 {
                crate::sync::yield_now();
            } else {
                std::thread::sleep(Duration::from_millis(1).min(MAX_SLICE));
            }
        }
    }

    /// [`publish`](Self::publish) after [`reserve_wait`](Self::reserve_wait).
    pub fn publish_wait(
        &mut self,
        bytes: &[u8],
        deadline: Option<Instant>,
        should_abort: impl FnMut() -> bool,
    ) -> Result<Waited<u64>, WeightsError> {
        Ok(
            match self.reserve_wait(bytes.len(), deadline, should_abort)? {
                Waited::Ready(res) => {
                    // SAFETY: `reserve` picked a buffer that is not the latest and not pinned, and
                    // the Dekker pair guarantees no reader can validate a pin on it until we publish.
                    unsafe { self.mem.bufs.write(res.buf, bytes) };
                    Waited::Ready(self.commit(res))
                }
                Waited::TimedOut => Waited::TimedOut,
                Waited::Aborted => Waited::Aborted,
            },
        )
    }

    /// Drops a dead reader's pin: [`WeightsMem::clear_pin`].
    pub fn clear_pin(&self, reader: usize) -> Result<(), WeightsError> {
        self.mem.clear_pin(reader)
    }
}

/// A validated pin on the latest buffer; unpin with [`WeightsReader::unpin`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a pin blocks the writer from reusing the buffer until unpinned"]
pub struct Pinned {
    /// Published version.
    pub version: u64,
    /// Buffer index (read it in place with `ShmBuffers::buffer_ptr`).
    pub buf: usize,
    /// Bytes published.
    pub len: usize,
}

/// One reader of a weights store (a worker).
#[derive(Debug)]
pub struct WeightsReader<B> {
    mem: WeightsMem<B>,
    reader: usize,
}

impl<B: WeightBuffers> WeightsReader<B> {
    /// Reader number `reader` (its pin word).
    pub fn new(mem: WeightsMem<B>, reader: usize) -> Result<Self, WeightsError> {
        let readers = mem.pins.len();
        if reader >= readers {
            return Err(WeightsError::NoSuchReader { reader, readers });
        }
        Ok(Self { mem, reader })
    }

    /// The shared parts.
    pub fn mem(&self) -> &WeightsMem<B> {
        &self.mem
    }

    /// Pins the latest buffer; `None` when nothing was published yet. Lock-free: it retries
    /// only when the writer published in between.
    pub fn pin_latest(&mut self) -> Option<Pinned> {
        let pin = self.mem.pins.get(self.reader);
        loop {
            // SYNC POINT: Acquire pairs with the writer's Release publish.
            let l = self.mem.latest.load(Ordering::Acquire);
            if l == 0 {
                return None;
            }
            pin.store(l, Ordering::Relaxed);
            // SYNC POINT: Dekker fence; orders the pin store before the recheck.
            fence(Ordering::SeqCst);
            // SYNC POINT: Acquire recheck; unchanged means the writer saw our pin.
            if self.mem.latest.load(Ordering::Acquire) == l {
                let buf = (l & 0xff) as usize;
                let len = self.mem.lens.get(buf).load(Ordering::Relaxed) as usize;
                return Some(Pinned {
                    version: l >> 8,
                    buf,
                    len,
                });
            }
        }
    }

    /// Releases the pin, letting the writer reuse the buffer.
    pub fn unpin(&mut self, pinned: Pinned) {
        let _ = pinned;
        // SYNC POINT: Release: our reads of the buffer happen-before the writer's reuse.
        self.mem
            .pins
            .get(self.reader)
            .store(NO_PIN, Ordering::Release);
    }

    /// Copies the latest weights into `dst`; returns `(version, len)` or `None` if nothing
    /// was published. `dst` must hold at least `len` bytes.
    pub fn read_latest(&mut self, dst: &mut [u8]) -> Result<Option<(u64, usize)>, WeightsError> {
        let Some(p) = self.pin_latest() else {
            return Ok(None);
        };
        if dst.len() < p.len {
            let err = WeightsError::DestinationTooSmall {
                len: p.len,
                dst: dst.len(),
            };
            self.unpin(p);
            return Err(err);
        }
        // SAFETY: we hold a validated pin on p.buf, so the writer will not pick it.
        unsafe { self.mem.bufs.read(p.buf, &mut dst[..p.len]) };
        let out = (p.version, p.len);
        self.unpin(p);
        Ok(Some(out))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::cell::UnsafeCell;

    #[derive(Debug)]
    struct HeapBufs(Vec<UnsafeCell<Vec<u8>>>, usize);
    // SAFETY: test-only; accesses follow the pin protocol, which the loom test checks.
    unsafe impl Sync for HeapBufs {}
    // SAFETY: as for Sync.
    unsafe impl Send for HeapBufs {}
    impl WeightBuffers for HeapBufs {
        fn count(&self) -> usize {
            self.0.len()
        }
        fn capacity(&self) -> usize {
            self.1
        }
        unsafe fn write(&self, buf: usize, src: &[u8]) {
            // SAFETY: the caller owns `buf` (trait contract).
            unsafe { (&mut *self.0[buf].get())[..src.len()].copy_from_slice(src) }
        }
        unsafe fn read(&self, buf: usize, dst: &mut [u8]) {
            // SAFETY: the caller holds a pin on `buf` (trait contract).
            unsafe { dst.copy_from_slice(&(&*self.0[buf].get())[..dst.len()]) }
        }
    }
    fn store(n: usize, readers: usize) -> WeightsMem<std::sync::Arc<HeapBufs>> {
        let bufs = HeapBufs((0..n).map(|_| UnsafeCell::new(vec![0; 8])).collect(), 8);
        let bufs = std::sync::Arc::new(bufs);
        WeightsMem::new_heap(bufs, readers).unwrap()
    }

    #[test]
    fn publish_and_read() {
        let mem = store(3, 2);
        let mut w = WeightsWriter::new(mem.clone());
        let mut r = WeightsReader::new(mem, 1).unwrap();
        let mut dst = [0u8; 8];
        assert_eq!(r.read_latest(&mut dst).unwrap(), None);
        assert_eq!(w.publish(b"abc").unwrap(), 1);
        assert_eq!(r.read_latest(&mut dst).unwrap(), Some((1, 3)));
        assert_eq!(&dst[..3], b"abc");
        assert_eq!(w.publish(b"defgh").unwrap(), 2);
        assert_eq!(r.read_latest(&mut dst).unwrap(), Some((2, 5)));
        assert_eq!(&dst[..5], b"defgh");
    }

    #[test]
    fn pinned_buffers_are_skipped_and_dead_pins_cleared() {
        let mem = store(3, 2);
        let mut w = WeightsWriter::new(mem.clone());
        let mut r0 = WeightsReader::new(mem.clone(), 0).unwrap();
        let mut r1 = WeightsReader::new(mem, 1).unwrap();
        w.publish(b"1").unwrap();
        let p0 = r0.pin_latest().unwrap(); // pins version 1
        w.publish(b"2").unwrap();
        let p1 = r1.pin_latest().unwrap(); // pins version 2 (latest)
                                           // Remaining buffer is free: version 3 goes there.
        w.publish(b"3").unwrap();
        // Now buffers of v1 (pinned), v3 (latest) and v2 (pinned): nothing free.
        assert_eq!(w.publish(b"4"), Err(WeightsError::AllPinned { buffers: 3 }));
        assert_ne!(p0.buf, p1.buf);
        let _ = p1;
        w.clear_pin(1).unwrap(); // reader 1 "died"
        assert_eq!(w.publish(b"4").unwrap(), 4);
        r0.unpin(p0);
        assert!(matches!(
            w.clear_pin(5),
            Err(WeightsError::NoSuchReader { .. })
        ));
    }

    #[test]
    fn errors_name_values() {
        let mem = store(3, 1);
        let mut w = WeightsWriter::new(mem);
        let e = w.publish(&[0; 9]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "weights of 9 bytes exceed the buffer capacity of 8 bytes"
        );
        let bufs = std::sync::Arc::new(HeapBufs(vec![UnsafeCell::new(vec![0; 1])], 1));
        assert_eq!(
            WeightsMem::new_heap(bufs, 1).unwrap_err(),
            WeightsError::BadBufferCount(1)
        );
    }
}

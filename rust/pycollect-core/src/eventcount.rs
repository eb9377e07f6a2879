//! Eventcount: a condition variable for lock-free state, on a futex word in shared memory.
//!
//! Protocol (Vyukov's eventcount with a separate sleeper counter):
//!
//! ```text
//! notifier                                  waiter
//! publish state (e.g. tail.store Release)   sleepers += 1
//! fence(SeqCst)                              fence(SeqCst)
//! if sleepers != 0 {                        key = seq.load(Acquire)
//!     seq += 1 (Release); futex_wake(seq)   if condition holds: sleepers -= 1, done
//! }                                         futex_wait(seq, key, slice); sleepers -= 1
//! ```
//!
//! The two SeqCst fences form a Dekker pair: either the notifier sees the sleeper, or the
//! waiter's condition check sees the published state. If the notifier bumps `seq` after the
//! waiter read its key, `futex_wait` returns at once (EAGAIN) or is woken. The fast path of
//! `notify` with nobody asleep is one fence and one load, no syscall.

use crate::futex::FutexWake;
use crate::sync::{fence, AtomicU32, Ordering};
use std::time::Duration;

/// An eventcount (lives in shared memory, 8 bytes under `cfg(not(loom))`).
#[repr(C)]
#[derive(Debug, Default)]
pub struct EventCount {
    /// The futex word; bumped by every notify that saw a sleeper.
    seq: AtomicU32,
    /// Number of waiters between `prepare_wait` and the end of their wait.
    sleepers: AtomicU32,
    #[cfg(loom)]
    model: crate::futex::FutexModel,
}

// SAFETY: `#[repr(C)]`, two AtomicU32 outside loom (the loom-only model field is absent).
#[cfg(not(loom))]
unsafe impl crate::shared::ShmSafe for EventCount {}

#[cfg(not(loom))]
const _: () = {
    use crate::consts::LINE;
    use crate::sync::Padded;
    use std::mem::size_of;
    // The doorbell and bells sit in the first bytes of their line.
    assert!(size_of::<EventCount>() == 8);
    assert!(size_of::<Padded<EventCount>>() == LINE);
};

/// Proof that `prepare_wait` ran; must be passed to `wait` or `cancel_wait`.
#[derive(Debug)]
#[must_use = "a WaitKey must be passed to wait() or cancel_wait(), or the sleeper count leaks"]
pub struct WaitKey(u32);

impl EventCount {
    /// A fresh eventcount (heap use; in shared memory all-zero bytes are a valid one).
    pub fn new() -> Self {
        Self::default()
    }

    /// Wakes all waiters if there are any. Call after publishing the state they wait for.
    #[inline]
    pub fn notify(&self) {
        // SYNC POINT: Dekker fence; orders the caller's publish before the sleepers load.
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Relaxed) != 0 {
            self.bump_and_wake();
        }
    }

    /// Wakes all waiters unconditionally (shutdown, tests).
    pub fn notify_all(&self) {
        // SYNC POINT: make earlier stores (e.g. the shutdown flag) visible before waking.
        fence(Ordering::SeqCst);
        self.bump_and_wake();
    }

    fn bump_and_wake(&self) {
        // SYNC POINT: Release so a waiter that reads the new seq as its key sees the publish.
        self.seq.fetch_add(1, Ordering::Release);
        #[cfg(not(loom))]
        crate::futex::wake_all(&self.seq);
        #[cfg(loom)]
        self.model.wake_all(&self.seq);
    }

    /// Announces a waiter; after this, recheck the condition, then `wait` or `cancel_wait`.
    #[inline]
    pub fn prepare_wait(&self) -> WaitKey {
        self.sleepers.fetch_add(1, Ordering::Relaxed);
        // SYNC POINT: Dekker fence; orders the sleeper increment before the condition check.
        fence(Ordering::SeqCst);
        // SYNC POINT: Acquire pairs with the Release bump in notify.
        WaitKey(self.seq.load(Ordering::Acquire))
    }

    /// Withdraws a waiter whose condition turned out to hold.
    #[inline]
    pub fn cancel_wait(&self, key: WaitKey) {
        let _ = key;
        self.sleepers.fetch_sub(1, Ordering::Relaxed);
    }

    /// Sleeps until notified, the word changed, `timeout` elapsed or a signal arrived.
    pub fn wait(&self, key: WaitKey, timeout: Duration) -> FutexWake {
        #[cfg(not(loom))]
        let woke = crate::futex::wait(&self.seq, key.0, timeout);
        #[cfg(loom)]
        let woke = self.model.wait(&self.seq, key.0, timeout);
        self.sleepers.fetch_sub(1, Ordering::Relaxed);
        woke
    }

    /// Number of announced waiters (diagnostics).
    pub fn sleepers(&self) -> u32 {
        self.sleepers.load(Ordering::Relaxed)
    }

    /// Forgets waiters that died while asleep (a killed process never decrements).
    ///
    /// Only call when no live process can be waiting (e.g. the per-worker space bell while that
    /// worker is dead). A stale count is harmless for correctness: it only costs a wake syscall.
    pub fn reset_sleepers(&self) {
        self.sleepers.store(0, Ordering::Relaxed);
    }
}

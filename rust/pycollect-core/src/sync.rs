//! The one place atomics come from.
//!
//! Normal builds use `std::sync::atomic`; `--cfg loom` builds swap in loom's model-checked
//! atomics so the lock-free protocols in `ring`, `eventcount` and `weights` can be explored
//! exhaustively. Code in this crate must never name `std::sync::atomic` directly.

#[cfg(not(loom))]
pub use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Gives up the CPU for a moment inside a wait loop.
///
/// Under loom this is `loom::thread::yield_now`, which tells the model checker the thread
/// cannot make progress until someone else runs (a plain spin would explode the state space).
#[inline]
pub fn yield_now() {
    #[cfg(not(loom))]
    rustix::thread::sched_yield();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// A busy-wait hint for one spin iteration.
#[inline]
pub fn spin_hint() {
    #[cfg(not(loom))]
    std::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// Pads and aligns `T` to its own 128-byte line.
///
/// 128 rather than 64 because adjacent-line prefetch on x86 pulls cache lines in pairs, so two
/// hot words 64 bytes apart still ping-pong between cores.
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

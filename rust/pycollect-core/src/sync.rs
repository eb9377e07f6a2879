//! The one place atomics come from.
//!
//! Normal builds use `std::sync::atomic`; `--cfg loom` builds swap in loom's model-checked
//! atomics so the lock-free protocols in `ring`, `eventcount` and `weights` can be explored
//! exhaustively. Code in this crate must never name `std::sync::atomic` directly.
//!
//! The atomics are thin `#[repr(transparent)]` wrappers rather than re-exports, so they are
//! types of their own: the workspace's `clippy.toml` forbids the `std::sync::atomic` types and
//! `fence` everywhere, and this module is the one place allowed to name them (a re-export
//! would carry the forbidden type into every user). `Ordering` is re-exported as is: loom uses
//! std's `Ordering` too, so it means the same thing in both builds.

// The one module allowed to name std's atomics: everything else goes through the wrappers.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

pub use std::sync::atomic::Ordering;

#[cfg(not(loom))]
use crate::consts::LINE;
#[cfg(not(loom))]
use crate::shared::ShmSafe;

#[cfg(not(loom))]
use std::sync::atomic as imp;

#[cfg(loom)]
use loom::sync::atomic as imp;

/// A memory fence (std's, or loom's under `--cfg loom`).
#[inline]
pub fn fence(order: Ordering) {
    imp::fence(order);
}

macro_rules! atomic_int {
    ($name:ident, $int:ty) => {
        #[doc = concat!("`", stringify!($name), "` from std, or from loom under `--cfg loom`.")]
        ///
        /// `#[repr(transparent)]`: same size, alignment and bit validity as the wrapped atomic,
        /// so all-zero bytes in shared memory are a valid value.
        #[repr(transparent)]
        #[derive(Debug, Default)]
        pub struct $name(imp::$name);

        impl $name {
            /// A new atomic holding `v`.
            #[cfg(not(loom))]
            #[inline]
            pub const fn new(v: $int) -> Self {
                Self(imp::$name::new(v))
            }

            /// A new atomic holding `v`.
            #[cfg(loom)]
            pub fn new(v: $int) -> Self {
                Self(imp::$name::new(v))
            }

            /// See the wrapped type's `load`.
            #[inline]
            pub fn load(&self, order: Ordering) -> $int {
                self.0.load(order)
            }

            /// See the wrapped type's `store`.
            #[inline]
            pub fn store(&self, v: $int, order: Ordering) {
                self.0.store(v, order)
            }

            /// See the wrapped type's `swap`.
            #[inline]
            pub fn swap(&self, v: $int, order: Ordering) -> $int {
                self.0.swap(v, order)
            }

            /// See the wrapped type's `fetch_add`.
            #[inline]
            pub fn fetch_add(&self, v: $int, order: Ordering) -> $int {
                self.0.fetch_add(v, order)
            }

            /// See the wrapped type's `fetch_sub`.
            #[inline]
            pub fn fetch_sub(&self, v: $int, order: Ordering) -> $int {
                self.0.fetch_sub(v, order)
            }

            /// See the wrapped type's `compare_exchange`.
            #[inline]
            pub fn compare_exchange(
                &self,
                current: $int,
                new: $int,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$int, $int> {
                self.0.compare_exchange(current, new, success, failure)
            }

            /// The std atomic itself, for system calls that take one (the futex).
            #[cfg(not(loom))]
            #[inline]
            pub fn as_std(&self) -> &imp::$name {
                &self.0
            }
        }
    };
}

atomic_int!(AtomicU32, u32);
atomic_int!(AtomicU64, u64);

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

// SAFETY: a transparent wrapper around std's AtomicU32 (4 bytes, no pointers, every bit
// pattern valid, zero is 0, mutated only atomically; lock-free, hence address-free).
#[cfg(not(loom))]
unsafe impl ShmSafe for AtomicU32 {}
// SAFETY: as for AtomicU32 (8 bytes; lib.rs refuses targets without lock-free 64-bit atomics).
#[cfg(not(loom))]
unsafe impl ShmSafe for AtomicU64 {}
// SAFETY: Padded is `#[repr(C, align(128))]` around one T; padding bytes are never read.
#[cfg(not(loom))]
unsafe impl<T: ShmSafe> ShmSafe for Padded<T> {}

#[cfg(not(loom))]
const _: () = {
    use std::mem::{align_of, size_of};
    // Weights lengths are `8 * n` bytes of AtomicU64; futex words are 4-byte AtomicU32.
    assert!(size_of::<AtomicU32>() == 4 && align_of::<AtomicU32>() == 4);
    assert!(size_of::<AtomicU64>() == 8 && align_of::<AtomicU64>() == 8);
    // One padded word per line: the doorbell, shutdown flag, heartbeat and weights pins.
    assert!(size_of::<Padded<AtomicU64>>() == LINE && align_of::<Padded<AtomicU64>>() == LINE);
};

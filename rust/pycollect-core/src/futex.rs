//! The futex syscall (or, under loom, a model of it).
//!
//! Shared futexes: the word lives in a `MAP_SHARED` mapping that other processes map at other
//! addresses, so `FUTEX_PRIVATE_FLAG` must never be set (the kernel then keys the wait queue by
//! the backing page, not by the virtual address). Every wait carries a timeout.

use crate::sync::AtomicU32;
use std::time::Duration;

/// Why a futex wait returned. All of them mean "recheck your condition".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FutexWake {
    /// Woken by a `wake` call (or spuriously).
    Woken,
    /// The word no longer held the expected value (EAGAIN).
    Changed,
    /// The timeout elapsed (ETIMEDOUT).
    TimedOut,
    /// A signal arrived (EINTR).
    Interrupted,
}

/// Blocks while `*word == expected`, for at most `timeout`.
#[cfg(not(loom))]
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) -> FutexWake {
    use rustix::thread::futex;
    let ts = rustix::time::Timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    match futex::wait(word.as_std(), futex::Flags::empty(), expected, Some(&ts)) {
        Ok(()) => FutexWake::Woken,
        Err(rustix::io::Errno::AGAIN) => FutexWake::Changed,
        Err(rustix::io::Errno::TIMEDOUT) => FutexWake::TimedOut,
        Err(rustix::io::Errno::INTR) => FutexWake::Interrupted,
        // Any other errno (EFAULT, EINVAL) would be a bug in the caller's address; returning
        // `Woken` makes the caller recheck instead of looping in the kernel.
        Err(_) => FutexWake::Woken,
    }
}

/// Wakes every waiter on `word`; returns how many were woken.
#[cfg(not(loom))]
pub fn wake_all(word: &AtomicU32) -> usize {
    use rustix::thread::futex;
    futex::wake(word.as_std(), futex::Flags::empty(), i32::MAX as u32).unwrap_or(0)
}

/// Loom model of a futex: a mutex-protected check plus a condition variable.
///
/// The value check happens under the mutex and `wake` takes the same mutex, which mirrors the
/// kernel's hash-bucket lock: a wake that follows the word change can never slip between the
/// waiter's check and its sleep. The model ignores timeouts, so a lost wake-up shows up as a
/// loom deadlock instead of a silent delay.
#[cfg(loom)]
#[derive(Debug, Default)]
pub struct FutexModel {
    lock: loom::sync::Mutex<()>,
    cond: loom::sync::Condvar,
}

#[cfg(loom)]
impl FutexModel {
    /// Model of `wait`.
    pub fn wait(&self, word: &AtomicU32, expected: u32, _timeout: Duration) -> FutexWake {
        let guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        // SYNC POINT: SeqCst load under the model's lock, like the kernel's compare in FUTEX_WAIT.
        if word.load(crate::sync::Ordering::SeqCst) != expected {
            return FutexWake::Changed;
        }
        let _guard = self.cond.wait(guard).unwrap_or_else(|e| e.into_inner());
        FutexWake::Woken
    }

    /// Model of `wake_all`.
    pub fn wake_all(&self, _word: &AtomicU32) -> usize {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.cond.notify_all();
        1
    }
}

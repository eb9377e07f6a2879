//! Blocking policy: spin briefly, yield a few times, then sleep on an eventcount in slices.
//!
//! Spinning is opt-in and bounded: on an oversubscribed machine (2 cores, a trainer and two
//! workers) a spinning waiter steals the core the producer needs, which measured as a 40x loss
//! (DESIGN §9). So the default spins only a few dozen iterations before yielding and sleeping.
//! Every sleep is at most one `slice` (≤ 50 ms), after which `should_abort` runs so callers can
//! recheck shutdown, peer liveness or pending Python signals.

use crate::eventcount::EventCount;
use crate::sync::{spin_hint, yield_now};
use std::time::{Duration, Instant};

/// Longest single sleep, so aborts (Ctrl-C, shutdown, a dead peer) are noticed promptly.
pub const MAX_SLICE: Duration = Duration::from_millis(50);

/// How long a step exchange's waiter yields before it sleeps ([`WaitPolicy::STEPPING`]).
pub const STEP_YIELD: Duration = Duration::from_millis(1);

/// How a waiter behaves before and while it sleeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Busy-poll iterations before yielding (0 on oversubscribed machines).
    pub spin_iters: u32,
    /// `sched_yield` rounds before sleeping on the futex (at least this many).
    pub yield_iters: u32,
    /// Keep yielding until this long has passed since the wait began, then sleep.
    ///
    /// A yield gives the core to any runnable thread on it and returns at once when there is
    /// none, so yielding costs a waiter's core nothing that another thread wanted; what it buys
    /// is a wake-up without the futex round trip (tens of microseconds on our machines), for a
    /// peer that answers within this time. Zero: only `yield_iters` yields.
    pub yield_for: Duration,
    /// Longest single futex sleep; clamped to [`MAX_SLICE`].
    pub slice: Duration,
}

impl Default for WaitPolicy {
    fn default() -> Self {
        Self {
            spin_iters: 64,
            yield_iters: 2,
            yield_for: Duration::ZERO,
            slice: MAX_SLICE,
        }
    }
}

impl WaitPolicy {
    /// Sleep at once: no spinning, no yielding (best when cores are oversubscribed).
    pub const BLOCKING: Self = Self {
        spin_iters: 0,
        yield_iters: 0,
        yield_for: Duration::ZERO,
        slice: MAX_SLICE,
    };

    /// For a step exchange (one request, one answer, per step of a vector env): spin briefly,
    /// then yield for up to [`STEP_YIELD`] before sleeping. A step's two sides take turns,
    /// each idle while the other works, so the waiter's core is free or its yield hands it
    /// over; sleeping at once made every step pay two futex wake-ups (about 60 µs a round
    /// trip with 2 workers on 2 CPUs, against 4 µs yielding: `benches/exchange.py`).
    pub const STEPPING: Self = Self {
        spin_iters: 64,
        yield_iters: 2,
        yield_for: STEP_YIELD,
        slice: MAX_SLICE,
    };

    /// Spin up to `iters` times before falling back to yield + sleep.
    pub fn spinning(iters: u32) -> Self {
        Self {
            spin_iters: iters,
            ..Self::default()
        }
    }
}

/// A step exchange's policy for the next wait, from how long the waiter's last one took.
///
/// Yielding pays when the peer answers within [`STEP_YIELD`] (a CartPole step: tens of
/// microseconds). When the peer's turn is long (an Atari step of several envs, a CNN over a
/// batch), the waiter yields for the whole window and then sleeps anyway, and meanwhile its core
/// looks busy, so the scheduler does not move the peer, or a third process, onto it. So after a
/// wait that outlasted the window the next one sleeps after the default short spin
/// ([`WaitPolicy::default`]), and after a short one it yields again ([`WaitPolicy::STEPPING`]).
pub fn step_wait_policy(last_wait: Duration) -> WaitPolicy {
    if last_wait > STEP_YIELD {
        WaitPolicy::default()
    } else {
        WaitPolicy::STEPPING
    }
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitOutcome {
    /// The condition holds.
    Ready,
    /// The deadline passed first.
    TimedOut,
    /// `should_abort` returned true.
    Aborted,
}

/// The result of a wait that yields a value when ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited<T> {
    /// The value that became available.
    Ready(T),
    /// The deadline passed first.
    TimedOut,
    /// `should_abort` returned true.
    Aborted,
}

/// Waits until `ready()` is true, the deadline passes (`None`: no overall deadline, still
/// sliced), or `should_abort()` returns true.
///
/// `ready` must read the state that whoever calls `ec.notify()` publishes before notifying;
/// that is what makes the eventcount's Dekker pair lose no wake-up.
pub fn wait_until(
    ec: &EventCount,
    policy: &WaitPolicy,
    deadline: Option<Instant>,
    mut ready: impl FnMut() -> bool,
    mut should_abort: impl FnMut() -> bool,
) -> WaitOutcome {
    if ready() {
        return WaitOutcome::Ready;
    }
    for _ in 0..policy.spin_iters {
        spin_hint();
        if ready() {
            return WaitOutcome::Ready;
        }
    }
    for _ in 0..policy.yield_iters {
        yield_now();
        if ready() {
            return WaitOutcome::Ready;
        }
    }
    if !policy.yield_for.is_zero() {
        let until = Instant::now() + policy.yield_for;
        let until = deadline.map_or(until, |d| d.min(until));
        while Instant::now() < until {
            yield_now();
            if ready() {
                return WaitOutcome::Ready;
            }
        }
    }
    let slice = policy.slice.min(MAX_SLICE).max(Duration::from_micros(1));
    loop {
        if should_abort() {
            return WaitOutcome::Aborted;
        }
        let timeout = match deadline {
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return if ready() {
                        WaitOutcome::Ready
                    } else {
                        WaitOutcome::TimedOut
                    };
                }
                slice.min(d - now)
            }
            None => slice,
        };
        let key = ec.prepare_wait();
        if ready() {
            ec.cancel_wait(key);
            return WaitOutcome::Ready;
        }
        // Whatever the futex reports (woken, changed, timed out, EINTR), recheck.
        let _ = ec.wait(key, timeout);
        if ready() {
            return WaitOutcome::Ready;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::{AtomicU32, Ordering};
    use std::sync::Arc;

    #[test]
    fn ready_immediately() {
        let ec = EventCount::new();
        let r = wait_until(&ec, &WaitPolicy::BLOCKING, None, || true, || false);
        assert_eq!(r, WaitOutcome::Ready);
    }

    #[test]
    fn times_out() {
        let ec = EventCount::new();
        let t0 = Instant::now();
        let d = t0 + Duration::from_millis(20);
        let r = wait_until(&ec, &WaitPolicy::default(), Some(d), || false, || false);
        assert_eq!(r, WaitOutcome::TimedOut);
        assert!(t0.elapsed() >= Duration::from_millis(20));
        assert_eq!(ec.sleepers(), 0);
    }

    #[test]
    fn yield_phase_ends_at_the_deadline() {
        // A deadline inside the yield phase ends the wait there: it times out without ever
        // sleeping on the futex.
        let ec = EventCount::new();
        let t0 = Instant::now();
        let d = t0 + Duration::from_millis(2);
        let policy = WaitPolicy {
            yield_for: Duration::from_secs(3600),
            ..WaitPolicy::STEPPING
        };
        let r = wait_until(&ec, &policy, Some(d), || false, || false);
        assert_eq!(r, WaitOutcome::TimedOut);
        assert!(Instant::now() >= d);
        assert_eq!(ec.sleepers(), 0);
    }

    #[test]
    fn yield_phase_sees_a_condition_set_without_a_notify() {
        // While it yields the waiter polls the condition, so it is found without a notify; the
        // futex phase would begin by asking `should_abort`, which says yes here.
        let ec = EventCount::new();
        let flag = Arc::new(AtomicU32::new(0));
        let flag2 = Arc::clone(&flag);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1));
            flag2.store(1, Ordering::Release); // SYNC POINT: the condition, deliberately not notified
        });
        let policy = WaitPolicy {
            yield_for: Duration::from_secs(3600),
            ..WaitPolicy::STEPPING
        };
        let r = wait_until(
            &ec,
            &policy,
            None,
            || flag.load(Ordering::Acquire) == 1, // SYNC POINT: pairs with the store above
            || true,
        );
        t.join().unwrap();
        assert_eq!(r, WaitOutcome::Ready);
    }

    #[test]
    fn aborts() {
        let ec = EventCount::new();
        let mut n = 0;
        let policy = WaitPolicy {
            slice: Duration::from_millis(1),
            ..WaitPolicy::BLOCKING
        };
        let r = wait_until(
            &ec,
            &policy,
            None,
            || false,
            || {
                n += 1;
                n > 3
            },
        );
        assert_eq!(r, WaitOutcome::Aborted);
    }

    #[test]
    fn woken_by_other_thread() {
        let ec = Arc::new(EventCount::new());
        let flag = Arc::new(AtomicU32::new(0));
        let (ec2, flag2) = (Arc::clone(&ec), Arc::clone(&flag));
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            flag2.store(1, Ordering::Release); // SYNC POINT: publishes the condition before notify
            ec2.notify();
        });
        // A long slice: if the notify were lost the test would take ~10 s, not ~5 ms.
        let policy = WaitPolicy {
            slice: MAX_SLICE,
            ..WaitPolicy::BLOCKING
        };
        let t0 = Instant::now();
        let d = Some(t0 + Duration::from_secs(10));
        let r = wait_until(
            &ec,
            &policy,
            d,
            || flag.load(Ordering::Acquire) == 1, // SYNC POINT: pairs with the store above
            || false,
        );
        t.join().unwrap();
        assert_eq!(r, WaitOutcome::Ready);
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_long_wait_makes_the_next_one_sleep_sooner() {
        assert_eq!(step_wait_policy(Duration::ZERO), WaitPolicy::STEPPING);
        assert_eq!(step_wait_policy(STEP_YIELD * 3), WaitPolicy::default());
        assert_eq!(step_wait_policy(STEP_YIELD / 10), WaitPolicy::STEPPING);
    }
}

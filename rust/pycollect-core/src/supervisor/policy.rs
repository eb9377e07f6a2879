//! Restart policy (OTP-like, one_for_one) and its bookkeeping.
//!
//! Pure logic: every decision takes the current time as an argument instead of reading a
//! clock, so the tests drive it with a virtual clock (`base + offsets`) and no sleeping.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::SupervisorError;

/// When a worker that ended is started again (OTP's per-child `restart` flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Restart {
    /// Always restart, even after a clean exit (code 0).
    Permanent,
    /// Restart only after an abnormal end: non-zero exit code, a signal, or a hang.
    Transient,
    /// Never restart. An abnormal end gives up at once; a clean exit just stops the worker.
    Never,
}

/// Restart policy of every worker of one supervisor (each worker keeps its own history).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestartPolicy {
    /// Which ends lead to a restart.
    pub restart: Restart,
    /// At most this many restarts within any `restart_window`; one more end gives up
    /// (OTP's intensity). `0` gives up at the first end that would restart.
    pub max_restarts: u32,
    /// The sliding window for `max_restarts` (OTP's period).
    pub restart_window: Duration,
    /// Delay before the first restart in a window.
    pub backoff_initial: Duration,
    /// Upper bound of the delay; it doubles with every restart still inside the window.
    pub backoff_max: Duration,
}

impl RestartPolicy {
    /// Checks the values; the error names the bad field and value.
    pub fn validate(&self) -> Result<(), SupervisorError> {
        if self.restart_window.is_zero() {
            return Err(SupervisorError::InvalidConfig {
                field: "restart_window",
                value: format!("{:?}", self.restart_window),
                reason: "must be longer than zero",
            });
        }
        if self.backoff_initial > self.backoff_max {
            return Err(SupervisorError::InvalidConfig {
                field: "backoff_initial",
                value: format!("{:?}", self.backoff_initial),
                reason: "must not exceed backoff_max",
            });
        }
        Ok(())
    }

    /// Delay before the restart that follows `recent` restarts inside the window:
    /// `backoff_initial * 2^recent`, capped at `backoff_max`.
    pub fn backoff(&self, recent: u32) -> Duration {
        // 2^31 times any non-zero delay already exceeds every sensible cap; saturate instead
        // of overflowing.
        let factor = 1u32.checked_shl(recent.min(31)).unwrap_or(u32::MAX);
        self.backoff_initial
            .saturating_mul(factor)
            .min(self.backoff_max)
    }
}

/// What to do with a worker that has just ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start the next generation after `after`.
    Restart {
        /// Backoff delay.
        after: Duration,
    },
    /// Leave it stopped: it ended cleanly and the policy does not restart clean ends.
    Stop,
    /// Too many restarts in the window, or an abnormal end under [`Restart::Never`].
    GiveUp,
}

/// One worker's restart history: the times of its restarts inside the current window.
#[derive(Clone, Debug, Default)]
pub struct RestartTracker {
    recent: VecDeque<Instant>,
}

impl RestartTracker {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decides what follows an end at `now`. `abnormal` is true for a non-zero exit code, a
    /// signal, a hang or a failed spawn. Records the restart when the answer is
    /// [`Decision::Restart`].
    pub fn decide(&mut self, policy: &RestartPolicy, abnormal: bool, now: Instant) -> Decision {
        let wants_restart = match policy.restart {
            Restart::Permanent => true,
            Restart::Transient => abnormal,
            Restart::Never => false,
        };
        if !wants_restart {
            return if abnormal {
                Decision::GiveUp
            } else {
                Decision::Stop
            };
        }
        self.forget_old(policy.restart_window, now);
        let recent = u32::try_from(self.recent.len()).unwrap_or(u32::MAX);
        if recent >= policy.max_restarts {
            return Decision::GiveUp;
        }
        self.recent.push_back(now);
        Decision::Restart {
            after: policy.backoff(recent),
        }
    }

    /// Number of restarts recorded within `window` before `now`.
    pub fn restarts_in_window(&mut self, window: Duration, now: Instant) -> usize {
        self.forget_old(window, now);
        self.recent.len()
    }

    fn forget_old(&mut self, window: Duration, now: Instant) {
        // `saturating_duration_since` keeps this total even if a caller passes times out of
        // order (a virtual clock in a test, say).
        while let Some(&oldest) = self.recent.front() {
            if now.saturating_duration_since(oldest) >= window {
                self.recent.pop_front();
            } else {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(restart: Restart) -> RestartPolicy {
        RestartPolicy {
            restart,
            max_restarts: 3,
            restart_window: Duration::from_secs(10),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_millis(350),
        }
    }

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn permanent_restarts_even_after_clean_exit() {
        let mut t = RestartTracker::new();
        let base = Instant::now();
        assert!(matches!(
            t.decide(&policy(Restart::Permanent), false, base),
            Decision::Restart { .. }
        ));
    }

    #[test]
    fn transient_restarts_only_abnormal_ends() {
        let p = policy(Restart::Transient);
        let mut t = RestartTracker::new();
        let base = Instant::now();
        assert_eq!(t.decide(&p, false, base), Decision::Stop);
        assert!(matches!(t.decide(&p, true, base), Decision::Restart { .. }));
    }

    #[test]
    fn never_gives_up_on_abnormal_and_stops_on_clean() {
        let p = policy(Restart::Never);
        let mut t = RestartTracker::new();
        let base = Instant::now();
        assert_eq!(t.decide(&p, true, base), Decision::GiveUp);
        assert_eq!(t.decide(&p, false, base), Decision::Stop);
    }

    #[test]
    fn intensity_limit_and_exponential_backoff() {
        let p = policy(Restart::Permanent);
        let mut t = RestartTracker::new();
        let base = Instant::now();
        let ms = |d: Decision| match d {
            Decision::Restart { after } => after.as_millis(),
            other => panic!("expected a restart, got {other:?}"),
        };
        assert_eq!(ms(t.decide(&p, true, at(base, 0))), 100);
        assert_eq!(ms(t.decide(&p, true, at(base, 1000))), 200);
        // 400 ms is capped at backoff_max.
        assert_eq!(ms(t.decide(&p, true, at(base, 2000))), 350);
        // Fourth end within 10 s: over the limit.
        assert_eq!(t.decide(&p, true, at(base, 3000)), Decision::GiveUp);
    }

    #[test]
    fn window_slides() {
        let p = policy(Restart::Permanent);
        let mut t = RestartTracker::new();
        let base = Instant::now();
        for ms in [0, 1000, 2000] {
            assert!(matches!(
                t.decide(&p, true, at(base, ms)),
                Decision::Restart { .. }
            ));
        }
        // At 10.0 s the restart at 0 s has left the window: one slot free again, and the
        // backoff reflects the two restarts still inside it.
        assert_eq!(
            t.decide(&p, true, at(base, 10_000)),
            Decision::Restart {
                after: Duration::from_millis(350)
            }
        );
        assert_eq!(t.decide(&p, true, at(base, 10_500)), Decision::GiveUp);
        // Long quiet period: history empties, backoff restarts from the initial value.
        assert_eq!(t.restarts_in_window(p.restart_window, at(base, 30_000)), 0);
        assert_eq!(
            t.decide(&p, true, at(base, 30_000)),
            Decision::Restart {
                after: Duration::from_millis(100)
            }
        );
    }

    #[test]
    fn zero_max_restarts_gives_up_at_once() {
        let p = RestartPolicy {
            max_restarts: 0,
            ..policy(Restart::Permanent)
        };
        assert_eq!(
            RestartTracker::new().decide(&p, true, Instant::now()),
            Decision::GiveUp
        );
    }

    #[test]
    fn backoff_saturates() {
        let p = RestartPolicy {
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::MAX,
            ..policy(Restart::Permanent)
        };
        assert_eq!(p.backoff(0), Duration::from_secs(1));
        assert_eq!(p.backoff(3), Duration::from_secs(8));
        assert!(p.backoff(u32::MAX) >= Duration::from_secs(1 << 31));
    }

    #[test]
    fn validate_names_bad_field() {
        let p = RestartPolicy {
            restart_window: Duration::ZERO,
            ..policy(Restart::Permanent)
        };
        let msg = p.validate().unwrap_err().to_string();
        assert!(msg.contains("restart_window"), "{msg}");
        let p = RestartPolicy {
            backoff_initial: Duration::from_secs(10),
            backoff_max: Duration::from_secs(1),
            ..policy(Restart::Permanent)
        };
        let msg = p.validate().unwrap_err().to_string();
        assert!(
            msg.contains("backoff_initial") && msg.contains("10s"),
            "{msg}"
        );
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Whatever the sequence of ends, no window ever holds more than `max_restarts`
            /// restarts, and every backoff stays within [initial, max].
            #[test]
            fn never_exceeds_intensity(
                max_restarts in 0u32..6,
                window_ms in 1u64..5_000,
                gaps in proptest::collection::vec((0u64..3_000, any::<bool>()), 1..60),
            ) {
                let p = RestartPolicy {
                    restart: Restart::Transient,
                    max_restarts,
                    restart_window: Duration::from_millis(window_ms),
                    backoff_initial: Duration::from_millis(10),
                    backoff_max: Duration::from_millis(1_000),
                };
                let base = Instant::now();
                let mut t = RestartTracker::new();
                let mut now_ms = 0u64;
                let mut restarts: Vec<u64> = Vec::new();
                for (gap, abnormal) in gaps {
                    now_ms += gap;
                    let d = t.decide(&p, abnormal, at(base, now_ms));
                    if let Decision::Restart { after } = d {
                        prop_assert!(abnormal);
                        prop_assert!(after >= p.backoff_initial && after <= p.backoff_max);
                        restarts.push(now_ms);
                    }
                    if !abnormal {
                        prop_assert_eq!(d, Decision::Stop);
                    }
                    let in_window = restarts
                        .iter()
                        .filter(|&&r| now_ms - r < window_ms)
                        .count();
                    prop_assert!(in_window <= max_restarts as usize);
                }
            }
        }
    }
}

//! Live counters of a collection: what each worker and the trainer did, for anyone to read.
//!
//! Each party adds to its own counters as it works (a worker's have one writer, itself, so
//! its adds are plain loads and stores) and never resets them, not even when a
//! worker restarts (the new generation continues its predecessor's totals). Readers (the
//! trainer's `stats()`, `pycollect top` from another process, a Prometheus scrape) take two
//! readings and turn their differences into rates, time splits and percentiles. The counters
//! publish no other data, so every access is Relaxed: a reader may see a step's time before
//! its frames, which a later reading puts right.
//!
//! A worker's block sits in the first 4 KiB of its control block (after the state, heartbeat
//! and error-length lines); the trainer's in the global control region.

use crate::sync::{fence, AtomicU64, Ordering, Padded};

/// Step latencies below this (1.024 µs) share the first bucket.
const FIRST_OCTAVE: u32 = 10;
/// Octaves of 2^FIRST_OCTAVE ns and up that have buckets (up to about 69 s).
const OCTAVES: usize = 26;
/// Buckets per octave: each spans 1/8 of its octave, so a percentile read as a bucket's
/// middle is within 6 % of the true value.
const SUB_BUCKETS: usize = 8;
/// Buckets of the step-latency histogram: one below 1 µs, then `OCTAVES × SUB_BUCKETS`; the
/// last also holds everything longer.
pub const LATENCY_BUCKETS: usize = 1 + OCTAVES * SUB_BUCKETS;

/// The histogram bucket of a step that took `ns` nanoseconds.
pub fn latency_bucket(ns: u64) -> usize {
    if ns < 1 << FIRST_OCTAVE {
        return 0;
    }
    let octave = 63 - ns.leading_zeros(); // ≥ FIRST_OCTAVE
    let sub = ((ns >> (octave - 3)) & (SUB_BUCKETS as u64 - 1)) as usize;
    let index = 1 + (octave - FIRST_OCTAVE) as usize * SUB_BUCKETS + sub;
    index.min(LATENCY_BUCKETS - 1)
}

/// The nanoseconds bucket `index` covers: `[low, high)`.
pub fn bucket_bounds(index: usize) -> (u64, u64) {
    if index == 0 {
        return (0, 1 << FIRST_OCTAVE);
    }
    let octave = FIRST_OCTAVE as usize + (index - 1) / SUB_BUCKETS;
    let sub = ((index - 1) % SUB_BUCKETS) as u64;
    let step = 1u64 << (octave - 3);
    let low = (1u64 << octave) + sub * step;
    (low, low + step)
}

/// A worker's totals, in the order [`WorkerMetrics::read`] returns them.
pub const WORKER_TOTALS: [&str; 10] = [
    "steps",
    "frames",
    "rollouts",
    "env_ns",
    "policy_ns",
    "wait_ns",
    "policy_version",
    "weight_updates",
    "restarts_replayed",
    "restarts_cut",
];

/// What a worker counts (all totals since the collection started, but `policy_version`, the
/// version of the weights it last applied).
#[repr(C)]
#[derive(Debug, Default)]
struct WorkerTotals {
    words: [AtomicU64; WORKER_TOTALS.len()],
}

const STEPS: usize = 0;
const FRAMES: usize = 1;
const ROLLOUTS: usize = 2;
const ENV_NS: usize = 3;
const POLICY_NS: usize = 4;
const WAIT_NS: usize = 5;
const POLICY_VERSION: usize = 6;
const WEIGHT_UPDATES: usize = 7;
const RESTARTS_REPLAYED: usize = 8;
const RESTARTS_CUT: usize = 9;

/// The worker's own clock of the step it is in; only the worker reads it.
#[repr(C)]
#[derive(Debug, Default)]
struct StepClock {
    /// When the open step began (0: none open).
    began_ns: AtomicU64,
    /// When the open step's policy call ended (0: none yet).
    policy_done_ns: AtomicU64,
    /// When the last step ended (0: none yet): the wait runs from there to the next step.
    ended_ns: AtomicU64,
    /// Frames one step makes (the worker's env count).
    frames_per_step: AtomicU64,
}

/// The weights a worker applied last: their version and digest, always read as a pair.
///
/// A sequence lock: the worker makes `seq` odd, writes both words, makes it even again; a
/// reader that sees the same even `seq` before and after its reads has a consistent pair.
#[repr(C)]
#[derive(Debug, Default)]
struct AppliedWeights {
    seq: AtomicU64,
    version: AtomicU64,
    digest: AtomicU64,
}

/// The shared words of a worker's metrics (inside its control block).
#[repr(C)]
#[derive(Debug)]
pub struct WorkerMetricsMem {
    totals: Padded<WorkerTotals>,
    clock: Padded<StepClock>,
    applied: Padded<AppliedWeights>,
    latency: [AtomicU64; LATENCY_BUCKETS],
}

impl Default for WorkerMetricsMem {
    fn default() -> Self {
        Self {
            totals: Padded::default(),
            clock: Padded::default(),
            applied: Padded::default(),
            latency: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

// SAFETY: `#[repr(C)]` of Padded lines and an array, all of AtomicU64 words; zero is valid.
#[cfg(not(loom))]
unsafe impl crate::shared::ShmSafe for WorkerMetricsMem {}

/// One reading of a worker's metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerReading {
    /// [`WORKER_TOTALS`], in that order.
    pub totals: [u64; WORKER_TOTALS.len()],
    /// Steps per latency bucket ([`bucket_bounds`]).
    pub latency: Vec<u64>,
}

/// Adds to a counter only its worker writes: a plain load and store (no locked
/// read-modify-write, which would cost the step loop several times more).
fn bump(word: &AtomicU64, value: u64) {
    word.store(
        word.load(Ordering::Relaxed).wrapping_add(value),
        Ordering::Relaxed,
    );
}

impl WorkerMetricsMem {
    fn add(&self, word: usize, value: u64) {
        bump(&self.totals.words[word], value);
    }

    /// Worker, once before stepping: how many frames one step makes.
    pub fn set_frames_per_step(&self, frames: u64) {
        self.clock.frames_per_step.store(frames, Ordering::Relaxed);
    }

    /// Worker: a step begins at `now_ns`; the time since the last step ended was waiting.
    /// A step still open (a rollout loop that calls this before every step) ends first.
    pub fn begin_step(&self, now_ns: u64) {
        self.end_step(now_ns);
        let ended = self.clock.ended_ns.load(Ordering::Relaxed);
        if ended != 0 {
            self.add(WAIT_NS, now_ns.saturating_sub(ended));
        }
        self.clock.began_ns.store(now_ns, Ordering::Relaxed);
        self.clock.policy_done_ns.store(0, Ordering::Relaxed);
    }

    /// Worker: the open step's policy call ended at `now_ns`; the rest of the step is the envs'.
    pub fn policy_done(&self, now_ns: u64) {
        let began = self.clock.began_ns.load(Ordering::Relaxed);
        if began != 0 {
            self.add(POLICY_NS, now_ns.saturating_sub(began));
            self.clock.policy_done_ns.store(now_ns, Ordering::Relaxed);
        }
    }

    /// Worker: the open step (if any) ended at `now_ns`: count it, its frames and its latency.
    pub fn end_step(&self, now_ns: u64) {
        let began = self.clock.began_ns.swap(0, Ordering::Relaxed);
        if began == 0 {
            return;
        }
        let policy_done = self.clock.policy_done_ns.load(Ordering::Relaxed);
        let latency = now_ns.saturating_sub(began);
        self.add(ENV_NS, now_ns.saturating_sub(policy_done.max(began)));
        self.add(STEPS, 1);
        self.add(FRAMES, self.clock.frames_per_step.load(Ordering::Relaxed));
        bump(&self.latency[latency_bucket(latency)], 1);
        self.clock.ended_ns.store(now_ns, Ordering::Relaxed);
    }

    /// Worker: a rollout was handed over.
    pub fn rollout_done(&self) {
        self.add(ROLLOUTS, 1);
    }

    /// Worker: it applied the weights of `version`, whose bytes hash to `digest`.
    pub fn weights_applied(&self, version: u64, digest: u64) {
        self.totals.words[POLICY_VERSION].store(version, Ordering::Relaxed);
        self.add(WEIGHT_UPDATES, 1);
        let applied = &self.applied;
        let seq = applied.seq.load(Ordering::Relaxed); // the worker is the only writer
        applied.seq.store(seq | 1, Ordering::Relaxed);
        // SYNC POINT: Release fence: a reader that sees a word written below also sees the
        // odd `seq` above, and retries.
        fence(Ordering::Release);
        applied.version.store(version, Ordering::Relaxed);
        applied.digest.store(digest, Ordering::Relaxed);
        // SYNC POINT: Release publishes the pair with the even `seq`.
        applied.seq.store((seq | 1) + 1, Ordering::Release);
    }

    /// Anyone: the version and digest of the weights the worker applied last, as a consistent
    /// pair; `None` before its first update (or while it keeps writing, after a few tries).
    pub fn applied_weights(&self) -> Option<(u64, u64)> {
        let applied = &self.applied;
        for _ in 0..64 {
            // SYNC POINT: Acquire pairs with the worker's Release store of an even `seq`.
            let before = applied.seq.load(Ordering::Acquire);
            let pair = (
                applied.version.load(Ordering::Relaxed),
                applied.digest.load(Ordering::Relaxed),
            );
            // SYNC POINT: Acquire fence: the loads above happen before the `seq` check below.
            fence(Ordering::Acquire);
            let after = applied.seq.load(Ordering::Relaxed);
            if before == after && before % 2 == 0 {
                return (before != 0).then_some(pair);
            }
            crate::sync::spin_hint();
        }
        None
    }

    /// Worker, when a restarted generation starts: whether it restored its predecessor's
    /// state (`recovery="replay"`) or starts afresh, its predecessor's trajectories cut.
    pub fn restarted(&self, replayed: bool) {
        self.add(
            if replayed {
                RESTARTS_REPLAYED
            } else {
                RESTARTS_CUT
            },
            1,
        );
    }

    /// Worker, when a new generation starts: forget the clock of the step its predecessor
    /// was in (the time between them is neither a step nor a wait). Totals carry on.
    pub fn restart_clock(&self) {
        self.clock.began_ns.store(0, Ordering::Relaxed);
        self.clock.policy_done_ns.store(0, Ordering::Relaxed);
        self.clock.ended_ns.store(0, Ordering::Relaxed);
    }

    /// Anyone: the totals and the latency histogram now.
    pub fn read(&self) -> WorkerReading {
        WorkerReading {
            totals: std::array::from_fn(|i| self.totals.words[i].load(Ordering::Relaxed)),
            latency: self
                .latency
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
        }
    }
}

/// The trainer's totals, in the order [`TrainerMetricsMem::read`] returns them; but
/// `policy_version` (the last published), `lag_min` and `lag_max` (the last batch's).
pub const TRAINER_TOTALS: [&str; 13] = [
    "batches",
    "frames",
    "wait_ns",
    "publishes",
    "publish_ns",
    "publish_bytes",
    "policy_version",
    "lag_frames",
    "lag_sum",
    "lag_min",
    "lag_max",
    "lag_dropped",
    "policy_ns",
];

const T_BATCHES: usize = 0;
const T_FRAMES: usize = 1;
const T_WAIT_NS: usize = 2;
const T_PUBLISHES: usize = 3;
const T_PUBLISH_NS: usize = 4;
const T_PUBLISH_BYTES: usize = 5;
const T_POLICY_VERSION: usize = 6;
const T_LAG_FRAMES: usize = 7;
const T_LAG_SUM: usize = 8;
const T_LAG_MIN: usize = 9;
const T_LAG_MAX: usize = 10;
const T_LAG_DROPPED: usize = 11;
const T_POLICY_NS: usize = 12;

/// Bytes of the collection's description (what `pycollect top` shows as its title).
pub const DESCRIPTION_CAP: usize = 248;

/// The shared words of the trainer's metrics (in the global control region).
#[repr(C)]
#[derive(Debug)]
pub struct TrainerMetricsMem {
    totals: Padded<[AtomicU64; TRAINER_TOTALS.len()]>,
    /// Bytes of valid description (Release after the bytes; Acquire before reading them).
    description_len: AtomicU64,
    description: [AtomicU64; DESCRIPTION_CAP / 8],
}

impl Default for TrainerMetricsMem {
    fn default() -> Self {
        Self {
            totals: Padded(std::array::from_fn(|_| AtomicU64::new(0))),
            description_len: AtomicU64::new(0),
            description: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

// SAFETY: `#[repr(C)]` of AtomicU64 words only; zero is valid (an empty description).
#[cfg(not(loom))]
unsafe impl crate::shared::ShmSafe for TrainerMetricsMem {}

#[cfg(not(loom))]
const _: () = assert!(
    std::mem::size_of::<TrainerMetricsMem>()
        <= crate::consts::GLOBAL_CTL_SIZE - crate::consts::TRAINER_METRICS_OFFSET
);

/// One batch as the trainer counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchCount {
    /// Frames delivered.
    pub frames: u64,
    /// Nanoseconds the trainer waited for the batch's data.
    pub wait_ns: u64,
    /// Sum over the frames of how many versions behind the latest each frame's policy was.
    pub lag_sum: u64,
    /// The smallest lag of a frame of the batch.
    pub lag_min: u64,
    /// The largest lag of a frame of the batch.
    pub lag_max: u64,
    /// Frames dropped for a lag over `max_policy_lag`.
    pub dropped: u64,
}

impl TrainerMetricsMem {
    fn add(&self, word: usize, value: u64) {
        self.totals[word].fetch_add(value, Ordering::Relaxed);
    }

    /// Trainer: a batch was delivered.
    ///
    /// A batch of no frames counts only its wait and its dropped frames (a stale rollout).
    pub fn batch_done(&self, batch: BatchCount) {
        if batch.frames > 0 {
            self.add(T_BATCHES, 1);
        }
        self.add(T_FRAMES, batch.frames);
        self.add(T_WAIT_NS, batch.wait_ns);
        self.add(T_LAG_FRAMES, batch.frames);
        self.add(T_LAG_SUM, batch.lag_sum);
        // The last batch's, not totals.
        self.totals[T_LAG_MIN].store(batch.lag_min, Ordering::Relaxed);
        self.totals[T_LAG_MAX].store(batch.lag_max, Ordering::Relaxed);
        self.add(T_LAG_DROPPED, batch.dropped);
    }

    /// Trainer of a vector env, whose batches are steps: `steps` steps of `frames` frames in all.
    pub fn steps_done(&self, steps: u64, frames: u64) {
        self.add(T_BATCHES, steps);
        self.add(T_FRAMES, frames);
        self.add(T_LAG_FRAMES, frames);
    }

    /// Trainer: weights of `version` (`bytes` long) were published in `ns` nanoseconds.
    pub fn published(&self, version: u64, bytes: u64, ns: u64) {
        self.add(T_PUBLISHES, 1);
        self.add(T_PUBLISH_NS, ns);
        self.add(T_PUBLISH_BYTES, bytes);
        self.totals[T_POLICY_VERSION].store(version, Ordering::Relaxed);
    }

    /// Trainer: a policy call in the trainer (the central engine's) took `ns` nanoseconds.
    pub fn policy_ran(&self, ns: u64) {
        self.add(T_POLICY_NS, ns);
    }

    /// Trainer, once: the collection's description, cut at a character boundary to
    /// [`DESCRIPTION_CAP`] bytes.
    pub fn set_description(&self, text: &str) {
        let mut n = text.len().min(DESCRIPTION_CAP);
        while !text.is_char_boundary(n) {
            n -= 1;
        }
        let mut bytes = [0u8; DESCRIPTION_CAP];
        bytes[..n].copy_from_slice(&text.as_bytes()[..n]);
        self.description_len.store(0, Ordering::Relaxed);
        for (word, chunk) in self.description.iter().zip(bytes.chunks_exact(8)) {
            word.store(
                u64::from_le_bytes(chunk.try_into().expect("8 bytes")),
                Ordering::Relaxed,
            );
        }
        // SYNC POINT: Release publishes the description's words with their length.
        self.description_len.store(n as u64, Ordering::Release);
    }

    /// Anyone: the description (lossy for bytes torn by a concurrent writer).
    pub fn description(&self) -> String {
        // SYNC POINT: Acquire pairs with set_description's Release.
        let n = (self.description_len.load(Ordering::Acquire) as usize).min(DESCRIPTION_CAP);
        let bytes: Vec<u8> = self
            .description
            .iter()
            .flat_map(|word| word.load(Ordering::Relaxed).to_le_bytes())
            .take(n)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Anyone: the totals now ([`TRAINER_TOTALS`], in that order).
    pub fn read(&self) -> [u64; TRAINER_TOTALS.len()] {
        std::array::from_fn(|i| self.totals[i].load(Ordering::Relaxed))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_latency_in_order() {
        let mut last = 0;
        let mut latencies: Vec<u64> = (0..40).map(|shift| 1u64 << shift).collect();
        latencies.extend([1500, 999_999, u64::MAX]);
        latencies.sort_unstable();
        for ns in latencies {
            let b = latency_bucket(ns);
            assert!(b >= last, "bucket of {ns} went back");
            last = b;
            let (low, high) = bucket_bounds(b);
            if b < LATENCY_BUCKETS - 1 {
                assert!(
                    low <= ns && ns < high,
                    "{ns} not in bucket {b}: [{low}, {high})"
                );
            }
        }
        for b in 1..LATENCY_BUCKETS {
            let (low, high) = bucket_bounds(b);
            assert_eq!(latency_bucket(low), b);
            assert_eq!(latency_bucket(high - 1), b);
            assert!(
                (high - low) * 8 <= low,
                "bucket {b} wider than 1/8 of its start"
            );
        }
    }

    #[test]
    fn a_step_splits_into_policy_env_and_wait() {
        const US: u64 = 1_000;
        let m = WorkerMetricsMem::default();
        m.set_frames_per_step(8);
        m.begin_step(1_000 * US);
        m.policy_done(1_300 * US);
        m.begin_step(2_000 * US); // ends the first step: 300 policy, 700 env
        m.end_step(2_500 * US); // no policy call: all env
        m.begin_step(4_000 * US); // 1500 of waiting
        m.end_step(4_100 * US);
        let r = m.read();
        assert_eq!(r.totals[STEPS], 3);
        assert_eq!(r.totals[FRAMES], 24);
        assert_eq!(r.totals[POLICY_NS], 300 * US);
        assert_eq!(r.totals[ENV_NS], (700 + 500 + 100) * US);
        assert_eq!(r.totals[WAIT_NS], 1_500 * US);
        assert_eq!(r.latency.iter().sum::<u64>(), 3);
        for latency in [1_000 * US, 500 * US, 100 * US] {
            assert_eq!(r.latency[latency_bucket(latency)], 1, "{latency} ns");
        }
        m.end_step(5_000 * US); // nothing open: nothing counted
        assert_eq!(m.read().totals[STEPS], 3);
    }

    #[test]
    fn a_restart_keeps_totals_and_drops_the_open_step() {
        let m = WorkerMetricsMem::default();
        m.set_frames_per_step(1);
        m.begin_step(10);
        m.end_step(20);
        m.begin_step(30); // 10 of waiting; then the worker dies in this step
        m.restart_clock();
        m.begin_step(1_000_000); // no wait counted across the restart
        m.end_step(1_000_010);
        let r = m.read();
        assert_eq!((r.totals[STEPS], r.totals[WAIT_NS]), (2, 10));
    }

    #[test]
    fn applied_weights_are_read_as_a_pair() {
        let m = WorkerMetricsMem::default();
        assert_eq!(m.applied_weights(), None);
        m.weights_applied(3, 0xfeed);
        m.weights_applied(4, 0xbeef);
        assert_eq!(m.applied_weights(), Some((4, 0xbeef)));
        assert_eq!(m.read().totals[WEIGHT_UPDATES], 2);
    }

    #[test]
    fn trainer_counts_batches_publishes_and_its_description() {
        let m = TrainerMetricsMem::default();
        m.batch_done(BatchCount {
            frames: 100,
            wait_ns: 5,
            lag_sum: 50,
            lag_min: 0,
            lag_max: 2,
            dropped: 0,
        });
        m.batch_done(BatchCount {
            frames: 100,
            wait_ns: 7,
            lag_sum: 0,
            lag_min: 1,
            lag_max: 1,
            dropped: 3,
        });
        m.published(4, 1024, 99);
        let r = m.read();
        assert_eq!(r[T_BATCHES..=T_WAIT_NS], [2, 200, 12]);
        assert_eq!((r[T_LAG_SUM], r[T_LAG_DROPPED]), (50, 3));
        assert_eq!((r[T_LAG_MIN], r[T_LAG_MAX]), (1, 1)); // the last batch's
        assert_eq!(r[T_POLICY_VERSION], 4);
        m.set_description("Collector(CartPole-v1) ✓");
        assert_eq!(m.description(), "Collector(CartPole-v1) ✓");
        m.set_description(&"é".repeat(200)); // cut at a character boundary
        assert_eq!(m.description(), "é".repeat(DESCRIPTION_CAP / 2));
    }
}

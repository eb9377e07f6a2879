//! pycollect-core: the parts of pycollect that must be fast and correct without Python.
//!
//! This crate has no PyO3 dependency so that its lock-free code can be tested with
//! `cargo test`, loom and proptest without linking libpython. The bindings live in
//! `rust/pycollect-py`.
//!
//! Modules, bottom-up (each names only modules listed before it; `tests/module_graph.rs`
//! fails on a circle):
//! * [`consts`]: sizes and limits of a segment (imports nothing).
//! * [`shared`]: references into shared (or, for loom, heap) memory that keep it alive, and the
//!   `ShmSafe` trait, whose implementations sit beside their types.
//! * [`sync`]: atomics facade (std, or loom under `--cfg loom`) and cache-line padding.
//! * [`futex`], [`eventcount`], [`wait`]: blocking without lost wake-ups.
//! * [`metrics`]: counters each worker and the trainer add to, for anyone to read.
//! * [`ring`]: SPSC ring of slot indices (one data ring per worker).
//! * [`exchange`]: per-worker step channel (one request/response in flight, with a mailbox).
//! * [`weights`]: versioned multi-buffer weights store with reader pins.
//! * [`worker`]: per-worker control block (state, generation, heartbeat, error text).
//! * [`layout`], [`header`], [`segment`]: where everything lives, and the memfd itself.
//! * [`watch`]: read-only access to a segment's control blocks (metrics, worker states), also
//!   from another process.
//! * [`supervisor`]: spawns the worker processes (fork+exec or the fork server), sees them exit
//!   or hang, restarts them by policy and stops them; it knows nothing of the transport.
//!
//! See `README.md` in this crate for the memory-ordering protocol.

#[cfg(not(target_has_atomic = "64"))]
compile_error!(
    "pycollect-core needs lock-free 64-bit atomics (cross-process atomics must be address-free)"
);

pub mod consts;
pub mod eventcount;
pub mod exchange;
pub mod futex;
pub mod header;
pub mod layout;
pub mod metrics;
pub mod ring;
#[cfg(not(loom))]
pub mod segment;
pub mod shared;
#[cfg(not(loom))]
pub mod supervisor;
pub mod sync;
pub mod wait;
#[cfg(not(loom))]
pub mod watch;
pub mod weights;
pub mod worker;

pub use eventcount::EventCount;
pub use exchange::{
    wait_answers, ExchangeError, Mailbox, Request, Response, StepChannelMem, StepTrainer,
    StepWorker,
};
pub use layout::{DType, Field, Layout, LayoutError, LayoutParams};
pub use ring::{Claim, ClaimBatch, Consumer, Producer, RingError, RingMem, SlotRef};
#[cfg(not(loom))]
pub use segment::{AttachOptions, Backing, Mapping, Segment, SegmentError};
pub use wait::{step_wait_policy, wait_until, WaitOutcome, WaitPolicy, Waited};
#[cfg(not(loom))]
pub use watch::Watch;
pub use weights::{WeightsError, WeightsMem, WeightsReader, WeightsWriter};
pub use worker::{WorkerCtl, WorkerState};

/// Version of the pycollect release this crate belongs to (the Python package reports it).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[cfg(test)]
mod tests {
    #[test]
    fn version_is_semver_like() {
        let parts: Vec<&str> = super::VERSION.split('.').collect();
        assert_eq!(parts.len(), 3, "version {:?}", super::VERSION);
        assert!(parts.iter().all(|p| p.parse::<u32>().is_ok()));
    }
}

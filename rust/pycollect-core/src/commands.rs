//! Trainer → worker commands: fixed 64-byte POD records on a per-worker SPSC ring.
//!
//! Records are plain integers, never pickled bytes, so a worker cannot be made to run code by
//! whatever sits in shared memory. Each record carries the generation it was sent to; a
//! restarted worker skips commands addressed to its predecessor.

use crate::ring::{Consumer, Producer, RingError, RingMem};
use crate::shared::Owner;
use crate::wait::{wait_until, WaitOutcome, WaitPolicy, Waited};
use std::fmt;
use std::time::Instant;

/// A command to one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Finish the current step and exit cleanly.
    Shutdown,
    /// Stop producing until `Resume`.
    Pause,
    /// Continue producing.
    Resume,
    /// Reset all envs with this seed.
    Reset {
        /// Base seed.
        seed: u64,
    },
    /// Weights of this version are in the weights store; apply them between rollouts.
    WeightsReady {
        /// Weights version.
        version: u64,
    },
}

/// The wire form of a command (64 bytes, `#[repr(C)]`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommandRecord {
    /// Command kind (1..=5).
    pub kind: u32,
    /// Reserved, zero.
    pub _pad: u32,
    /// Generation the command is addressed to.
    pub generation: u64,
    /// Kind-specific argument (seed or version).
    pub arg: u64,
    /// Reserved, zero.
    pub _reserved: [u64; 5],
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<CommandRecord>() == crate::layout::COMMAND_RECORD_SIZE);

impl Command {
    /// Encodes for `generation`.
    pub fn encode(self, generation: u64) -> CommandRecord {
        let (kind, arg) = match self {
            Self::Shutdown => (1, 0),
            Self::Pause => (2, 0),
            Self::Resume => (3, 0),
            Self::Reset { seed } => (4, seed),
            Self::WeightsReady { version } => (5, version),
        };
        CommandRecord {
            kind,
            generation,
            arg,
            ..Default::default()
        }
    }

    /// Decodes a record; unknown kinds are an error naming the kind.
    pub fn decode(rec: &CommandRecord) -> Result<Self, CommandError> {
        Ok(match rec.kind {
            1 => Self::Shutdown,
            2 => Self::Pause,
            3 => Self::Resume,
            4 => Self::Reset { seed: rec.arg },
            5 => Self::WeightsReady { version: rec.arg },
            k => return Err(CommandError::UnknownKind(k)),
        })
    }
}

/// Command channel errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandError {
    /// The worker's command ring is full (the worker is not reading).
    Full {
        /// Ring capacity.
        capacity: usize,
    },
    /// A record with an unknown kind.
    UnknownKind(u32),
    /// Ring protocol error.
    Ring(RingError),
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full { capacity } => {
                write!(
                    f,
                    "worker command ring is full ({capacity} unread commands)"
                )
            }
            Self::UnknownKind(k) => write!(f, "unknown command kind {k} in shared memory"),
            Self::Ring(e) => write!(f, "command ring: {e}"),
        }
    }
}

impl std::error::Error for CommandError {}

impl From<RingError> for CommandError {
    fn from(e: RingError) -> Self {
        Self::Ring(e)
    }
}

/// Where the records of a command ring live.
#[derive(Debug, Clone)]
struct Records {
    base: *mut CommandRecord,
    len: usize,
    _owner: OwnerBox,
}

#[derive(Clone)]
struct OwnerBox(#[allow(dead_code)] Owner);

impl fmt::Debug for OwnerBox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Owner")
    }
}

// SAFETY: raw pointer into memory kept alive by the owner; records are accessed only by the
// current owner of the slot per the ring protocol.
unsafe impl Send for Records {}
// SAFETY: as for Send.
unsafe impl Sync for Records {}

/// Sends commands to one worker (the trainer side; never blocks).
#[derive(Debug)]
pub struct CommandSender {
    ring: Producer,
    records: Records,
}

/// Receives commands (the worker side).
#[derive(Debug)]
pub struct CommandReceiver {
    ring: Consumer,
    records: Records,
    generation: u64,
}

/// Builds both ends' record access.
///
/// # Safety
/// `records` must point to `ring.capacity()` `CommandRecord`s kept mapped by `owner`.
unsafe fn records(ring: &RingMem, records: *mut CommandRecord, owner: Owner) -> Records {
    Records {
        base: records,
        len: ring.capacity(),
        _owner: OwnerBox(owner),
    }
}

impl CommandSender {
    /// Opens the sending end.
    ///
    /// # Safety
    /// `records` must point to `ring.capacity()` records kept mapped by `owner`.
    pub unsafe fn new(ring: RingMem, records: *mut CommandRecord, owner: Owner) -> Self {
        // SAFETY: forwarded contract.
        let records = unsafe { self::records(&ring, records, owner) };
        Self {
            ring: Producer::new(ring, 0),
            records,
        }
    }

    /// Pushes `cmd` addressed to `generation`; fails (never waits) when the ring is full.
    pub fn send(&mut self, cmd: Command, generation: u64) -> Result<(), CommandError> {
        let Some(claim) = self.ring.claim() else {
            return Err(CommandError::Full {
                capacity: self.ring.capacity(),
            });
        };
        assert!(claim.index < self.records.len);
        // SAFETY: we own the claimed slot until commit; the index is in range (asserted).
        unsafe {
            self.records
                .base
                .add(claim.index)
                .write_volatile(cmd.encode(generation))
        };
        self.ring.commit(claim)?;
        Ok(())
    }
}

impl CommandReceiver {
    /// Opens the receiving end for a worker of `generation`.
    ///
    /// # Safety
    /// `records` must point to `ring.capacity()` records kept mapped by `owner`.
    pub unsafe fn new(
        ring: RingMem,
        records: *mut CommandRecord,
        owner: Owner,
        generation: u64,
    ) -> Self {
        // SAFETY: forwarded contract.
        let records = unsafe { self::records(&ring, records, owner) };
        Self {
            ring: Consumer::new(ring),
            records,
            generation,
        }
    }

    /// Next command for this generation, if any (stale ones are skipped).
    pub fn try_recv(&mut self) -> Result<Option<Command>, CommandError> {
        loop {
            let Some(slot) = self.ring.try_pop()? else {
                return Ok(None);
            };
            assert!(slot.index < self.records.len);
            // SAFETY: the popped slot is ours until released; the index is in range.
            let rec = unsafe { self.records.base.add(slot.index).read_volatile() };
            self.ring.release(slot.seq)?;
            if rec.generation < self.generation {
                continue;
            }
            return Command::decode(&rec).map(Some);
        }
    }

    /// Waits for a command (spin → yield → futex on the worker's command bell).
    pub fn recv_wait(
        &mut self,
        policy: &WaitPolicy,
        deadline: Option<Instant>,
        mut should_abort: impl FnMut() -> bool,
    ) -> Result<Waited<Command>, CommandError> {
        loop {
            if let Some(c) = self.try_recv()? {
                return Ok(Waited::Ready(c));
            }
            let bell = self.ring.mem().data_bell().clone();
            let ring = &mut self.ring;
            match wait_until(
                &bell,
                policy,
                deadline,
                || ring.available() > 0,
                &mut should_abort,
            ) {
                WaitOutcome::Ready => continue,
                WaitOutcome::TimedOut => return Ok(Waited::TimedOut),
                WaitOutcome::Aborted => return Ok(Waited::Aborted),
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn round_trip_and_stale_skipped() {
        let ring = RingMem::new_heap(4).unwrap();
        struct Own(Vec<std::cell::UnsafeCell<CommandRecord>>);
        // SAFETY: test only; the records are accessed by one thread.
        unsafe impl Send for Own {}
        // SAFETY: as above.
        unsafe impl Sync for Own {}
        let own = Arc::new(Own((0..4).map(|_| Default::default()).collect()));
        let base = own.0.as_ptr() as *mut CommandRecord;
        let owner: Owner = own;
        // SAFETY: base points to 4 records kept alive by owner.
        let mut tx = unsafe { CommandSender::new(ring.clone(), base, owner.clone()) };
        // SAFETY: as above.
        let mut rx = unsafe { CommandReceiver::new(ring, base, owner, 2) };
        tx.send(Command::Pause, 1).unwrap();
        tx.send(Command::Reset { seed: 9 }, 2).unwrap();
        tx.send(Command::WeightsReady { version: 3 }, 2).unwrap();
        tx.send(Command::Shutdown, 2).unwrap();
        assert_eq!(
            tx.send(Command::Resume, 2),
            Err(CommandError::Full { capacity: 4 })
        );
        assert_eq!(rx.try_recv().unwrap(), Some(Command::Reset { seed: 9 }));
        assert_eq!(
            rx.try_recv().unwrap(),
            Some(Command::WeightsReady { version: 3 })
        );
        let w = rx.recv_wait(&WaitPolicy::BLOCKING, None, || false).unwrap();
        assert_eq!(w, Waited::Ready(Command::Shutdown));
        assert_eq!(rx.try_recv().unwrap(), None);
        let bad = CommandRecord {
            kind: 77,
            ..Default::default()
        };
        assert_eq!(Command::decode(&bad), Err(CommandError::UnknownKind(77)));
    }
}

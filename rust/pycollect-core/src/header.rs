//! The segment header: identity, readiness and the serialised layout.
//!
//! The creator writes every field, then stores `state = READY` with Release *last*. An
//! attacher waits for READY with Acquire, then checks magic, ABI version and layout hash, and
//! rebuilds the [`Layout`] from the stored parameters and field table (so it does not have to
//! be told the layout) and verifies that the rebuilt layout hashes to the stored value.
//! Decoding treats the header as untrusted bytes: every count and code is range-checked.

use crate::layout::{
    DType, Field, Layout, LayoutParams, FIELD_RECORD, HEADER_FIXED, MAX_DIMS, MAX_FIELDS,
    MAX_NAME_LEN,
};
use crate::sync::{AtomicU32, Ordering};

/// `"PYCOLRB1"` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PYCOLRB1");
pub use crate::consts::ABI_VERSION;
/// Header state: still being initialised (all-zero memory starts here).
pub const STATE_INIT: u32 = 0;
/// Header state: fully initialised; attachers may proceed.
pub const STATE_READY: u32 = 1;

/// Fixed part of the header (first 256 bytes of the segment).
#[repr(C)]
#[derive(Debug)]
pub struct SegmentHeader {
    /// [`MAGIC`].
    pub magic: u64,
    /// [`ABI_VERSION`].
    pub abi_version: u32,
    /// [`STATE_INIT`] → [`STATE_READY`], stored last with Release.
    pub state: AtomicU32,
    /// [`Layout::hash`] of the creator's layout.
    pub layout_hash: u64,
    /// Bytes of the segment.
    pub total_len: u64,
    /// Creator's pid.
    pub creator_pid: u64,
    /// Creator's start time (clock ticks since boot, from /proc/self/stat).
    pub creator_start_time: u64,
    /// Layout parameters (see [`LayoutParams`]).
    pub n_workers: u64,
    /// K.
    pub envs_per_worker: u64,
    /// T.
    pub steps: u64,
    /// Ring slots per worker.
    pub slots_per_worker: u64,
    /// Bytes of each half of every step-channel mailbox (0: no step channels). ABI 2 kept this
    /// word unused (zero).
    pub mailbox_bytes: u64,
    /// Bytes per weights buffer.
    pub weights_capacity: u64,
    /// Number of weights buffers.
    pub weight_buffers: u64,
    /// Entries in the field table that follows the fixed part.
    pub n_fields: u64,
    /// Bytes of each rollout slot's snapshot area (0: none).
    pub snapshot_bytes: u64,
    _reserved: [u64; 17],
}

/// One field-table entry (128 bytes, after the fixed header).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FieldRecord {
    /// NUL-padded UTF-8 name.
    pub name: [u8; MAX_NAME_LEN + 1],
    /// [`DType::code`].
    pub dtype: u32,
    /// Number of used entries in `shape`.
    pub ndim: u32,
    /// Per-step shape.
    pub shape: [u64; MAX_DIMS],
    /// Offset of the field region (redundant; checked against the rebuilt layout).
    pub offset: u64,
}

#[cfg(not(loom))]
const _: () = {
    assert!(std::mem::size_of::<SegmentHeader>() == HEADER_FIXED);
    assert!(std::mem::size_of::<FieldRecord>() == FIELD_RECORD);
};

/// Why a header could not be decoded; names the offending value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// Not a pycollect segment.
    BadMagic {
        /// What we expect.
        expected: u64,
        /// What the segment holds.
        found: u64,
    },
    /// Built by an incompatible pycollect.
    AbiMismatch {
        /// Ours.
        expected: u32,
        /// The segment's.
        found: u32,
    },
    /// A stored value is out of range (`what` names it).
    Invalid {
        /// Which value.
        what: &'static str,
        /// The stored value.
        value: u64,
    },
    /// The stored parameters do not form a valid layout.
    Layout(crate::layout::LayoutError),
    /// Rebuilding the layout gave a different hash than the stored one.
    HashMismatch {
        /// Hash stored in the header.
        stored: u64,
        /// Hash of the layout rebuilt from the header.
        rebuilt: u64,
    },
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BadMagic { expected, found } => write!(
                f,
                "not a pycollect segment: magic is {found:#018x}, expected {expected:#018x}"
            ),
            Self::AbiMismatch { expected, found } => write!(
                f,
                "segment ABI version {found} does not match this build's ABI version {expected} \
                 (trainer and worker must load the same pycollect build)"
            ),
            Self::Invalid { what, value } => {
                write!(f, "segment header has invalid {what}: {value}")
            }
            Self::Layout(e) => write!(f, "segment header describes an invalid layout: {e}"),
            Self::HashMismatch { stored, rebuilt } => write!(
                f,
                "segment header layout hash {stored:#018x} does not match the layout rebuilt \
                 from it ({rebuilt:#018x})"
            ),
        }
    }
}

impl std::error::Error for HeaderError {}

/// Writes everything except `state` into the header at `base`.
///
/// # Safety
/// `base` must point to at least `HEADER_FIXED + MAX_FIELDS * FIELD_RECORD` writable,
/// 8-byte-aligned bytes that no other party reads yet (state is still INIT).
pub unsafe fn write_header(base: *mut u8, layout: &Layout, pid: u64, start_time: u64) {
    let p = layout.params();
    let hdr = base.cast::<SegmentHeader>();
    // SAFETY: the caller guarantees the memory is ours and large enough; we write through
    // raw field pointers so no reference to the (concurrently readable) state word is made.
    unsafe {
        std::ptr::addr_of_mut!((*hdr).magic).write(MAGIC);
        std::ptr::addr_of_mut!((*hdr).abi_version).write(ABI_VERSION);
        std::ptr::addr_of_mut!((*hdr).layout_hash).write(layout.hash());
        std::ptr::addr_of_mut!((*hdr).total_len).write(layout.total_len() as u64);
        std::ptr::addr_of_mut!((*hdr).creator_pid).write(pid);
        std::ptr::addr_of_mut!((*hdr).creator_start_time).write(start_time);
        std::ptr::addr_of_mut!((*hdr).n_workers).write(p.n_workers as u64);
        std::ptr::addr_of_mut!((*hdr).envs_per_worker).write(p.envs_per_worker as u64);
        std::ptr::addr_of_mut!((*hdr).steps).write(p.steps as u64);
        std::ptr::addr_of_mut!((*hdr).slots_per_worker).write(p.slots_per_worker as u64);
        std::ptr::addr_of_mut!((*hdr).weights_capacity).write(p.weights_capacity as u64);
        std::ptr::addr_of_mut!((*hdr).weight_buffers).write(p.weight_buffers as u64);
        std::ptr::addr_of_mut!((*hdr).mailbox_bytes).write(p.mailbox_bytes as u64);
        std::ptr::addr_of_mut!((*hdr).snapshot_bytes).write(p.snapshot_bytes as u64);
        std::ptr::addr_of_mut!((*hdr).n_fields).write(p.fields.len() as u64);
    }
    for (i, f) in p.fields.iter().enumerate() {
        let mut rec = FieldRecord {
            name: [0; MAX_NAME_LEN + 1],
            dtype: f.dtype.code(),
            ndim: f.shape.len() as u32,
            shape: [0; MAX_DIMS],
            offset: layout.field(i).1.offset as u64,
        };
        rec.name[..f.name.len()].copy_from_slice(f.name.as_bytes());
        for (d, &s) in f.shape.iter().enumerate() {
            rec.shape[d] = s as u64;
        }
        // SAFETY: i < MAX_FIELDS (Layout::new checks), so the record lies inside the header
        // area the caller vouched for; FieldRecord is 8-aligned and so is its offset.
        unsafe {
            base.add(HEADER_FIXED + i * FIELD_RECORD)
                .cast::<FieldRecord>()
                .write(rec)
        };
    }
}

/// The header's state word.
///
/// # Safety
/// `base` must point to a mapped, 8-byte-aligned header that outlives the returned reference.
pub unsafe fn state<'a>(base: *const u8) -> &'a AtomicU32 {
    // SAFETY: the state word is an AtomicU32 at a fixed aligned offset of the header; the
    // caller guarantees the mapping outlives 'a. Atomics tolerate concurrent access.
    unsafe { &*std::ptr::addr_of!((*base.cast::<SegmentHeader>()).state) }
}

/// Marks the header READY (after everything else in the segment was initialised).
///
/// # Safety
/// As for [`state`].
pub unsafe fn publish_ready(base: *const u8) {
    // SAFETY: forwarded contract.
    let s = unsafe { state(base) };
    // SYNC POINT: Release publishes every byte the creator wrote into the segment.
    s.store(STATE_READY, Ordering::Release);
}

/// Reads a u64 header field.
fn rd(base: *const u8, off: usize) -> u64 {
    // SAFETY: callers pass offsets inside HEADER_FIXED of a mapped header (checked by
    // `decode`'s caller); read_unaligned tolerates any alignment. The creator wrote these
    // before its Release of READY, which the caller acquired.
    unsafe { base.add(off).cast::<u64>().read_unaligned() }
}

/// What an attacher learns from a header.
#[derive(Debug, Clone)]
pub struct DecodedHeader {
    /// The rebuilt layout (its hash equals the stored hash).
    pub layout: Layout,
    /// Creator's pid.
    pub creator_pid: u64,
    /// Creator's start time.
    pub creator_start_time: u64,
}

/// Checks magic and ABI, then rebuilds the layout from the header.
///
/// # Safety
/// `base` must point to at least `map_len` mapped bytes with `map_len ≥ HEADER_FIXED +
/// MAX_FIELDS * FIELD_RECORD`, and the READY state must have been observed with Acquire.
pub unsafe fn decode(base: *const u8, map_len: usize) -> Result<DecodedHeader, HeaderError> {
    assert!(map_len >= HEADER_FIXED + MAX_FIELDS * FIELD_RECORD);
    macro_rules! off {
        ($f:ident) => {
            std::mem::offset_of!(SegmentHeader, $f)
        };
    }
    let magic = rd(base, off!(magic));
    if magic != MAGIC {
        return Err(HeaderError::BadMagic {
            expected: MAGIC,
            found: magic,
        });
    }
    // SAFETY: abi_version lies inside the header (map_len asserted above).
    let abi = unsafe { base.add(off!(abi_version)).cast::<u32>().read_unaligned() };
    if abi != ABI_VERSION {
        return Err(HeaderError::AbiMismatch {
            expected: ABI_VERSION,
            found: abi,
        });
    }
    let usize_of = |what, v: u64| -> Result<usize, HeaderError> {
        usize::try_from(v).map_err(|_| HeaderError::Invalid { what, value: v })
    };
    let n_fields = rd(base, off!(n_fields));
    if n_fields as usize > MAX_FIELDS || n_fields == 0 {
        return Err(HeaderError::Invalid {
            what: "field count",
            value: n_fields,
        });
    }
    let mut fields = Vec::with_capacity(n_fields as usize);
    for i in 0..n_fields as usize {
        // SAFETY: i < MAX_FIELDS and map_len covers the whole field table (asserted above).
        let rec = unsafe {
            base.add(HEADER_FIXED + i * FIELD_RECORD)
                .cast::<FieldRecord>()
                .read_unaligned()
        };
        let end = rec
            .name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(rec.name.len());
        let name = std::str::from_utf8(&rec.name[..end]).map_err(|_| HeaderError::Invalid {
            what: "field name (not UTF-8)",
            value: i as u64,
        })?;
        let dtype = DType::from_code(rec.dtype).ok_or(HeaderError::Invalid {
            what: "dtype code",
            value: u64::from(rec.dtype),
        })?;
        if rec.ndim as usize > MAX_DIMS {
            return Err(HeaderError::Invalid {
                what: "ndim",
                value: u64::from(rec.ndim),
            });
        }
        let shape = rec.shape[..rec.ndim as usize]
            .iter()
            .map(|&d| usize_of("shape dimension", d))
            .collect::<Result<Vec<_>, _>>()?;
        fields.push(Field {
            name: name.to_owned(),
            dtype,
            shape,
        });
    }
    let params = LayoutParams {
        fields,
        n_workers: usize_of("n_workers", rd(base, off!(n_workers)))?,
        envs_per_worker: usize_of("envs_per_worker", rd(base, off!(envs_per_worker)))?,
        steps: usize_of("steps", rd(base, off!(steps)))?,
        slots_per_worker: usize_of("slots_per_worker", rd(base, off!(slots_per_worker)))?,
        weights_capacity: usize_of("weights_capacity", rd(base, off!(weights_capacity)))?,
        weight_buffers: usize_of("weight_buffers", rd(base, off!(weight_buffers)))?,
        mailbox_bytes: usize_of("mailbox_bytes", rd(base, off!(mailbox_bytes)))?,
        snapshot_bytes: usize_of("snapshot_bytes", rd(base, off!(snapshot_bytes)))?,
    };
    let layout = Layout::new(params).map_err(HeaderError::Layout)?;
    let stored = rd(base, off!(layout_hash));
    if layout.hash() != stored {
        return Err(HeaderError::HashMismatch {
            stored,
            rebuilt: layout.hash(),
        });
    }
    let total = rd(base, off!(total_len));
    if total != layout.total_len() as u64 || layout.total_len() > map_len {
        return Err(HeaderError::Invalid {
            what: "total length",
            value: total,
        });
    }
    Ok(DecodedHeader {
        layout,
        creator_pid: rd(base, off!(creator_pid)),
        creator_start_time: rd(base, off!(creator_start_time)),
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn buf_for(layout: &Layout) -> Vec<u64> {
        vec![0u64; (HEADER_FIXED + MAX_FIELDS * FIELD_RECORD) / 8]
            .into_iter()
            .chain(std::iter::repeat_n(0, layout.total_len() / 8))
            .collect()
    }

    fn layout() -> Layout {
        Layout::new(LayoutParams::new(
            vec![
                Field::new("obs", DType::F32, &[3, 2]),
                Field::new("r", DType::F64, &[]),
            ],
            2,
            4,
            8,
            2,
        ))
        .unwrap()
    }

    #[test]
    fn round_trip() {
        let l = layout();
        let mut mem = buf_for(&l);
        let base = mem.as_mut_ptr().cast::<u8>();
        // SAFETY: `mem` is large enough and 8-aligned, and nobody else sees it.
        unsafe { write_header(base, &l, 42, 7) };
        // SAFETY: as above; the length passed is the buffer's.
        let d = unsafe { decode(base, mem.len() * 8) }.unwrap();
        assert_eq!(d.layout, l);
        assert_eq!((d.creator_pid, d.creator_start_time), (42, 7));
    }

    #[test]
    fn round_trip_keeps_the_mailbox_and_snapshot_sizes() {
        let params = layout().params().clone().with_mailbox(3000);
        let l = Layout::new(params.with_snapshots(5000)).unwrap();
        let mut mem = buf_for(&l);
        let base = mem.as_mut_ptr().cast::<u8>();
        // SAFETY: `mem` is large enough and 8-aligned, and nobody else sees it.
        unsafe { write_header(base, &l, 1, 1) };
        // SAFETY: as above; the length passed is the buffer's.
        let d = unsafe { decode(base, mem.len() * 8) }.unwrap();
        assert_eq!(d.layout.params().mailbox_bytes, 3000);
        assert_eq!(d.layout.params().snapshot_bytes, 5000);
        assert_eq!(d.layout, l);
    }

    #[test]
    fn corrupt_headers_rejected() {
        let l = layout();
        let mut mem = buf_for(&l);
        let base = mem.as_mut_ptr().cast::<u8>();
        let len = mem.len() * 8;
        // SAFETY: `mem` is ours, large and aligned (the same holds for every block below).
        unsafe { write_header(base, &l, 1, 1) };
        mem[0] ^= 1;
        // SAFETY: as above.
        let r = unsafe { decode(base, len) };
        assert!(matches!(r, Err(HeaderError::BadMagic { .. })));
        mem[0] ^= 1;
        // abi_version = ABI_VERSION + 1 (and state 0).
        mem[1] = u64::from(ABI_VERSION + 1);
        // SAFETY: as above.
        let e = unsafe { decode(base, len) }.unwrap_err();
        assert_eq!(
            e,
            HeaderError::AbiMismatch {
                expected: ABI_VERSION,
                found: ABI_VERSION + 1
            }
        );
        mem[1] = u64::from(ABI_VERSION);
        // Corrupt the layout hash.
        mem[2] ^= 0xff;
        // SAFETY: as above.
        let r = unsafe { decode(base, len) };
        assert!(matches!(r, Err(HeaderError::HashMismatch { .. })));
        mem[2] ^= 0xff;
        // Garbage everywhere in the field table must be rejected, never panic.
        let table = HEADER_FIXED / 8;
        mem[table..table + 40].fill(0xdead_beef_dead_beef);
        // SAFETY: as above.
        assert!(unsafe { decode(base, len) }.is_err());
    }
}

//! Where everything lives in a segment, computed from the field table and sizes.
//!
//! ```text
//! header          SegmentHeader + field table                         (4 KiB aligned)
//! global ctl      doorbell eventcount | shutdown flag | trainer heartbeat | spare |
//!                 trainer metrics
//! worker ctl[w]   state, pid, generation | heartbeat | error length | metrics |
//!                 error text (8 KiB)
//! data ring[w]    RingCtl (tail | head | space bell) + SlotHeader[slots]
//! step chan[w]    request seq+header | response seq+header | bell, request payload,
//!                 response payload (mailbox_bytes each; absent when mailbox_bytes = 0)
//! weights ctl     latest | len[buffers] | pin[n_workers]
//! weights bufs    buffers × round_up(capacity, 4 KiB)
//! snapshots[w][s] length word + snapshot_bytes (absent when snapshot_bytes = 0)
//! field[f]        [slot][worker][K][T][*shape] elements
//! ```
//!
//! Every region starts on a 4 KiB boundary; hot atomics sit on their own 128-byte lines.
//! Each field is one contiguous region ordered `[slot][worker]…`, so slot `s` across all
//! workers is one `[n_workers*K, T, *shape]` block: a sync-mode batch is a single view.
//! Only offsets are computed here; nothing in the segment ever stores a pointer.

use std::fmt;

pub use crate::consts::{
    DEFAULT_WEIGHT_BUFFERS, ERROR_TEXT_CAP, FIELD_RECORD, GLOBAL_CTL_SIZE, HEADER_FIXED, LINE,
    MAX_DIMS, MAX_FIELDS, MAX_NAME_LEN, REGION_ALIGN, RING_CTL_SIZE, SLOT_HEADER_SIZE,
    SNAPSHOT_HEADER, STEP_CTL_SIZE, WORKER_CTL_SIZE, WORKER_ERROR_TEXT_OFFSET,
};

/// Element type of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum DType {
    /// `uint8`
    U8 = 1,
    /// `int8`
    I8 = 2,
    /// `int16`
    I16 = 3,
    /// `int32`
    I32 = 4,
    /// `int64`
    I64 = 5,
    /// `uint16`
    U16 = 6,
    /// `uint32`
    U32 = 7,
    /// `uint64`
    U64 = 8,
    /// `float16`
    F16 = 9,
    /// `float32`
    F32 = 10,
    /// `float64`
    F64 = 11,
    /// `bool` (one byte, 0 or 1)
    Bool = 12,
    /// `bfloat16`
    BF16 = 13,
}

const ALL_DTYPES: [DType; 13] = [
    DType::U8,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U16,
    DType::U32,
    DType::U64,
    DType::F16,
    DType::F32,
    DType::F64,
    DType::Bool,
    DType::BF16,
];

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Self::U8 | Self::I8 | Self::Bool => 1,
            Self::I16 | Self::U16 | Self::F16 | Self::BF16 => 2,
            Self::I32 | Self::U32 | Self::F32 => 4,
            Self::I64 | Self::U64 | Self::F64 => 8,
        }
    }

    /// The numpy / torch name (`"float32"`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::U8 => "uint8",
            Self::I8 => "int8",
            Self::I16 => "int16",
            Self::I32 => "int32",
            Self::I64 => "int64",
            Self::U16 => "uint16",
            Self::U32 => "uint32",
            Self::U64 => "uint64",
            Self::F16 => "float16",
            Self::F32 => "float32",
            Self::F64 => "float64",
            Self::Bool => "bool",
            Self::BF16 => "bfloat16",
        }
    }

    /// The PEP 3118 buffer-protocol format string (`None` for bfloat16, which has none).
    pub fn buffer_format(self) -> Option<&'static str> {
        Some(match self {
            Self::U8 => "B",
            Self::I8 => "b",
            Self::I16 => "h",
            Self::I32 => "i",
            Self::I64 => "q",
            Self::U16 => "H",
            Self::U32 => "I",
            Self::U64 => "Q",
            Self::F16 => "e",
            Self::F32 => "f",
            Self::F64 => "d",
            Self::Bool => "?",
            Self::BF16 => return None,
        })
    }

    /// Stable numeric code stored in the segment header.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// Inverse of [`code`](Self::code).
    pub fn from_code(code: u32) -> Option<Self> {
        ALL_DTYPES.into_iter().find(|d| d.code() == code)
    }

    /// Inverse of [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<Self> {
        ALL_DTYPES.into_iter().find(|d| d.name() == name)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One field of a rollout: per env and per step, an array of `shape` elements of `dtype` (the
/// record Python calls `pycollect.envs.Field`, its key joined by `/` into `name`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Field {
    /// Unique name (≤ 63 bytes, no NUL), e.g. `"observation"` or `"next/reward"`.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Per-step shape (empty for a scalar per env and step).
    pub shape: Vec<usize>,
}

impl Field {
    /// Convenience constructor.
    pub fn new(name: impl Into<String>, dtype: DType, shape: &[usize]) -> Self {
        Self {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
        }
    }
}

/// Everything that determines a layout.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LayoutParams {
    /// The rollout fields.
    pub fields: Vec<Field>,
    /// Number of worker processes.
    pub n_workers: usize,
    /// Environments stepped by each worker (K).
    pub envs_per_worker: usize,
    /// Steps per rollout (T).
    pub steps: usize,
    /// Rollout slots per worker ring (power of two).
    pub slots_per_worker: usize,
    /// Bytes per weights buffer (0: no weights store payload).
    pub weights_capacity: usize,
    /// Number of weights buffers (≥ 3).
    pub weight_buffers: usize,
    /// Bytes of each half (request, response) of every worker's step-channel mailbox; 0: the
    /// segment has no step channels (a rollout-only segment does not grow).
    pub mailbox_bytes: usize,
    /// Bytes of the snapshot that goes with each rollout slot (a worker's state after the
    /// rollout: envs, random streams, trajectories); 0: the segment has no snapshots.
    pub snapshot_bytes: usize,
}

impl LayoutParams {
    /// Params with no weights payload and 3 weight buffers.
    pub fn new(
        fields: Vec<Field>,
        n_workers: usize,
        envs_per_worker: usize,
        steps: usize,
        slots_per_worker: usize,
    ) -> Self {
        Self {
            fields,
            n_workers,
            envs_per_worker,
            steps,
            slots_per_worker,
            weights_capacity: 0,
            weight_buffers: DEFAULT_WEIGHT_BUFFERS,
            mailbox_bytes: 0,
            snapshot_bytes: 0,
        }
    }

    /// Sets the weights buffer size in bytes.
    pub fn with_weights(mut self, capacity: usize, buffers: usize) -> Self {
        self.weights_capacity = capacity;
        self.weight_buffers = buffers;
        self
    }

    /// Gives every worker a step channel whose mailbox holds `bytes` per half (0: none).
    pub fn with_mailbox(mut self, bytes: usize) -> Self {
        self.mailbox_bytes = bytes;
        self
    }

    /// Gives every rollout slot a snapshot area of `bytes` (0: none).
    pub fn with_snapshots(mut self, bytes: usize) -> Self {
        self.snapshot_bytes = bytes;
        self
    }
}

/// Why a layout was rejected; each variant names the bad value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutError {
    /// A size that must be positive was zero (`what` names it).
    Zero(&'static str),
    /// A count that must be a power of two was not.
    NotPowerOfTwo {
        /// Which parameter.
        what: &'static str,
        /// Its value.
        value: usize,
    },
    /// Sizes overflowed while computing offsets.
    Overflow(&'static str),
    /// A field name was empty, too long, contained NUL, or repeated.
    BadFieldName {
        /// The name.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// A field shape had a zero dimension or too many dimensions.
    BadShape {
        /// Field name.
        field: String,
        /// The shape.
        shape: Vec<usize>,
    },
    /// More fields than [`MAX_FIELDS`] (or none).
    FieldCount(usize),
    /// Weight buffer count outside 3..=255.
    WeightBuffers(usize),
    /// More workers than fit the 32-bit fields of the header.
    TooLarge {
        /// Which parameter.
        what: &'static str,
        /// Its value.
        value: usize,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Zero(what) => write!(f, "{what} must be positive, got 0"),
            Self::NotPowerOfTwo { what, value } => {
                write!(f, "{what} must be a power of two, got {value}")
            }
            Self::Overflow(what) => write!(f, "segment size overflows while sizing {what}"),
            Self::BadFieldName { name, reason } => write!(f, "bad field name {name:?}: {reason}"),
            Self::BadShape { field, shape } => write!(
                f,
                "field {field:?} has shape {shape:?}: every dimension must be positive and \
                 there may be at most {MAX_DIMS}"
            ),
            Self::FieldCount(n) => write!(f, "a layout needs 1..={MAX_FIELDS} fields, got {n}"),
            Self::WeightBuffers(n) => {
                write!(f, "weight_buffers must be in 3..=255, got {n}")
            }
            Self::TooLarge { what, value } => write!(f, "{what} is too large: {value}"),
        }
    }
}

impl std::error::Error for LayoutError {}

/// Where one field lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldLayout {
    /// Offset of the field region from the segment base.
    pub offset: usize,
    /// Bytes of the region (before rounding to 4 KiB).
    pub len: usize,
    /// Bytes of one worker's `[K][T][*shape]` block in one slot.
    pub per_worker: usize,
}

/// Computed offsets of every region. Construct with [`Layout::new`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    params: LayoutParams,
    global_ctl: usize,
    worker_ctl: usize,
    data_rings: usize,
    data_ring_stride: usize,
    step_channels: usize,
    step_stride: usize,
    weights_ctl: usize,
    weights_bufs: usize,
    weights_stride: usize,
    snapshots: usize,
    snapshot_stride: usize,
    fields: Vec<FieldLayout>,
    total_len: usize,
    hash: u64,
}

fn round_up(x: usize, a: usize) -> Option<usize> {
    x.checked_add(a - 1).map(|v| v / a * a)
}

struct Cursor(usize);

impl Cursor {
    /// Reserves `len` bytes at the next 4 KiB boundary; returns their offset.
    fn take(&mut self, len: usize, what: &'static str) -> Result<usize, LayoutError> {
        let off = self.0;
        let end = off.checked_add(len).ok_or(LayoutError::Overflow(what))?;
        self.0 = round_up(end, REGION_ALIGN).ok_or(LayoutError::Overflow(what))?;
        Ok(off)
    }
}

fn mul(a: usize, b: usize, what: &'static str) -> Result<usize, LayoutError> {
    a.checked_mul(b).ok_or(LayoutError::Overflow(what))
}

impl Layout {
    /// Validates `params` and computes every offset.
    pub fn new(params: LayoutParams) -> Result<Self, LayoutError> {
        let p = &params;
        for (what, v) in [
            ("n_workers", p.n_workers),
            ("envs_per_worker", p.envs_per_worker),
            ("steps", p.steps),
            ("slots_per_worker", p.slots_per_worker),
        ] {
            if v == 0 {
                return Err(LayoutError::Zero(what));
            }
        }
        if !p.slots_per_worker.is_power_of_two() {
            return Err(LayoutError::NotPowerOfTwo {
                what: "slots_per_worker",
                value: p.slots_per_worker,
            });
        }
        if p.n_workers > u32::MAX as usize {
            return Err(LayoutError::TooLarge {
                what: "n_workers",
                value: p.n_workers,
            });
        }
        if !(3..=crate::consts::MAX_BUFFERS).contains(&p.weight_buffers) {
            return Err(LayoutError::WeightBuffers(p.weight_buffers));
        }
        if p.fields.is_empty() || p.fields.len() > MAX_FIELDS {
            return Err(LayoutError::FieldCount(p.fields.len()));
        }
        for (i, f) in p.fields.iter().enumerate() {
            let bad = |reason| LayoutError::BadFieldName {
                name: f.name.clone(),
                reason,
            };
            if f.name.is_empty() {
                return Err(bad("empty"));
            }
            if f.name.len() > MAX_NAME_LEN {
                return Err(bad("longer than 63 bytes"));
            }
            if f.name.contains('\0') {
                return Err(bad("contains NUL"));
            }
            if p.fields[..i].iter().any(|g| g.name == f.name) {
                return Err(bad("used twice"));
            }
            if f.shape.len() > MAX_DIMS || f.shape.contains(&0) {
                return Err(LayoutError::BadShape {
                    field: f.name.clone(),
                    shape: f.shape.clone(),
                });
            }
        }

        let mut c = Cursor(0);
        c.take(HEADER_FIXED + MAX_FIELDS * FIELD_RECORD, "header")?;
        let global_ctl = c.take(GLOBAL_CTL_SIZE, "global control")?;
        let worker_ctl = c.take(
            mul(WORKER_CTL_SIZE, p.n_workers, "worker control")?,
            "worker",
        )?;
        let data_ring_stride = mul(SLOT_HEADER_SIZE, p.slots_per_worker, "ring")?
            .checked_add(RING_CTL_SIZE)
            .and_then(|body| round_up(body, REGION_ALIGN))
            .ok_or(LayoutError::Overflow("ring"))?;
        let data_rings = c.take(
            mul(data_ring_stride, p.n_workers, "data rings")?,
            "data rings",
        )?;
        // Step channels: control lines, then the request and response halves at line
        // boundaries; each worker's channel on its own 4 KiB boundary. None when 0 bytes.
        let step_stride = if p.mailbox_bytes == 0 {
            0
        } else {
            round_up(p.mailbox_bytes, LINE)
                .and_then(|half| half.checked_mul(2))
                .and_then(|halves| halves.checked_add(STEP_CTL_SIZE))
                .and_then(|body| round_up(body, REGION_ALIGN))
                .ok_or(LayoutError::Overflow("step channels"))?
        };
        let step_channels = c.take(
            mul(step_stride, p.n_workers, "step channels")?,
            "step channels",
        )?;
        let wctl = LINE + round_up(8 * p.weight_buffers, LINE).unwrap_or(usize::MAX);
        let wctl = wctl
            .checked_add(mul(LINE, p.n_workers, "weights pins")?)
            .ok_or(LayoutError::Overflow("weights pins"))?;
        let weights_ctl = c.take(wctl, "weights control")?;
        let weights_stride =
            round_up(p.weights_capacity, REGION_ALIGN).ok_or(LayoutError::Overflow("weights"))?;
        let weights_bufs = c.take(
            mul(weights_stride, p.weight_buffers, "weights")?,
            "weights buffers",
        )?;
        // Snapshots: per worker and slot, a length word then the bytes, on a 4 KiB boundary.
        let snapshot_stride = if p.snapshot_bytes == 0 {
            0
        } else {
            p.snapshot_bytes
                .checked_add(SNAPSHOT_HEADER)
                .and_then(|body| round_up(body, REGION_ALIGN))
                .ok_or(LayoutError::Overflow("snapshots"))?
        };
        let snapshots = c.take(
            mul(
                mul(snapshot_stride, p.n_workers, "snapshots")?,
                p.slots_per_worker,
                "snapshots",
            )?,
            "snapshots",
        )?;
        let mut fields = Vec::with_capacity(p.fields.len());
        for f in &p.fields {
            let mut per_worker = mul(p.envs_per_worker, p.steps, "field")?;
            per_worker = mul(per_worker, f.dtype.size(), "field")?;
            for &d in &f.shape {
                per_worker = mul(per_worker, d, "field shape")?;
            }
            let len = mul(
                mul(per_worker, p.n_workers, "field")?,
                p.slots_per_worker,
                "field",
            )?;
            let offset = c.take(len, "field")?;
            fields.push(FieldLayout {
                offset,
                len,
                per_worker,
            });
        }
        let total_len = c.0;
        if total_len > isize::MAX as usize {
            return Err(LayoutError::Overflow("total segment length"));
        }
        let mut layout = Self {
            params,
            global_ctl,
            worker_ctl,
            data_rings,
            data_ring_stride,
            step_channels,
            step_stride,
            weights_ctl,
            weights_bufs,
            weights_stride,
            snapshots,
            snapshot_stride,
            fields,
            total_len,
            hash: 0,
        };
        layout.hash = layout.compute_hash();
        Ok(layout)
    }

    /// FNV-1a over everything that affects offsets, plus the ABI version.
    fn compute_hash(&self) -> u64 {
        let mut h = Fnv::new();
        h.u64(crate::consts::ABI_VERSION as u64);
        let p = &self.params;
        for v in [
            p.n_workers,
            p.envs_per_worker,
            p.steps,
            p.slots_per_worker,
            p.weights_capacity,
            p.weight_buffers,
            p.mailbox_bytes,
            p.snapshot_bytes,
            p.fields.len(),
        ] {
            h.u64(v as u64);
        }
        for f in &p.fields {
            h.bytes(f.name.as_bytes());
            h.u64(f.dtype.code() as u64);
            h.u64(f.shape.len() as u64);
            for &d in &f.shape {
                h.u64(d as u64);
            }
        }
        for v in [
            self.global_ctl,
            self.worker_ctl,
            self.data_rings,
            self.data_ring_stride,
            self.step_channels,
            self.step_stride,
            self.weights_ctl,
            self.weights_bufs,
            self.weights_stride,
            self.snapshots,
            self.snapshot_stride,
            self.total_len,
            WORKER_CTL_SIZE,
            RING_CTL_SIZE,
            SLOT_HEADER_SIZE,
            STEP_CTL_SIZE,
        ] {
            h.u64(v as u64);
        }
        for f in &self.fields {
            h.u64(f.offset as u64);
            h.u64(f.per_worker as u64);
        }
        h.0
    }

    /// The parameters this layout was built from.
    pub fn params(&self) -> &LayoutParams {
        &self.params
    }

    /// Stable hash of the layout (equal layouts hash equally in every process and build).
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// Bytes of the whole segment.
    pub fn total_len(&self) -> usize {
        self.total_len
    }

    /// Number of workers.
    pub fn n_workers(&self) -> usize {
        self.params.n_workers
    }

    /// Index of the field called `name`.
    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.params.fields.iter().position(|f| f.name == name)
    }

    /// The spec and placement of field `field`.
    pub fn field(&self, field: usize) -> (&Field, FieldLayout) {
        (&self.params.fields[field], self.fields[field])
    }

    /// Offset of worker `worker`'s `[K][T][*shape]` block of `field` in slot `slot`.
    ///
    /// Panics when an index is out of range (an index bug, not a data condition).
    pub fn field_offset(&self, field: usize, slot: usize, worker: usize) -> usize {
        let p = &self.params;
        assert!(
            slot < p.slots_per_worker,
            "slot {slot} out of range ({})",
            p.slots_per_worker
        );
        assert!(
            worker < p.n_workers,
            "worker {worker} out of range ({})",
            p.n_workers
        );
        let f = self.fields[field];
        f.offset + (slot * p.n_workers + worker) * f.per_worker
    }

    /// `(offset, len)` of slot `slot` of `field` across all workers: one contiguous
    /// `[n_workers*K, T, *shape]` block.
    pub fn field_block(&self, field: usize, slot: usize) -> (usize, usize) {
        let f = self.fields[field];
        let len = f.per_worker * self.params.n_workers;
        (self.field_offset(field, slot, 0), len)
    }

    /// Offset of the global control region.
    pub fn global_ctl_offset(&self) -> usize {
        self.global_ctl
    }

    /// Offset of worker `w`'s control block.
    pub fn worker_ctl_offset(&self, w: usize) -> usize {
        assert!(w < self.params.n_workers, "worker {w} out of range");
        self.worker_ctl + w * WORKER_CTL_SIZE
    }

    /// Offset of worker `w`'s data ring (RingCtl, then slot headers).
    pub fn data_ring_offset(&self, w: usize) -> usize {
        assert!(w < self.params.n_workers, "worker {w} out of range");
        self.data_rings + w * self.data_ring_stride
    }

    /// End of the control part of the segment (header, global control, worker control blocks
    /// and data rings): what a [`Watch`](crate::watch::Watch) maps.
    pub fn control_end(&self) -> usize {
        self.data_rings + self.params.n_workers * self.data_ring_stride
    }

    /// Whether the segment has step channels (`mailbox_bytes > 0`).
    pub fn has_step_channels(&self) -> bool {
        self.params.mailbox_bytes > 0
    }

    /// Offset of worker `w`'s step channel (its `StepCtl`); `None` without step channels.
    pub fn step_channel_offset(&self, w: usize) -> Option<usize> {
        assert!(w < self.params.n_workers, "worker {w} out of range");
        if !self.has_step_channels() {
            return None;
        }
        Some(self.step_channels + w * self.step_stride)
    }

    /// Offsets of worker `w`'s request and response mailbox areas (`mailbox_bytes` each);
    /// `None` without step channels.
    pub fn mailbox_offsets(&self, w: usize) -> Option<(usize, usize)> {
        let ctl = self.step_channel_offset(w)?;
        let half = round_up(self.params.mailbox_bytes, LINE)?;
        Some((ctl + STEP_CTL_SIZE, ctl + STEP_CTL_SIZE + half))
    }

    /// Offset of the snapshot area of worker `w`'s slot `slot` (its length word, then
    /// `snapshot_bytes` bytes); `None` without snapshots.
    pub fn snapshot_offset(&self, w: usize, slot: usize) -> Option<usize> {
        assert!(w < self.params.n_workers, "worker {w} out of range");
        assert!(
            slot < self.params.slots_per_worker,
            "slot {slot} out of range"
        );
        if self.params.snapshot_bytes == 0 {
            return None;
        }
        Some(self.snapshots + (w * self.params.slots_per_worker + slot) * self.snapshot_stride)
    }

    /// Offset of the weights control words (latest line, lens, pins).
    pub fn weights_ctl_offset(&self) -> usize {
        self.weights_ctl
    }

    /// Offset of the first weights buffer and the distance between buffers.
    pub fn weights_buffers(&self) -> (usize, usize) {
        (self.weights_bufs, self.weights_stride)
    }
}

/// 64-bit FNV-1a (stable across builds and platforms, unlike `DefaultHasher`).
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= u64::from(x);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // Terminate variable-length input so ("ab","c") and ("a","bc") differ.
        self.u64(b.len() as u64);
    }
    fn u64(&mut self, v: u64) {
        for x in v.to_le_bytes() {
            self.0 ^= u64::from(x);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn params() -> LayoutParams {
        LayoutParams::new(
            vec![
                Field::new("observation", DType::F32, &[4]),
                Field::new("reward", DType::F32, &[]),
                Field::new("done", DType::Bool, &[]),
            ],
            3,
            8,
            16,
            4,
        )
        .with_weights(10_000, 3)
    }

    #[test]
    fn sync_batch_is_one_block() {
        let l = Layout::new(params()).unwrap();
        let obs = l.field_index("observation").unwrap();
        let (off, len) = l.field_block(obs, 2);
        assert_eq!(len, 3 * 8 * 16 * 4 * 4);
        assert_eq!(off, l.field_offset(obs, 2, 0));
        assert_eq!(l.field_offset(obs, 2, 1), off + len / 3);
        assert_eq!(l.field_offset(obs, 3, 0), off + len);
        assert_eq!(l.field(obs).1.offset % REGION_ALIGN, 0);
    }

    #[test]
    fn errors_name_the_value() {
        let mut p = params();
        p.slots_per_worker = 6;
        let e = Layout::new(p).unwrap_err();
        assert_eq!(
            e.to_string(),
            "slots_per_worker must be a power of two, got 6"
        );
        let mut p = params();
        p.steps = 0;
        assert_eq!(Layout::new(p).unwrap_err(), LayoutError::Zero("steps"));
        let mut p = params();
        p.fields[1].shape = vec![usize::MAX, usize::MAX];
        assert!(matches!(
            Layout::new(p).unwrap_err(),
            LayoutError::Overflow(_)
        ));
        let mut p = params();
        p.fields[2].name = "observation".into();
        let e = Layout::new(p).unwrap_err();
        assert_eq!(e.to_string(), "bad field name \"observation\": used twice");
        let mut p = params();
        p.fields[0].shape = vec![3, 0];
        assert!(Layout::new(p).unwrap_err().to_string().contains("[3, 0]"));
    }

    #[test]
    fn hash_is_stable_and_sensitive() {
        let a = Layout::new(params()).unwrap();
        let b = Layout::new(params()).unwrap();
        assert_eq!(a.hash(), b.hash());
        let mut p = params();
        p.fields[0].dtype = DType::F64;
        assert_ne!(a.hash(), Layout::new(p).unwrap().hash());
    }

    #[test]
    fn mailbox_bytes_grow_the_segment_only_when_set() {
        let plain = Layout::new(params()).unwrap();
        let zero = Layout::new(params().with_mailbox(0)).unwrap();
        assert_eq!(plain, zero);
        assert!(!plain.has_step_channels());
        assert_eq!(plain.mailbox_offsets(0), None);
        let with = Layout::new(params().with_mailbox(1000)).unwrap();
        assert_ne!(with.hash(), plain.hash());
        // 3 workers × (384 B of control + 2 × 1024 B of mailbox, rounded to 4 KiB).
        assert_eq!(with.total_len(), plain.total_len() + 3 * REGION_ALIGN);
        let bigger = Layout::new(params().with_mailbox(1001)).unwrap();
        assert_ne!(bigger.hash(), with.hash());
        let (req, resp) = with.mailbox_offsets(2).unwrap();
        assert_eq!(with.step_channel_offset(2).unwrap() + STEP_CTL_SIZE, req);
        assert_eq!(resp, req + 1024);
        let mut p = params().with_mailbox(usize::MAX / 2);
        p.n_workers = 1;
        assert!(matches!(Layout::new(p), Err(LayoutError::Overflow(_))));
    }

    #[test]
    fn dtype_codes_round_trip() {
        for d in ALL_DTYPES {
            assert_eq!(DType::from_code(d.code()), Some(d));
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_code(0), None);
    }

    proptest! {
        #[test]
        fn regions_aligned_and_disjoint(
            n_workers in 1usize..5, k in 1usize..5, t in 1usize..9, slots_log in 0u32..4,
            dims in proptest::collection::vec(proptest::collection::vec(1usize..4, 0..3), 1..4),
            wcap in 0usize..20_000,
            mailbox in prop_oneof![Just(0usize), 1usize..10_000],
            snapshot in prop_oneof![Just(0usize), 1usize..10_000],
        ) {
            let fields = dims.iter().enumerate()
                .map(|(i, s)| Field::new(format!("f{i}"), ALL_DTYPES[i % 13], s))
                .collect();
            let p = LayoutParams::new(fields, n_workers, k, t, 1 << slots_log)
                .with_weights(wcap, 3)
                .with_mailbox(mailbox)
                .with_snapshots(snapshot);
            let l = Layout::new(p).unwrap();
            let mut regions = vec![
                (l.global_ctl, GLOBAL_CTL_SIZE),
                (l.worker_ctl, WORKER_CTL_SIZE * n_workers),
                (l.data_rings, l.data_ring_stride * n_workers),
                (l.step_channels, l.step_stride * n_workers),
                (l.weights_ctl, LINE),
                (l.weights_bufs, l.weights_stride * 3),
                (l.snapshots, l.snapshot_stride * n_workers * (1 << slots_log)),
            ];
            regions.extend(l.fields.iter().map(|f| (f.offset, f.len)));
            regions.sort();
            let mut end = HEADER_FIXED + MAX_FIELDS * FIELD_RECORD;
            for (off, len) in regions {
                prop_assert_eq!(off % REGION_ALIGN, 0);
                prop_assert!(off >= end);
                end = off + len;
            }
            prop_assert!(end <= l.total_len());
            prop_assert_eq!(l.total_len() % REGION_ALIGN, 0);
            // Each worker's channel: its own 4 KiB boundary, both halves inside its stride.
            for w in 0..n_workers {
                match l.mailbox_offsets(w) {
                    None => prop_assert_eq!(mailbox, 0),
                    Some((req, resp)) => {
                        let ctl = l.step_channel_offset(w).unwrap();
                        prop_assert_eq!(ctl % REGION_ALIGN, 0);
                        prop_assert!(req >= ctl + STEP_CTL_SIZE && resp >= req + mailbox);
                        prop_assert!(resp + mailbox <= ctl + l.step_stride);
                        prop_assert_eq!(req % LINE, 0);
                        prop_assert_eq!(resp % LINE, 0);
                    }
                }
            }
        }
    }
}

//! Sizes and limits of a segment: the constants every layer of the crate may need.
//!
//! A module that imports nothing, at the bottom, so that a record's size assertion (beside the
//! record: `ring`, `exchange`, `worker`, ...) and the layout computation (`layout`) name the same
//! numbers without importing each other. `layout`, `header` and `weights` re-export what is theirs.

/// Alignment of every region.
pub const REGION_ALIGN: usize = 4096;
/// Size of one hot line (see `sync::Padded`).
pub const LINE: usize = 128;
/// Most fields a layout may have.
pub const MAX_FIELDS: usize = 64;
/// Longest field name in bytes (UTF-8, stored NUL-padded in the header).
pub const MAX_NAME_LEN: usize = 63;
/// Most dimensions in a field's per-step shape.
pub const MAX_DIMS: usize = 6;
/// Bytes reserved for a worker's error text (a Python traceback).
pub const ERROR_TEXT_CAP: usize = 8192;
/// Bytes of the fixed part of the segment header.
pub const HEADER_FIXED: usize = 256;
/// Bytes per field-table record in the header.
pub const FIELD_RECORD: usize = 128;
/// Bytes of the global control region: doorbell, shutdown flag, trainer heartbeat and a
/// spare line, then the trainer's metrics (three lines).
pub const GLOBAL_CTL_SIZE: usize = 7 * LINE;
/// Offset of the trainer's metrics inside the global control region.
pub const TRAINER_METRICS_OFFSET: usize = 4 * LINE;
/// Bytes of one worker control block (4 KiB of control lines + the error text).
pub const WORKER_CTL_SIZE: usize = REGION_ALIGN + ERROR_TEXT_CAP;
/// Offset of the error text inside a worker control block.
pub const WORKER_ERROR_TEXT_OFFSET: usize = REGION_ALIGN;
/// Bytes of a ring's control words (tail, head, space bell lines).
pub const RING_CTL_SIZE: usize = 3 * LINE;
/// Bytes of one slot header.
pub const SLOT_HEADER_SIZE: usize = 64;
/// Bytes of a step channel's control words (request, response and bell lines).
pub const STEP_CTL_SIZE: usize = 3 * LINE;
/// Bytes before a snapshot's own bytes: its length (a u64), padded to a line.
pub const SNAPSHOT_HEADER: usize = LINE;
/// Default number of weight buffers (triple buffering).
pub const DEFAULT_WEIGHT_BUFFERS: usize = 3;

/// Most buffers a weights store may have (the buffer index lives in the low 8 bits of `latest`).
pub const MAX_BUFFERS: usize = 255;
/// Bumped whenever the meaning of any byte in the segment changes.
pub const ABI_VERSION: u32 = 4;

//! The native stepper: where an env's step result is stored without Python in the common case.
//!
//! * [`group`]: `GroupStepper`, the one stepper: envs with gymnasium's autoreset semantics
//!   and their info fields, into a vector env's rows (`pycollect._steps.group`) or a rollout's
//!   `[K, T]` arrays (`pycollect._rollout.runner`), and the step worker's request loop.
//! * [`actions`]: `ActionWriter`, a batch of actions checked and written in one pass.
//! * [`recorder`]: `StepRecorder`, a group's rows of a vector env's step results stored as a
//!   rollout's step column (the central engine's per-step storing).
//!
//! [`arrays`], [`observation`], [`result`] and [`infos`] are what they share: reading numpy
//! objects, storing observation leaves, reading a step result, storing info entries.

mod actions;
mod arrays;
mod group;
mod infos;
mod observation;
mod recorder;
mod result;

pub use actions::ActionWriter;
pub use group::{GroupStepper, AUTORESET_DISABLED, AUTORESET_NEXT_STEP, AUTORESET_SAME_STEP};
pub use recorder::StepRecorder;

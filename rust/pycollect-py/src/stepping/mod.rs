//! Native steppers: where an env's step result is stored without Python in the common case.
//!
//! * [`rollout`]: `EnvStepper`, one step of a rollout's envs into `[K, T]` arrays (the
//!   collector's stepping loop, `pycollect._rollout.runner`).
//! * [`group`]: `GroupStepper`, a vector env's envs with gymnasium's autoreset semantics and
//!   their info fields (`pycollect._steps.group`), and the step worker's request loop.
//! * [`actions`]: `ActionWriter`, a batch of actions checked and written in one pass.
//!
//! [`arrays`], [`observation`], [`result`] and [`infos`] are what they share: reading numpy
//! objects, storing observation leaves, reading a step result, storing info entries.

mod actions;
mod arrays;
mod group;
mod infos;
mod observation;
mod result;
mod rollout;

pub use actions::ActionWriter;
pub use group::GroupStepper;
pub use rollout::EnvStepper;

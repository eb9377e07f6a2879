//! `GroupStepper`: `K` envs stepped with gymnasium's autoreset semantics, the common case
//! natively; and `serve`, a step worker's request loop around it.
//!
//! It is pycollect's one native stepper: a vector env's group steps into `[K]` rows
//! (`pycollect._steps.group.EnvGroup`), and a collector's rollout into the `[K, T]` arrays of
//! a rollout, one column `t` per step (`pycollect._rollout.runner`, in `DISABLED` mode with the
//! rollout's trajectory limit as `max_episode_steps`: the rollout resets ended envs itself).
//!
//! Per env it does what `gymnasium.vector.SyncVectorEnv` does in each autoreset mode (and what
//! `pycollect._steps.group.EnvGroup`, its Python side, does for the envs it hands back):
//!
//! * `NEXT_STEP`: an env whose episode ended at its last step is reset instead of stepped
//!   (`reset()` without arguments, its action ignored, reward 0, flags False).
//! * `SAME_STEP`: an env whose episode ends (or reaches `max_episode_steps`, which truncates
//!   it) is reset in the same step; the observation it ended with goes into the final rows and
//!   its info into the final info fields.
//! * `DISABLED`: never reset here (stepping an env that ended is refused by the Python side);
//!   an env that reaches `max_episode_steps` is truncated and flagged as ended, like any end.
//!
//! Where a result is the common case (a 5-tuple, or a 2-tuple for a reset, whose observation
//! the [`Observations`] store takes, a `float` reward, `bool` flags and an info the
//! [`InfoFields`] take) it is written into the group's rows; otherwise the env's remaining
//! work is handed back to Python with the raw result, which Python checks and stores. The
//! envs' `ended` flags and episode `lengths` live in arrays both sides share.

use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple, PyType};

use super::arrays::Export;
use super::infos::{InfoFieldArgs, InfoFields, Plan, Target};
use super::observation::{LeafLayout, Observations, Sources};
use super::result::common_step;
use crate::blocking::{wait_sliced, Slice};
use crate::control::WorkerControl;
use crate::errors::{config_error, py_err};
use crate::exchange::StepChannel;
use pycollect_core::exchange::{CMD_STEP, STATUS_OK};
use pycollect_core::worker::monotonic_ns;
use pycollect_core::{step_wait_policy, Waited};

/// An env whose step Python finishes: the raw `step` result, nothing of it stored.
pub(crate) const LEFT_STEPPED: u8 = 0;
/// An env reset at the start of a `NEXT_STEP` step whose raw `reset` result Python stores.
pub(crate) const LEFT_RESET: u8 = 1;
/// An env whose episode ended in `SAME_STEP` mode, its step stored (final rows, final info,
/// reward, flags), whose raw `reset` result Python stores.
pub(crate) const LEFT_ENDED_RESET: u8 = 2;

/// What `step` hands back: `(env, LEFT_*, raw result)`, in env order.
type Left = Vec<(usize, u8, Py<PyAny>)>;

/// The status a worker answers a request for another generation with (`step_protocol.NOT_MINE`).
const STATUS_NOT_MINE: u32 = 3;

/// The autoreset modes as the constructor takes them (`_core.AUTORESET_*`).
pub const AUTORESET_NEXT_STEP: u8 = 0;
pub const AUTORESET_SAME_STEP: u8 = 1;
pub const AUTORESET_DISABLED: u8 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    NextStep,
    SameStep,
    Disabled,
}

/// One leaf as the constructor takes it: `(path, shape, dtype, itemsize)`.
type LeafArgs = (Vec<Py<PyAny>>, Vec<isize>, Py<PyAny>, isize);

/// What a [`GroupStepper`] is built from, read attribute by attribute from one Python object
/// (`pycollect._steps.stepper.StepperSpec`), so that both of its users describe it the same
/// way. The constructor's docs say what each attribute holds.
#[derive(FromPyObject)]
struct StepperSpec<'py> {
    steps: Vec<Py<PyAny>>,
    resets: Vec<Py<PyAny>>,
    leaves: Vec<LeafArgs>,
    rows: Vec<Bound<'py, PyAny>>,
    finals: Option<Vec<Bound<'py, PyAny>>>,
    ndarray: Py<PyType>,
    rewards: Bound<'py, PyAny>,
    terminated: Bound<'py, PyAny>,
    truncated: Bound<'py, PyAny>,
    ended: Bound<'py, PyAny>,
    lengths: Bound<'py, PyAny>,
    mode: u8,
    max_episode_steps: Option<i64>,
    info_keys: Option<Vec<Py<PyString>>>,
    info_fields: Vec<InfoFieldArgs<'py>>,
    steps_per_row: usize,
}

/// `K` envs, stepped into the rows given (see the module docs).
///
/// Every per-step array has `T` columns (`steps_per_row`; a vector env's group has one): env
/// `env`'s frame at step column `t` is frame `env * T + t` of its leaf's rows, and its reward
/// and flags are element `t * K + env` of theirs (a rollout's `[T, K]` layout). `ended`,
/// `lengths` and the info fields hold one value per env.
#[derive(Debug)]
#[pyclass(module = "pycollect._core")]
pub struct GroupStepper {
    steps: Vec<Py<PyAny>>,
    resets: Vec<Py<PyAny>>,
    observations: Observations,
    /// `[K, T, *shape]` per leaf: the observations (after a `SAME_STEP` end, the reset one).
    rows: Vec<Export>,
    /// `[K, T, *shape]` per leaf, `SAME_STEP` mode: the observations episodes ended with.
    finals: Option<Vec<Export>>,
    /// `[T, K]` float64 and bools.
    rewards: Export,
    terminated: Export,
    truncated: Export,
    /// `[K]` bool, shared with Python: the env's episode ended at its last step (`NEXT_STEP`:
    /// reset it next; `DISABLED`: refuse to step it).
    ended: Export,
    /// `[K]` int64, shared with Python: steps since the env's last reset (counted only with a
    /// `max_episode_steps`).
    lengths: Export,
    mode: Mode,
    max_episode_steps: Option<i64>,
    infos: InfoFields,
    /// `T`: the step columns of every per-step array.
    steps_per_row: usize,
}

/// What a step result holds, checked: the observation's leaves, reward, flags and info plan.
struct StepParts<'py> {
    sources: Sources<'py>,
    reward: f64,
    terminated: bool,
    truncated: bool,
    plan: Plan<'py>,
}

impl GroupStepper {
    fn count(&self) -> usize {
        self.steps.len()
    }

    /// Env `env`'s frame at column `t` of the rows (`env < K`, `t < T`).
    fn frame(&self, env: usize, t: usize) -> usize {
        env * self.steps_per_row + t
    }

    /// Bool `index` of `export`: an env's (`ended`, `[K]`) or a cell's (`[T, K]` flags).
    fn flag(export: &Export, index: usize) -> bool {
        // SAFETY: every caller passes `env < K` for a `[K]` export or `t * K + env < T * K`
        // for a `[T, K]` one (its loop bounds, `t < T` checked in `step_range`), and `new`
        // checked each export's size.
        unsafe { export.ptr().add(index).read() != 0 }
    }

    fn set_flag(export: &Export, index: usize, value: bool) {
        // SAFETY: as for `flag`.
        unsafe { export.ptr().add(index).write(u8::from(value)) }
    }

    /// Steps env `env` took since its last reset.
    fn length(&self, env: usize) -> i64 {
        // SAFETY: `env < K` (every caller's loop bound) and the export holds `K` int64s
        // (checked in `new`); unaligned reads make no assumption about alignment.
        unsafe { (self.lengths.ptr() as *const i64).add(env).read_unaligned() }
    }

    fn set_length(&self, env: usize, length: i64) {
        // SAFETY: as for `length`.
        unsafe {
            (self.lengths.ptr() as *mut i64)
                .add(env)
                .write_unaligned(length)
        }
    }

    /// A `step` result's parts, if it is the common case.
    fn step_parts<'py>(&self, result: &Bound<'py, PyAny>) -> PyResult<Option<StepParts<'py>>> {
        let Some(step) = common_step(&self.observations, result)? else {
            return Ok(None);
        };
        let Some(plan) = self.infos.plan(&step.info) else {
            return Ok(None);
        };
        Ok(Some(StepParts {
            sources: step.sources,
            reward: step.reward,
            terminated: step.terminated,
            truncated: step.truncated,
            plan,
        }))
    }

    /// A `reset` result's observation leaves and info plan, if it is the common case.
    fn reset_parts<'py>(
        &self,
        result: &Bound<'py, PyAny>,
    ) -> PyResult<Option<(Sources<'py>, Plan<'py>)>> {
        let Ok(tuple) = result.cast::<PyTuple>() else {
            return Ok(None);
        };
        if tuple.len() != 2 {
            return Ok(None);
        }
        let Some(sources) = self.observations.sources(&tuple.get_item(0)?) else {
            return Ok(None);
        };
        Ok(self
            .infos
            .plan(&tuple.get_item(1)?)
            .map(|plan| (sources, plan)))
    }

    /// Writes env `env`'s reward and flags at column `t`.
    fn write_step(&self, env: usize, t: usize, reward: f64, terminated: bool, truncated: bool) {
        let cell = t * self.count() + env;
        // SAFETY: `env < K` and `t < T` (every caller's bounds), and the exports hold `T * K`
        // float64 and bools (checked in `new`).
        unsafe {
            (self.rewards.ptr() as *mut f64)
                .add(cell)
                .write_unaligned(reward)
        };
        Self::set_flag(&self.terminated, cell, terminated);
        Self::set_flag(&self.truncated, cell, truncated);
    }

    /// Resets env `env` and stores what the reset returned at column `t`, or hands it back as
    /// `kind`.
    fn reset_env(
        &self,
        py: Python<'_>,
        env: usize,
        t: usize,
        kind: u8,
        left: &mut Left,
    ) -> PyResult<()> {
        let raw = self.resets[env].bind(py).call0()?;
        match self.reset_parts(&raw)? {
            Some((sources, plan)) => {
                // SAFETY: `env < K` and `t < T`, and every row export holds `K * T` frames
                // (checked in `new`).
                unsafe {
                    self.observations
                        .copy(&sources, &self.rows, self.frame(env, t))
                };
                self.infos.write(&plan, Target::Info, env)?;
            }
            None => left.push((env, kind, raw.unbind())),
        }
        Ok(())
    }

    /// One env's part of a step at column `t` (see the module docs).
    fn step_env(
        &self,
        py: Python<'_>,
        env: usize,
        t: usize,
        action: &Bound<'_, PyAny>,
        left: &mut Left,
    ) -> PyResult<()> {
        self.infos.clear(env);
        if self.mode == Mode::NextStep && Self::flag(&self.ended, env) {
            self.write_step(env, t, 0.0, false, false);
            Self::set_flag(&self.ended, env, false);
            self.set_length(env, 0);
            return self.reset_env(py, env, t, LEFT_RESET, left);
        }
        let mut due = false;
        if let Some(limit) = self.max_episode_steps {
            let length = self.length(env) + 1;
            self.set_length(env, length);
            due = length >= limit;
        }
        let raw = self.steps[env].bind(py).call1((action,))?;
        let Some(parts) = self.step_parts(&raw)? else {
            left.push((env, LEFT_STEPPED, raw.unbind()));
            return Ok(());
        };
        let truncated = parts.truncated || due;
        let ends = parts.terminated || truncated;
        self.write_step(env, t, parts.reward, parts.terminated, truncated);
        let frame = self.frame(env, t);
        if self.mode == Mode::SameStep && ends {
            let finals = self
                .finals
                .as_ref()
                .ok_or_else(|| config_error("SAME_STEP without final rows"))?;
            // SAFETY: `env < K` and `t < T`, and every final row export holds `K * T` frames
            // (checked in `new`).
            unsafe { self.observations.copy(&parts.sources, finals, frame) };
            self.infos.write(&parts.plan, Target::Final, env)?;
            self.set_length(env, 0);
            return self.reset_env(py, env, t, LEFT_ENDED_RESET, left);
        }
        // SAFETY: `env < K` and `t < T`, and every row export holds `K * T` frames (checked in
        // `new`).
        unsafe { self.observations.copy(&parts.sources, &self.rows, frame) };
        self.infos.write(&parts.plan, Target::Info, env)?;
        if ends && self.mode != Mode::SameStep {
            Self::set_flag(&self.ended, env, true);
        }
        Ok(())
    }

    /// Steps envs `start..stop` with `actions` (one per env of the range) at column `t`; see
    /// `step`.
    fn step_range(
        &self,
        py: Python<'_>,
        actions: &Bound<'_, PyAny>,
        start: usize,
        stop: usize,
        t: usize,
    ) -> PyResult<Left> {
        if start > stop || stop > self.count() {
            return Err(config_error(format!(
                "envs {start}..{stop} of a group of {} envs",
                self.count()
            )));
        }
        if t >= self.steps_per_row {
            return Err(config_error(format!(
                "step column {t} of arrays with {} columns",
                self.steps_per_row
            )));
        }
        let mut left = Vec::new();
        let mut actions = actions.try_iter()?;
        for env in start..stop {
            let Some(action) = actions.next().transpose()? else {
                return Err(config_error(format!(
                    "{} actions for envs {start}..{stop}",
                    env - start
                )));
            };
            self.step_env(py, env, t, &action, &mut left)?;
        }
        Ok(left)
    }

    /// Whether any env of `start..stop` ended and was not reset (`DISABLED` refuses to step it).
    fn any_ended(&self, start: usize, stop: usize) -> bool {
        (start..stop).any(|env| Self::flag(&self.ended, env))
    }
}

/// The envs of a STEP request: all (empty payload) or the range in its 8 bytes (`start`,
/// `stop`, little-endian u32s; the central engine's groups).
fn request_range(payload: &[u8], count: usize) -> PyResult<(usize, usize)> {
    match payload.len() {
        0 => Ok((0, count)),
        8 => {
            let word = |at: usize| {
                u32::from_le_bytes([
                    payload[at],
                    payload[at + 1],
                    payload[at + 2],
                    payload[at + 3],
                ]) as usize
            };
            Ok((word(0), word(4)))
        }
        n => Err(config_error(format!(
            "a STEP request's payload of {n} bytes: 0 or 8 expected"
        ))),
    }
}

/// A request `serve` leaves to Python: `(seq, command, arg, payload, left)`; `left` is `None`
/// when nothing was stepped, else what the step left (see `step`).
type Handed<'py> = (u64, u32, u64, Bound<'py, PyBytes>, Option<Left>);

#[pymethods]
impl GroupStepper {
    /// Binds `K` envs (their `step` and `reset` methods) to the arrays they are stepped into,
    /// all of it the attributes of `spec` (a [`StepperSpec`]).
    ///
    /// `leaves`: `(path, shape, dtype, itemsize)` per observation leaf, `path` the `dict` keys
    /// and `tuple` indices that lead to it (empty: the observation itself); `rows` (and
    /// `finals`, exactly in `SAME_STEP` mode) one writable C-contiguous `[K, T, *shape]` array
    /// per leaf. `rewards` float64, `terminated` and `truncated` bool, each `[T, K]`; `ended`
    /// bool and `lengths` int64, each `[K]`. `T` is `steps_per_row` (default 1). `mode`: one of
    /// the `AUTORESET_*` codes. `info_keys`: the entries kept (`None`: all);
    /// `info_fields`: `(key, kind, type or dtype, shape, itemsize, values, mask, final values,
    /// final mask)` per field, each `[K]` (they hold the entries of an env's latest step).
    #[new]
    fn new(py: Python<'_>, spec: StepperSpec<'_>) -> PyResult<Self> {
        let StepperSpec {
            steps,
            resets,
            leaves,
            rows,
            finals,
            ndarray,
            rewards,
            terminated,
            truncated,
            ended,
            lengths,
            mode,
            max_episode_steps,
            info_keys,
            info_fields,
            steps_per_row,
        } = spec;
        let (rewards, terminated, truncated, ended, lengths) =
            (&rewards, &terminated, &truncated, &ended, &lengths);
        let count = steps.len();
        if steps_per_row == 0 {
            return Err(config_error("steps_per_row must be positive"));
        }
        let cells = count * steps_per_row;
        if resets.len() != count {
            return Err(config_error(format!(
                "{} resets for {count} envs",
                resets.len()
            )));
        }
        let mode = match mode {
            AUTORESET_NEXT_STEP => Mode::NextStep,
            AUTORESET_SAME_STEP => Mode::SameStep,
            AUTORESET_DISABLED => Mode::Disabled,
            other => return Err(config_error(format!("unknown autoreset mode {other}"))),
        };
        if max_episode_steps.is_some() && mode == Mode::NextStep {
            return Err(config_error(
                "max_episode_steps is for SAME_STEP and DISABLED modes only",
            ));
        }
        if max_episode_steps.is_some_and(|limit| limit < 1) {
            return Err(config_error("max_episode_steps must be positive"));
        }
        let layouts = leaves
            .into_iter()
            .enumerate()
            .map(|(n, (path, shape, dtype, itemsize))| {
                LeafLayout::new(n, path, shape, dtype, itemsize)
            })
            .collect::<PyResult<Vec<_>>>()?;
        let observations = Observations::new(py, layouts, ndarray.clone_ref(py))?;
        let export_rows = |what: &str, arrays: &[Bound<'_, PyAny>]| -> PyResult<Vec<Export>> {
            if arrays.len() != observations.leaves.len() {
                return Err(config_error(format!(
                    "{what}: {} arrays for {} observation leaves",
                    arrays.len(),
                    observations.leaves.len()
                )));
            }
            arrays
                .iter()
                .zip(&observations.leaves)
                .enumerate()
                .map(|(n, (array, leaf))| {
                    Export::writable(
                        &format!("{what} of leaf {n}"),
                        array,
                        None,
                        leaf.frame_bytes * cells,
                        &format!(
                            "{count} envs x {steps_per_row} steps x {} bytes",
                            leaf.frame_bytes
                        ),
                    )
                })
                .collect()
        };
        let rows = export_rows("rows", &rows)?;
        let finals = match (mode, finals) {
            (Mode::SameStep, Some(finals)) => Some(export_rows("finals", &finals)?),
            (Mode::SameStep, None) => return Err(config_error("SAME_STEP mode needs final rows")),
            (_, None) => None,
            (_, Some(_)) => return Err(config_error("final rows are for SAME_STEP mode only")),
        };
        // Per step (`[T, K]`, `cells` elements) or per env (`[K]`, `count`).
        let flags = |name: &str,
                     array: &Bound<'_, PyAny>,
                     format: Option<&std::ffi::CStr>,
                     size: usize,
                     elements: usize| {
            Export::writable(
                name,
                array,
                format,
                size * elements,
                &format!("{elements} x {size} bytes"),
            )
        };
        let infos = InfoFields::new(
            info_keys,
            info_fields,
            count,
            mode == Mode::SameStep,
            ndarray,
        )?;
        Ok(Self {
            steps,
            resets,
            observations,
            rows,
            finals,
            rewards: flags("rewards", rewards, Some(c"d"), 8, cells)?,
            terminated: flags("terminated", terminated, Some(c"?"), 1, cells)?,
            truncated: flags("truncated", truncated, Some(c"?"), 1, cells)?,
            ended: flags("ended", ended, Some(c"?"), 1, count)?,
            // int64 is "l" or "q" as the platform names it: its size is what matters.
            lengths: flags("lengths", lengths, None, 8, count)?,
            mode,
            max_episode_steps,
            infos,
            steps_per_row,
        })
    }

    /// Steps envs `start..stop` (default: all) with `actions`, one per env of the range, in env
    /// order, into step column `t`, autoresetting as the mode says; each env's info fields are
    /// rewritten. An env whose episode ended (and was not reset here) gets its `ended` flag.
    ///
    /// Returns `None` when every env was stored, else `(env, kind, raw result)` for the envs
    /// Python finishes (kinds: 0 stepped, nothing stored; 1 a `NEXT_STEP` reset to store; 2 a
    /// `SAME_STEP` end stored, its reset to store), in env order.
    #[pyo3(signature = (actions, start = 0, stop = None, t = 0))]
    fn step(
        &self,
        py: Python<'_>,
        actions: &Bound<'_, PyAny>,
        start: usize,
        stop: Option<usize>,
        t: usize,
    ) -> PyResult<Option<Left>> {
        let left = self.step_range(py, actions, start, stop.unwrap_or(self.count()), t)?;
        Ok((!left.is_empty()).then_some(left))
    }

    /// The envs whose `ended` flag is set, in env order, their flags cleared: what a caller that
    /// resets ended envs itself (a rollout, `DISABLED` mode) takes after a step.
    fn take_ended(&self) -> Vec<usize> {
        let mut ended = Vec::new();
        for env in 0..self.count() {
            if Self::flag(&self.ended, env) {
                Self::set_flag(&self.ended, env, false);
                ended.push(env);
            }
        }
        ended
    }

    /// A step worker's request loop: serves the trainer's STEP requests natively until one
    /// needs Python, and returns it.
    ///
    /// Waits for requests on `channel` (GIL released, in slices: between them it beats
    /// `control`'s heartbeat and runs Python's signal handlers), answers a request meant for
    /// another generation than `generation` with NOT_MINE, and steps the envs of a STEP
    /// request (`actions(start, stop)` gives their actions): when every env was stored it
    /// answers OK with no payload itself and waits for the next. Returns `(served, handed)`:
    /// how many steps it answered, and the request left to Python (`(seq, command, arg,
    /// payload, left)`, `left` as `step` returns it, or `None` when nothing was stepped: any
    /// command but STEP, and a STEP of a `DISABLED` group with an env that ended), or `None`
    /// once the segment shuts down. With `metered`, each step's frames and time go into
    /// `control`'s metrics (pycollect.metrics).
    fn serve<'py>(
        &self,
        py: Python<'py>,
        channel: &Bound<'py, StepChannel>,
        control: &Bound<'py, WorkerControl>,
        generation: u64,
        actions: &Bound<'py, PyAny>,
        metered: bool,
    ) -> PyResult<(u64, Option<Handed<'py>>)> {
        if self.steps_per_row != 1 {
            return Err(config_error(format!(
                "a step worker's group answers into one row per env, not {}",
                self.steps_per_row
            )));
        }
        let channel = channel.get();
        let control = control.get();
        let mut last_wait = Duration::ZERO;
        let mut served = 0;
        loop {
            control.inner().beat(monotonic_ns());
            let (policy, began) = (step_wait_policy(last_wait), Instant::now());
            let got = wait_sliced(py, None, |slice_end| {
                match channel.with_worker(|w| {
                    w.wait_request(&policy, Some(slice_end), || channel.is_shutdown())
                }) {
                    Ok(Waited::Ready(request)) => Slice::Done(Ok(Some(request))),
                    Ok(Waited::Aborted) => Slice::Done(Ok(None)),
                    Ok(Waited::TimedOut) => {
                        control.inner().beat(monotonic_ns()); // waiting for the trainer is not a hang
                        Slice::Continue
                    }
                    Err(e) => Slice::Done(Err(e)),
                }
            })?;
            last_wait = began.elapsed();
            let Some(request) = got.transpose().map_err(py_err)?.flatten() else {
                return Ok((served, None));
            };
            control.inner().beat(monotonic_ns());
            let payload = channel
                .with_worker(|w| w.payload(&request))
                .map_err(py_err)?;
            if request.arg != generation {
                channel
                    .with_worker(|w| w.respond(STATUS_NOT_MINE, b""))
                    .map_err(py_err)?;
                continue;
            }
            let handed = |left: Option<Left>| -> (u64, Option<Handed<'py>>) {
                let bytes = PyBytes::new(py, &payload);
                (
                    served,
                    Some((request.seq, request.command, request.arg, bytes, left)),
                )
            };
            if request.command != CMD_STEP {
                return Ok(handed(None));
            }
            let (start, stop) = request_range(&payload, self.count())?;
            if self.mode == Mode::Disabled && self.any_ended(start, stop) {
                return Ok(handed(None));
            }
            let metrics = control.inner().metrics();
            if metered {
                metrics.set_frames_per_step((stop - start) as u64);
                metrics.begin_step(monotonic_ns()); // the time since the last answer was waiting
            }
            let step_actions = actions.call1((start, stop))?;
            let left = self.step_range(py, &step_actions, start, stop, 0);
            if metered {
                metrics.end_step(monotonic_ns());
            }
            let left = left?;
            if !left.is_empty() {
                return Ok(handed(Some(left)));
            }
            channel
                .with_worker(|w| w.respond(STATUS_OK, b""))
                .map_err(py_err)?;
            served += 1;
        }
    }
}

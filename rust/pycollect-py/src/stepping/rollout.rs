//! `EnvStepper`: one step of every environment of a rollout, with what each returns stored
//! natively.
//!
//! The stepping loop (`pycollect._rollout.runner`) spends most of its own time, for cheap
//! environments, on per-env bookkeeping around `env.step`: unpacking the result, checking its
//! types, and copying the observation into the rollout array. This does that part in Rust for
//! the common case: an observation the [`Observations`] store takes, a `float` reward and
//! `bool` flags. It is a strict subset of the Python path: for the envs it handles it writes
//! exactly what Python would write, it returns every other env with its step result for Python
//! to check and convert (so errors and conversions stay in one place), and it counts nothing:
//! step counts and the trajectory limit are Python's.

use pyo3::prelude::*;
use pyo3::types::PyType;

use super::arrays::Export;
use super::observation::{LeafLayout, Observations};
use super::result::common_step;
use crate::errors::config_error;

/// One leaf as the constructor takes it: `(path, frames, shape, dtype, itemsize)`.
type LeafArgs<'py> = (
    Vec<Py<PyAny>>,
    Bound<'py, PyAny>,
    Vec<isize>,
    Py<PyAny>,
    isize,
);

/// Steps `K` environments once per call and stores their results into a rollout.
///
/// Each observation leaf goes into its own `[K, T, *shape]` array; frame `(i, t)` is frame
/// `i * T + t` of it. Rewards (float64) and the two flags (bool) go into `[T, K]` arrays, at
/// element `t * K + i`.
#[derive(Debug)]
#[pyclass(module = "pycollect._core")]
pub struct EnvStepper {
    steps: Vec<Py<PyAny>>,
    observations: Observations,
    /// One `[K, T, *shape]` export per leaf.
    frames: Vec<Export>,
    /// `[T, K]` float64 rewards and bool flags of the rollout.
    rewards: Export,
    terminated: Export,
    truncated: Export,
    steps_per_row: usize,
}

impl EnvStepper {
    /// Stores env `env`'s step `result` at step `t` if it is the common case (a 5-tuple with an
    /// observation the store takes, a `float` reward, `bool` flags). Returns `None` if it was
    /// not (nothing written), else whether the step ended the env's episode (the flags are
    /// stored as they came: the trajectory limit is applied by the caller).
    fn store(&self, result: &Bound<'_, PyAny>, env: usize, t: usize) -> PyResult<Option<bool>> {
        let Some(step) = common_step(&self.observations, result)? else {
            return Ok(None);
        };
        // SAFETY: the exports were checked in `new` to hold `K * T` frames, and frame
        // `env * T + t` is one of them because `env < K` and `t < T` (checked by `step`).
        unsafe {
            self.observations
                .copy(&step.sources, &self.frames, env * self.steps_per_row + t)
        };
        let cell = t * self.steps.len() + env;
        let (reward, term, trunc) = (step.reward, step.terminated, step.truncated);
        // SAFETY: `cell < steps_per_row * K` (`step` checked `t`, and `env < K`), and the three
        // exports were checked in `new` to hold that many float64 and bool elements; unaligned
        // writes make no assumption about alignment.
        unsafe {
            (self.rewards.ptr() as *mut f64)
                .add(cell)
                .write_unaligned(reward);
            self.terminated.ptr().add(cell).write(u8::from(term));
            self.truncated.ptr().add(cell).write(u8::from(trunc));
        }
        Ok(Some(term || trunc))
    }
}

#[pymethods]
impl EnvStepper {
    /// Binds the envs' `step` methods to a rollout's arrays.
    ///
    /// `leaves` holds one `(path, frames, shape, dtype, itemsize)` per observation leaf, in
    /// any order: `path` the `dict` keys and `tuple` indices that lead to it (empty: the
    /// observation itself); `frames` its `("next", ...)` array, writable and C-contiguous, of
    /// `K * steps_per_row` frames, each of `shape` elements of the numpy dtype `dtype`
    /// (`itemsize` bytes each). `ndarray` is `numpy.ndarray`. `rewards` (float64),
    /// `terminated` and `truncated` (bool) are writable, C-contiguous `[steps_per_row, K]`.
    /// A rollout keeps no info unless asked (and then steps in Python): an info is not looked at.
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (steps, leaves, steps_per_row, ndarray, rewards, terminated, truncated))]
    fn new(
        py: Python<'_>,
        steps: Vec<Py<PyAny>>,
        leaves: Vec<LeafArgs<'_>>,
        steps_per_row: usize,
        ndarray: Py<PyType>,
        rewards: &Bound<'_, PyAny>,
        terminated: &Bound<'_, PyAny>,
        truncated: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let (envs, cells) = (steps.len(), steps.len() * steps_per_row);
        let expected =
            |bytes: usize| format!("{envs} envs x {steps_per_row} steps x {bytes} bytes");
        let mut layouts = Vec::with_capacity(leaves.len());
        let mut frames = Vec::with_capacity(leaves.len());
        for (n, (path, array, shape, dtype, itemsize)) in leaves.into_iter().enumerate() {
            let layout = LeafLayout::new(n, path, shape, dtype, itemsize)?;
            frames.push(Export::writable(
                &format!("frames of leaf {n}"),
                &array,
                None,
                layout.frame_bytes * cells,
                &expected(layout.frame_bytes),
            )?);
            layouts.push(layout);
        }
        let observations = Observations::new(py, layouts, ndarray)?;
        let rewards = Export::writable("rewards", rewards, Some(c"d"), 8 * cells, &expected(8))?;
        let terminated =
            Export::writable("terminated", terminated, Some(c"?"), cells, &expected(1))?;
        let truncated = Export::writable("truncated", truncated, Some(c"?"), cells, &expected(1))?;
        Ok(Self {
            steps,
            observations,
            frames,
            rewards,
            terminated,
            truncated,
            steps_per_row,
        })
    }

    /// Steps env `i` with `actions[i]`, for every env in order, at step `t` of the rollout.
    ///
    /// Stores the result of each env that returned the common case (see `store`). Returns the
    /// stored envs whose episode ended, and the others, each with its whole `step` result,
    /// unchecked: Python checks and stores those. Both in env order. Counts nothing and ends
    /// no trajectory.
    #[allow(clippy::type_complexity)]
    fn step(
        &self,
        py: Python<'_>,
        t: usize,
        actions: &Bound<'_, PyAny>,
    ) -> PyResult<(Vec<usize>, Vec<(usize, Py<PyAny>)>)> {
        if t >= self.steps_per_row {
            return Err(config_error(format!(
                "step {t} is outside a rollout of {} steps",
                self.steps_per_row
            )));
        }
        let (mut ended, mut left) = (Vec::new(), Vec::new());
        // Iterated, not indexed: the same objects (numpy scalars, or rows for array actions)
        // at less cost than an index lookup per env.
        let mut actions = actions.try_iter()?;
        for (i, step) in self.steps.iter().enumerate() {
            let Some(action) = actions.next().transpose()? else {
                return Err(config_error(format!(
                    "{i} actions for {} envs",
                    self.steps.len()
                )));
            };
            let result = step.bind(py).call1((action,))?;
            match self.store(&result, i, t)? {
                None => left.push((i, result.unbind())),
                Some(true) => ended.push(i),
                Some(false) => {}
            }
        }
        Ok((ended, left))
    }
}

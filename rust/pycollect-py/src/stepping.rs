//! `EnvStepper`: one step of every environment of a rollout, with what each returns stored
//! natively.
//!
//! The stepping loop (`pycollect._rollout.runner`) spends most of its own time, for cheap
//! environments, on per-env bookkeeping around `env.step`: unpacking the result, checking its
//! types, and copying the observation into the rollout array. This does that part in Rust for
//! the common case, an observation that is exactly a C-contiguous numpy array of the field's
//! dtype and shape, a `float` reward and `bool` flags. It is a strict subset of the Python
//! path: for the envs it handles it writes exactly what Python would write, it returns every
//! other env with its step result for Python to check and convert (so errors and conversions
//! stay in one place), and it counts nothing: step counts and the trajectory limit are
//! Python's.

use std::ffi::{c_char, CStr};
use std::ptr;

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyTuple, PyType};

use crate::errors::config_error;

/// A buffer export held for the stepper's lifetime, released on drop.
struct Export {
    view: ffi::Py_buffer,
}

impl Export {
    /// Exports `obj` with `flags`, or `None` (and no pending exception) if it cannot.
    fn get(obj: &Bound<'_, PyAny>, flags: std::ffi::c_int) -> Option<Self> {
        let mut view = ffi::Py_buffer::new();
        // SAFETY: `obj` is a live object (we hold the GIL through `Bound`) and `view` is a
        // valid, writable Py_buffer. On failure the buffer is untouched and an exception is
        // set, which we clear: the caller treats "cannot export" as "not the fast path".
        let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut view, flags) };
        if rc != 0 {
            // SAFETY: we hold the GIL; clearing the exception PyObject_GetBuffer set.
            unsafe { ffi::PyErr_Clear() };
            return None;
        }
        Some(Self { view })
    }

    fn bytes(&self) -> usize {
        self.view.len.max(0) as usize
    }
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export")
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl Drop for Export {
    fn drop(&mut self) {
        // SAFETY: `view` was filled by a successful PyObject_GetBuffer and is released once.
        // Exports live inside `EnvStepper` (unsendable, dropped with the GIL held) or on the
        // stack of a method that holds the GIL.
        unsafe { ffi::PyBuffer_Release(&mut self.view) };
    }
}

/// Steps `K` environments once per call and stores their results into a rollout.
///
/// The observation array is `[K, T, *shape]`, C-contiguous and writable; frame `(i, t)`
/// starts at byte `(i * T + t) * frame_bytes`. Rewards (float64) and the two flags (bool)
/// go into `[T, K]` arrays, at element `t * K + i`.
#[derive(Debug)]
#[pyclass(unsendable, module = "pycollect._core")]
pub struct EnvStepper {
    steps: Vec<Py<PyAny>>,
    frames: Export,
    /// `[T, K]` float64 rewards and bool flags of the rollout.
    rewards: Export,
    terminated: Export,
    truncated: Export,
    frame_bytes: usize,
    steps_per_row: usize,
    shape: Vec<isize>,
    /// The field's numpy dtype: an observation must have this very object as its dtype.
    dtype: Py<PyAny>,
    itemsize: isize,
    ndarray: Py<PyType>,
    /// Whether a result whose info is anything but an empty dict is left to Python (a vector
    /// env, whose infos are returned; a rollout keeps no info unless asked, and then steps in Python).
    empty_infos_only: bool,
}

/// Whether `info` is exactly a `dict` with no entries.
fn is_empty_dict(info: &Bound<'_, PyAny>) -> bool {
    info.cast_exact::<PyDict>()
        .is_ok_and(|dict| dict.is_empty())
}

impl EnvStepper {
    /// Stores env `env`'s step `result` at step `t` if it is the common case (a 5-tuple with an
    /// observation `store_frame` takes, a `float` reward, `bool` flags). Returns `None` if it
    /// was not (nothing written), else whether the step ended the env's episode (the flags
    /// are stored as they came: the trajectory limit is applied by the caller).
    fn store(&self, result: &Bound<'_, PyAny>, env: usize, t: usize) -> PyResult<Option<bool>> {
        let Ok(tuple) = result.cast::<PyTuple>() else {
            return Ok(None);
        };
        if tuple.len() != 5 {
            return Ok(None);
        }
        let (reward, term, trunc) = (tuple.get_item(1)?, tuple.get_item(2)?, tuple.get_item(3)?);
        if self.empty_infos_only && !is_empty_dict(&tuple.get_item(4)?) {
            return Ok(None);
        }
        if !(reward.is_exact_instance_of::<PyFloat>()
            && term.is_exact_instance_of::<PyBool>()
            && trunc.is_exact_instance_of::<PyBool>()
            && self.store_frame(&tuple.get_item(0)?, env, t))
        {
            return Ok(None);
        }
        let cell = t * self.steps.len() + env;
        let reward = reward.cast::<PyFloat>()?.value();
        let (term, trunc) = (term.is_truthy()?, trunc.is_truthy()?);
        // SAFETY: `cell < steps_per_row * K` (`step` checked `t`, and `env < K`), and the three
        // exports were checked in `new` to hold that many float64 and bool elements; unaligned
        // writes make no assumption about alignment.
        unsafe {
            (self.rewards.view.buf as *mut f64)
                .add(cell)
                .write_unaligned(reward);
            (self.terminated.view.buf as *mut u8)
                .add(cell)
                .write(u8::from(term));
            (self.truncated.view.buf as *mut u8)
                .add(cell)
                .write(u8::from(trunc));
        }
        Ok(Some(term || trunc))
    }

    /// Copies `obs` into frame `(env, t)` if it is exactly a `numpy.ndarray` whose dtype is the
    /// field's dtype object (the Python path's test) and whose shape is the field's,
    /// C-contiguous; returns whether it did.
    fn store_frame(&self, obs: &Bound<'_, PyAny>, env: usize, t: usize) -> bool {
        if !obs.get_type().is(self.ndarray.bind(obs.py())) {
            return false;
        }
        // The dtype object itself, as the Python path tests it: cheaper than asking numpy
        // for a buffer format string, which it builds anew for every fresh array.
        match obs.getattr(intern!(obs.py(), "dtype")) {
            Ok(dtype) if dtype.is(self.dtype.bind(obs.py())) => {}
            _ => return false,
        }
        let Some(source) = Export::get(obs, ffi::PyBUF_C_CONTIGUOUS) else {
            return false;
        };
        let view = &source.view;
        if view.itemsize != self.itemsize
            || source.bytes() != self.frame_bytes
            || view.ndim as usize != self.shape.len()
        {
            return false;
        }
        // SAFETY: a successful export with PyBUF_ND (implied by PyBUF_C_CONTIGUOUS) has
        // `ndim` shape entries, valid until the export is released (when `source` drops,
        // after this block).
        let shape = unsafe { std::slice::from_raw_parts(view.shape, view.ndim as usize) };
        if shape != self.shape.as_slice() {
            return false;
        }
        let offset = (env * self.steps_per_row + t) * self.frame_bytes;
        debug_assert!(offset + self.frame_bytes <= self.frames.bytes());
        // SAFETY: the source export is `frame_bytes` long and C-contiguous; the destination is
        // a writable export of `frames.bytes()` bytes, and `offset + frame_bytes` is within it
        // because `env < K` and `t < T` are checked by the caller (`step`). The two cannot
        // overlap: the source is a distinct array the env returned, and were it a view of the
        // rollout array, copying a frame onto itself is still defined for `ptr::copy`.
        unsafe {
            ptr::copy(
                view.buf as *const u8,
                (self.frames.view.buf as *mut u8).add(offset),
                self.frame_bytes,
            );
        }
        true
    }
}

#[pymethods]
impl EnvStepper {
    /// Binds the envs' `step` methods to a rollout's arrays.
    ///
    /// `frames` is the `("next", obs)` array itself: writable and C-contiguous, of
    /// `K * steps_per_row` frames, each of `shape` elements of the numpy dtype `dtype`
    /// (`itemsize` bytes each); `ndarray` is `numpy.ndarray`. `rewards` (float64),
    /// `terminated` and `truncated` (bool) are writable, C-contiguous `[steps_per_row, K]`.
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (steps, frames, shape, dtype, itemsize, steps_per_row, ndarray, rewards, terminated, truncated, *, empty_infos_only = false))]
    fn new(
        steps: Vec<Py<PyAny>>,
        frames: &Bound<'_, PyAny>,
        shape: Vec<isize>,
        dtype: Py<PyAny>,
        itemsize: isize,
        steps_per_row: usize,
        ndarray: Py<PyType>,
        rewards: &Bound<'_, PyAny>,
        terminated: &Bound<'_, PyAny>,
        truncated: &Bound<'_, PyAny>,
        empty_infos_only: bool,
    ) -> PyResult<Self> {
        let writable = |name: &str, obj: &Bound<'_, PyAny>, format: Option<&CStr>, bytes: usize| {
            let flags = ffi::PyBUF_WRITABLE | ffi::PyBUF_C_CONTIGUOUS | ffi::PyBUF_FORMAT;
            let export = Export::get(obj, flags).ok_or_else(|| {
                config_error(format!("{name} must be a writable C-contiguous buffer"))
            })?;
            if let Some(expected) = format {
                // SAFETY: exported with PyBUF_FORMAT, so `format` is NUL-terminated (or null,
                // meaning "B") and valid until the export is released.
                let got = (!export.view.format.is_null())
                    .then(|| unsafe { CStr::from_ptr(export.view.format as *const c_char) });
                if got != Some(expected) {
                    return Err(config_error(format!(
                        "{name} must have buffer format {expected:?}, not {got:?}"
                    )));
                }
            }
            if export.bytes() != bytes {
                return Err(config_error(format!(
                    "{name} holds {} bytes, not {} envs x {steps_per_row} steps x {} bytes",
                    export.bytes(),
                    steps.len(),
                    bytes / (steps.len() * steps_per_row).max(1)
                )));
            }
            Ok(export)
        };
        if itemsize <= 0 || shape.iter().any(|&n| n < 0) {
            return Err(config_error(format!(
                "bad frame layout: shape {shape:?}, itemsize {itemsize}"
            )));
        }
        let frame_bytes = shape.iter().product::<isize>() as usize * itemsize as usize;
        let cells = steps.len() * steps_per_row;
        let frames = writable("frames", frames, None, frame_bytes * cells)?;
        let rewards = writable("rewards", rewards, Some(c"d"), 8 * cells)?;
        let terminated = writable("terminated", terminated, Some(c"?"), cells)?;
        let truncated = writable("truncated", truncated, Some(c"?"), cells)?;
        Ok(Self {
            steps,
            frames,
            rewards,
            terminated,
            truncated,
            frame_bytes,
            steps_per_row,
            shape,
            dtype,
            itemsize,
            ndarray,
            empty_infos_only,
        })
    }

    /// Steps env `i` with `actions[i]`, for every env in order, at step `t` of the rollout.
    ///
    /// Stores the result of each env that returned the common case (see `store`). Returns the
    /// stored envs whose episode ended, and the others, each with its whole `step` result,
    /// unchecked: Python checks and stores those. Both in env order. Counts nothing and ends
    /// no trajectory.
    #[allow(clippy::type_complexity)]
    ///
    /// `skip[i]` true: env `i` is not stepped (its action is passed over) and appears in neither
    /// list; a vector env resets such an env itself.
    #[pyo3(signature = (t, actions, skip = None))]
    fn step(
        &self,
        py: Python<'_>,
        t: usize,
        actions: &Bound<'_, PyAny>,
        skip: Option<Vec<bool>>,
    ) -> PyResult<(Vec<usize>, Vec<(usize, Py<PyAny>)>)> {
        if t >= self.steps_per_row {
            return Err(config_error(format!(
                "step {t} is outside a rollout of {} steps",
                self.steps_per_row
            )));
        }
        if let Some(skip) = &skip {
            if skip.len() != self.steps.len() {
                return Err(config_error(format!(
                    "skip has {} entries for {} envs",
                    skip.len(),
                    self.steps.len()
                )));
            }
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
            if skip.as_ref().is_some_and(|skip| skip[i]) {
                continue;
            }
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

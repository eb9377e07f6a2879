//! `EnvStepper`: one step of every environment of a rollout, with what each returns stored
//! natively.
//!
//! The stepping loop (`pycollect._rollout.runner`) spends most of its own time, for cheap
//! environments, on per-env bookkeeping around `env.step`: unpacking the result, checking its
//! types, and copying the observation into the rollout array. This does that part in Rust for
//! the common case, an observation that is exactly a numpy array of the field's dtype and
//! shape, a `float` reward and `bool` flags. Anything else is handed back to Python, which
//! checks and converts it as before, so errors and conversions stay in one place.

use std::ffi::{c_char, CStr, CString};
use std::ptr;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyList, PyTuple, PyType};

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
/// starts at byte `(i * T + t) * frame_bytes`.
#[derive(Debug)]
#[pyclass(unsendable, module = "pycollect._core")]
pub struct EnvStepper {
    steps: Vec<Py<PyAny>>,
    frames: Export,
    frame_bytes: usize,
    steps_per_row: usize,
    shape: Vec<isize>,
    format: CString,
    itemsize: isize,
    ndarray: Py<PyType>,
}

impl EnvStepper {
    /// Copies `obs` into frame `(env, t)` if it is exactly a numpy array of the field's dtype
    /// and shape, C-contiguous; returns whether it did.
    fn store_frame(&self, obs: &Bound<'_, PyAny>, env: usize, t: usize) -> bool {
        if !obs.get_type().is(self.ndarray.bind(obs.py())) {
            return false;
        }
        let Some(source) = Export::get(obs, ffi::PyBUF_FORMAT | ffi::PyBUF_C_CONTIGUOUS) else {
            return false;
        };
        let view = &source.view;
        if view.itemsize != self.itemsize
            || source.bytes() != self.frame_bytes
            || view.ndim as usize != self.shape.len()
            || view.format.is_null()
        {
            return false;
        }
        // SAFETY: a successful export with PyBUF_FORMAT and PyBUF_ND (implied by
        // PyBUF_C_CONTIGUOUS) has a NUL-terminated `format` and `ndim` shape entries, valid
        // until the export is released (when `source` drops, after this block).
        let (format, shape) = unsafe {
            (
                CStr::from_ptr(view.format as *const c_char),
                std::slice::from_raw_parts(view.shape, view.ndim as usize),
            )
        };
        if format != self.format.as_c_str() || shape != self.shape.as_slice() {
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
    /// Binds the envs' `step` methods to a rollout's observation array.
    ///
    /// `frames` is the `("next", obs)` array itself: writable and C-contiguous, of
    /// `K * steps_per_row` frames, each of `shape` elements of buffer format `format`
    /// (`itemsize` bytes each); `ndarray` is `numpy.ndarray`.
    #[new]
    fn new(
        steps: Vec<Py<PyAny>>,
        frames: &Bound<'_, PyAny>,
        shape: Vec<isize>,
        format: &str,
        itemsize: isize,
        steps_per_row: usize,
        ndarray: Py<PyType>,
    ) -> PyResult<Self> {
        let frames = Export::get(frames, ffi::PyBUF_WRITABLE | ffi::PyBUF_C_CONTIGUOUS)
            .ok_or_else(|| config_error("frames must be a writable C-contiguous buffer"))?;
        if itemsize <= 0 || shape.iter().any(|&n| n < 0) {
            return Err(config_error(format!(
                "bad frame layout: shape {shape:?}, itemsize {itemsize}"
            )));
        }
        let frame_bytes = shape.iter().product::<isize>() as usize * itemsize as usize;
        if frames.bytes() != frame_bytes * steps.len() * steps_per_row {
            return Err(config_error(format!(
                "frames holds {} bytes, not {} envs x {steps_per_row} steps x {frame_bytes} bytes",
                frames.bytes(),
                steps.len()
            )));
        }
        let format =
            CString::new(format).map_err(|e| config_error(format!("format {format:?}: {e}")))?;
        Ok(Self {
            steps,
            frames,
            frame_bytes,
            steps_per_row,
            shape,
            format,
            itemsize,
            ndarray,
        })
    }

    /// Steps env `i` with `actions[i]`, for every env, at step `t` of the rollout.
    ///
    /// For an env whose result is the common case it stores the observation into frame
    /// `(i, t)`, the reward and flags into `rewards[i]`, `terminated[i]`, `truncated[i]`, and
    /// appends `i` to `finished` if either flag is set. With a `limit`, it also counts the
    /// env's steps in `counts[i]` and truncates the trajectory once they reach it. For any
    /// other env it stores the whole `step` result into `raw[i]` and returns `i` among the
    /// envs Python must handle (and count).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (t, actions, rewards, terminated, truncated, finished, raw, counts, limit))]
    fn step(
        &self,
        py: Python<'_>,
        t: usize,
        actions: &Bound<'_, PyAny>,
        rewards: &Bound<'_, PyList>,
        terminated: &Bound<'_, PyList>,
        truncated: &Bound<'_, PyList>,
        finished: &Bound<'_, PyList>,
        raw: &Bound<'_, PyList>,
        counts: &Bound<'_, PyList>,
        limit: Option<u64>,
    ) -> PyResult<Vec<usize>> {
        if t >= self.steps_per_row {
            return Err(config_error(format!(
                "step {t} is outside a rollout of {} steps",
                self.steps_per_row
            )));
        }
        let mut odd = Vec::new();
        for (i, step) in self.steps.iter().enumerate() {
            let action = actions.get_item(i)?;
            let result = step.bind(py).call1((action,))?;
            let stored = match result.cast::<PyTuple>() {
                Ok(tuple) if tuple.len() == 5 => {
                    let reward = tuple.get_item(1)?;
                    let term = tuple.get_item(2)?;
                    let trunc = tuple.get_item(3)?;
                    if reward.is_exact_instance_of::<PyFloat>()
                        && term.is_exact_instance_of::<PyBool>()
                        && trunc.is_exact_instance_of::<PyBool>()
                        && self.store_frame(&tuple.get_item(0)?, i, t)
                    {
                        let ended_by_term = term.is_truthy()?;
                        let mut ended_by_trunc = trunc.is_truthy()?;
                        if let Some(limit) = limit {
                            let count = counts.get_item(i)?.extract::<u64>()? + 1;
                            counts.set_item(i, count)?;
                            ended_by_trunc |= count >= limit;
                        }
                        rewards.set_item(i, reward)?;
                        terminated.set_item(i, term)?;
                        truncated.set_item(i, ended_by_trunc)?;
                        if ended_by_term || ended_by_trunc {
                            finished.append(i)?;
                        }
                        true
                    } else {
                        false
                    }
                }
                _ => false,
            };
            if !stored {
                raw.set_item(i, result)?;
                odd.push(i);
            }
        }
        Ok(odd)
    }
}

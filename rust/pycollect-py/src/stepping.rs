//! `EnvStepper`: one step of every environment of a rollout, with what each returns stored
//! natively.
//!
//! The stepping loop (`pycollect._rollout.runner`) spends most of its own time, for cheap
//! environments, on per-env bookkeeping around `env.step`: unpacking the result, checking its
//! types, and copying the observation into the rollout array. This does that part in Rust for
//! the common case: an observation whose leaves are exactly C-contiguous numpy arrays of their
//! fields' dtypes and shapes (the observation itself, or the leaves of a Dict or Tuple
//! observation: exact `dict`s, `collections.OrderedDict`s as dm_control returns, and
//! `tuple`s), a `float` reward and `bool` flags. It is a strict subset of the Python
//! path: for the envs it handles it writes exactly what Python would write, it returns every
//! other env with its step result for Python to check and convert (so errors and conversions
//! stay in one place), and it counts nothing: step counts and the trajectory limit are
//! Python's.

use std::ffi::{c_char, c_int, CStr};
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

/// One observation leaf and the rollout array it is stored into.
///
/// The array is `[K, T, *shape]`, C-contiguous and writable; frame `(i, t)` starts at byte
/// `(i * T + t) * frame_bytes`.
#[derive(Debug)]
struct Leaf {
    /// Where the leaf sits in the observation: `dict` keys and `tuple` indices, outermost
    /// first (empty: the observation is the leaf).
    path: Vec<Py<PyAny>>,
    frames: Export,
    frame_bytes: usize,
    shape: Vec<isize>,
    /// The field's numpy dtype: an observation must have this very object as its dtype.
    dtype: Py<PyAny>,
}

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
/// Each observation leaf goes into its own `[K, T, *shape]` array (see `Leaf`). Rewards
/// (float64) and the two flags (bool) go into `[T, K]` arrays, at element `t * K + i`.
#[derive(Debug)]
#[pyclass(unsendable, module = "pycollect._core")]
pub struct EnvStepper {
    steps: Vec<Py<PyAny>>,
    leaves: Vec<Leaf>,
    /// `[T, K]` float64 rewards and bool flags of the rollout.
    rewards: Export,
    terminated: Export,
    truncated: Export,
    steps_per_row: usize,
    ndarray: Py<PyType>,
    /// `collections.OrderedDict`: dm_control's observations are ordered dicts.
    ordered_dict: Py<PyType>,
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
            && self.store_observation(&tuple.get_item(0)?, env, t))
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

    /// Copies every leaf of `obs` into frame `(env, t)` of its array if each is exactly a
    /// `numpy.ndarray` whose dtype is its field's dtype object (the Python path's test) and whose
    /// shape is its field's, C-contiguous, found where the Python path looks for it; returns
    /// whether it did. Nothing is written unless every leaf qualifies.
    fn store_observation(&self, obs: &Bound<'_, PyAny>, env: usize, t: usize) -> bool {
        let mut sources = Vec::with_capacity(self.leaves.len());
        for leaf in &self.leaves {
            let mut value = obs.clone();
            for key in &leaf.path {
                match self.item(&value, key.bind(obs.py())) {
                    Some(inner) => value = inner,
                    None => return false,
                }
            }
            match self.source(leaf, &value) {
                Some(data) => sources.push((value, data)), // the array is held until it is copied
                None => return false,
            }
        }
        for (leaf, &(_, source)) in self.leaves.iter().zip(&sources) {
            if leaf.frame_bytes == 0 {
                continue; // an empty leaf: nothing to copy (and `ptr::copy` wants non-null pointers)
            }
            let offset = (env * self.steps_per_row + t) * leaf.frame_bytes;
            debug_assert!(offset + leaf.frame_bytes <= leaf.frames.bytes());
            // SAFETY: the source array is `frame_bytes` long and C-contiguous (`source` checked
            // its dtype and shape) and alive (`sources` holds it). The
            // destination is a writable export of `frames.bytes()` bytes, and
            // `offset + frame_bytes` is within it because `env < K` and `t < T` are checked by
            // the caller (`step`). Were the source a view of the rollout array, copying a frame
            // onto itself is still defined for `ptr::copy`.
            unsafe {
                ptr::copy(
                    source,
                    (leaf.frames.view.buf as *mut u8).add(offset),
                    leaf.frame_bytes,
                );
            }
        }
        true
    }

    /// `container[key]` where the Python path's lookup is the plain one: an exact `dict` or
    /// `collections.OrderedDict` with a `str` key, an exact `tuple` with an `int` index. `None`
    /// for anything else, or a missing entry (Python then raises the error naming it).
    fn item<'py>(
        &self,
        container: &Bound<'py, PyAny>,
        key: &Bound<'py, PyAny>,
    ) -> Option<Bound<'py, PyAny>> {
        let kind = container.get_type();
        if kind.is(container.py().get_type::<PyDict>())
            || kind.is(self.ordered_dict.bind(container.py()))
        {
            // OrderedDict is a C subclass of dict whose `__getitem__` is dict's own lookup, and
            // neither defines `__missing__`: the stored item is exactly what `[key]` returns.
            return container
                .cast::<PyDict>()
                .ok()?
                .get_item(key)
                .ok()
                .flatten();
        }
        let tuple = container.cast_exact::<PyTuple>().ok()?;
        let index: usize = key.extract().ok()?;
        tuple.get_item(index).ok()
    }

    /// Where `value`'s data starts, if it is exactly a `numpy.ndarray` whose dtype is the
    /// leaf's dtype object (so its itemsize too) and whose shape is the leaf's, C-contiguous.
    ///
    /// Read straight from the array's header rather than through the buffer protocol: numpy
    /// builds (and frees) buffer information for every fresh array it exports, which cost more
    /// than the rest of a small env's step here.
    fn source(&self, leaf: &Leaf, value: &Bound<'_, PyAny>) -> Option<*const u8> {
        if !value.get_type().is(self.ndarray.bind(value.py())) {
            return None;
        }
        // SAFETY: `value` is exactly a `numpy.ndarray` (checked above), so it starts with
        // numpy's array header, and we hold it (and the GIL) while we read it.
        let head = unsafe { &*(value.as_ptr() as *const NumpyArrayHead) };
        if head.descr != leaf.dtype.as_ptr()
            || head.flags & NPY_ARRAY_C_CONTIGUOUS == 0
            || head.nd as usize != leaf.shape.len()
        {
            return None;
        }
        // SAFETY: an array's `dimensions` holds `nd` entries (none read when `nd` is 0), valid
        // while the array lives.
        let shape = (head.nd > 0)
            .then(|| unsafe { std::slice::from_raw_parts(head.dimensions, head.nd as usize) });
        (shape.unwrap_or(&[]) == leaf.shape.as_slice()).then_some(head.data as *const u8)
    }
}

/// The leading fields of numpy's array object (`PyArrayObject_fields` in
/// `numpy/ndarraytypes.h`). numpy's inline accessors (`PyArray_DATA`, `PyArray_NDIM`,
/// `PyArray_DIMS`, `PyArray_DESCR`, `PyArray_FLAGS`), compiled into every extension built
/// against numpy, read these very offsets, so numpy keeps them fixed (1.x and 2.x alike).
#[repr(C)]
struct NumpyArrayHead {
    ob_base: ffi::PyObject,
    data: *mut c_char,
    nd: c_int,
    dimensions: *const isize,
    strides: *const isize,
    base: *mut ffi::PyObject,
    descr: *mut ffi::PyObject,
    flags: c_int,
}

/// numpy's `NPY_ARRAY_C_CONTIGUOUS` flag.
const NPY_ARRAY_C_CONTIGUOUS: c_int = 0x0001;

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
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (steps, leaves, steps_per_row, ndarray, rewards, terminated, truncated, *, empty_infos_only = false))]
    fn new(
        py: Python<'_>,
        steps: Vec<Py<PyAny>>,
        leaves: Vec<LeafArgs<'_>>,
        steps_per_row: usize,
        ndarray: Py<PyType>,
        rewards: &Bound<'_, PyAny>,
        terminated: &Bound<'_, PyAny>,
        truncated: &Bound<'_, PyAny>,
        empty_infos_only: bool,
    ) -> PyResult<Self> {
        let cells = steps.len() * steps_per_row;
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
                    bytes / cells.max(1)
                )));
            }
            Ok(export)
        };
        if leaves.is_empty() {
            return Err(config_error(
                "an observation has at least one leaf".to_string(),
            ));
        }
        let leaves = leaves
            .into_iter()
            .enumerate()
            .map(|(n, (path, frames, shape, dtype, itemsize))| {
                if itemsize <= 0 || shape.iter().any(|&size| size < 0) {
                    return Err(config_error(format!(
                        "bad frame layout of leaf {n}: shape {shape:?}, itemsize {itemsize}"
                    )));
                }
                let frame_bytes = shape.iter().product::<isize>() as usize * itemsize as usize;
                let frames = writable(
                    &format!("frames of leaf {n}"),
                    &frames,
                    None,
                    frame_bytes * cells,
                )?;
                Ok(Leaf {
                    path,
                    frames,
                    frame_bytes,
                    shape,
                    dtype,
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let rewards = writable("rewards", rewards, Some(c"d"), 8 * cells)?;
        let terminated = writable("terminated", terminated, Some(c"?"), cells)?;
        let truncated = writable("truncated", truncated, Some(c"?"), cells)?;
        let ordered_dict = py
            .import(intern!(py, "collections"))?
            .getattr(intern!(py, "OrderedDict"))?
            .cast_into::<PyType>()?
            .unbind();
        Ok(Self {
            steps,
            leaves,
            rewards,
            terminated,
            truncated,
            steps_per_row,
            ndarray,
            ordered_dict,
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

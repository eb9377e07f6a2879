//! Finding an observation's leaves and copying them into frames, the common case only.
//!
//! An observation is stored natively when every leaf (the observation itself, or each leaf of a
//! Dict or Tuple observation) is exactly a C-contiguous `numpy.ndarray` whose dtype is its
//! field's dtype object and whose shape is its field's, found through exact `dict`,
//! `collections.OrderedDict` (dm_control's) and `tuple` containers. Anything else is the
//! Python path's, whose checks convert or refuse it; nothing is written unless every leaf
//! qualifies.

use std::ptr;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple, PyType};

use super::arrays::{array_data, Export};
use crate::errors::config_error;

/// One observation leaf: where it sits and what a frame of it is.
#[derive(Debug)]
pub(crate) struct LeafLayout {
    /// `dict` keys and `tuple` indices that lead to the leaf, outermost first (empty: the
    /// observation is the leaf).
    path: Vec<Py<PyAny>>,
    /// Bytes of one frame.
    pub(crate) frame_bytes: usize,
    shape: Vec<isize>,
    /// The field's numpy dtype: an observation must have this very object as its dtype.
    dtype: Py<PyAny>,
}

impl LeafLayout {
    /// A leaf from `(path, shape, dtype, itemsize)`; `n` numbers it in messages.
    pub(crate) fn new(
        n: usize,
        path: Vec<Py<PyAny>>,
        shape: Vec<isize>,
        dtype: Py<PyAny>,
        itemsize: isize,
    ) -> PyResult<Self> {
        if itemsize <= 0 || shape.iter().any(|&size| size < 0) {
            return Err(config_error(format!(
                "bad frame layout of leaf {n}: shape {shape:?}, itemsize {itemsize}"
            )));
        }
        let frame_bytes = shape.iter().product::<isize>() as usize * itemsize as usize;
        Ok(Self {
            path,
            frame_bytes,
            shape,
            dtype,
        })
    }
}

/// An observation's leaves and the types its containers may be.
#[derive(Debug)]
pub(crate) struct Observations {
    pub(crate) leaves: Vec<LeafLayout>,
    pub(crate) ndarray: Py<PyType>,
    /// `collections.OrderedDict`: dm_control's observations are ordered dicts.
    ordered_dict: Py<PyType>,
}

/// The data of each leaf of one observation, found and checked; the objects are held until the
/// frames are copied.
pub(crate) type Sources<'py> = Vec<(Bound<'py, PyAny>, *const u8)>;

impl Observations {
    /// `leaves` in order; `ndarray` is `numpy.ndarray`.
    pub(crate) fn new(
        py: Python<'_>,
        leaves: Vec<LeafLayout>,
        ndarray: Py<PyType>,
    ) -> PyResult<Self> {
        if leaves.is_empty() {
            return Err(config_error("an observation has at least one leaf"));
        }
        let ordered_dict = py
            .import(intern!(py, "collections"))?
            .getattr(intern!(py, "OrderedDict"))?
            .cast_into::<PyType>()?
            .unbind();
        Ok(Self {
            leaves,
            ndarray,
            ordered_dict,
        })
    }

    /// Every leaf of `obs`, if each is the common case (see the module docs).
    pub(crate) fn sources<'py>(&self, obs: &Bound<'py, PyAny>) -> Option<Sources<'py>> {
        let py = obs.py();
        let ndarray = self.ndarray.bind(py);
        let mut sources = Vec::with_capacity(self.leaves.len());
        for leaf in &self.leaves {
            let mut value = obs.clone();
            for key in &leaf.path {
                value = self.item(&value, key.bind(py))?;
            }
            let data = array_data(&value, ndarray, &leaf.dtype, &leaf.shape)?;
            sources.push((value, data));
        }
        Some(sources)
    }

    /// Copies `sources` (from [`sources`](Self::sources)) into frame `frame` of `frames`, one
    /// export per leaf.
    ///
    /// # Safety
    /// Each export in `frames` must be writable and hold more than `frame` frames of its leaf.
    pub(crate) unsafe fn copy(&self, sources: &Sources<'_>, frames: &[Export], frame: usize) {
        for ((leaf, export), &(_, source)) in self.leaves.iter().zip(frames).zip(sources) {
            if leaf.frame_bytes == 0 {
                continue; // an empty leaf: nothing to copy (and `ptr::copy` wants non-null pointers)
            }
            let offset = frame * leaf.frame_bytes;
            debug_assert!(offset + leaf.frame_bytes <= export.bytes());
            // SAFETY: the source is `frame_bytes` long and C-contiguous (`sources` checked its
            // dtype and shape) and alive (`sources` holds it); the destination frame is within
            // the writable export (the caller's contract). Were the source a view of the
            // destination, copying a frame onto itself is still defined for `ptr::copy`.
            unsafe { ptr::copy(source, export.ptr().add(offset), leaf.frame_bytes) };
        }
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
}

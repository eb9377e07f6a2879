//! `SlotView`: a zero-copy window onto part of a segment, exported through the buffer
//! protocol, so `np.asarray(view)` and `torch.from_numpy(...)` read shared memory in place.
//!
//! A view holds an `Arc` of the mapping, so the memory stays mapped while any numpy array or
//! tensor made from it is alive, even after the collector that created it is gone. A view
//! made from a `Lease` also holds the lease, so the slot is not handed back to its producer
//! while the view (or anything exported from it) exists. Note that torch keeps a reference to
//! the exporting object, not to the buffer export, which is why the object, not the export
//! count, carries these lifetimes.

use std::ffi::{c_int, c_void, CStr};
use std::ptr;
use std::sync::Arc;

use pycollect_core::{DType, Mapping, Segment as CoreSegment};
use pyo3::ffi;
use pyo3::prelude::*;

use crate::errors::{buffer_export_error, config_error};

/// Index of a field of `segment` by name, or a ConfigError that lists the known names.
pub(crate) fn field_index(segment: &CoreSegment, field: &str) -> PyResult<usize> {
    let layout = segment.layout();
    layout.field_index(field).ok_or_else(|| {
        let known: Vec<&str> = layout
            .params()
            .fields
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        config_error(format!(
            "no field '{field}' in this segment; fields: {}",
            known.join(", ")
        ))
    })
}

/// The PEP 3118 format of a dtype; bfloat16 has none and travels as raw `uint16`.
fn format_of(dtype: DType) -> &'static CStr {
    match dtype {
        DType::U8 => c"B",
        DType::I8 => c"b",
        DType::I16 => c"h",
        DType::I32 => c"i",
        DType::I64 => c"q",
        DType::U16 | DType::BF16 => c"H",
        DType::U32 => c"I",
        DType::U64 => c"Q",
        DType::F16 => c"e",
        DType::F32 => c"f",
        DType::F64 => c"d",
        DType::Bool => c"?",
    }
}

/// A C-contiguous array inside a segment.
#[derive(Debug)]
#[pyclass(frozen, module = "pycollect._core")]
pub struct SlotView {
    mapping: Arc<Mapping>,
    offset: usize,
    shape: Vec<isize>,
    strides: Vec<isize>,
    dtype: DType,
    readonly: bool,
    /// The lease (or other object) that must outlive every export of this view.
    _owner: Option<Py<PyAny>>,
}

impl SlotView {
    /// A view of `shape` elements of `dtype` at `offset` bytes into `mapping`.
    pub(crate) fn new(
        mapping: Arc<Mapping>,
        offset: usize,
        shape: &[usize],
        dtype: DType,
        readonly: bool,
        owner: Option<Py<PyAny>>,
    ) -> Self {
        let itemsize = dtype.size() as isize;
        let mut strides = vec![itemsize; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * shape[i + 1] as isize;
        }
        let shape: Vec<isize> = shape.iter().map(|&n| n as isize).collect();
        let view = Self {
            mapping,
            offset,
            shape,
            strides,
            dtype,
            readonly,
            _owner: owner,
        };
        assert!(
            view.offset + view.nbytes() <= view.mapping.len(),
            "view outside the segment"
        );
        view
    }

    /// View of one worker's rollout of field `field` (an index) in `slot`: `[K, T, *shape]`.
    pub(crate) fn of_worker(
        segment: &CoreSegment,
        field: usize,
        slot: usize,
        worker: usize,
        readonly: bool,
        owner: Option<Py<PyAny>>,
    ) -> Self {
        let layout = segment.layout();
        let (spec, _) = layout.field(field);
        let p = layout.params();
        let mut shape = vec![p.envs_per_worker, p.steps];
        shape.extend_from_slice(&spec.shape);
        let offset = layout.field_offset(field, slot, worker);
        Self::new(
            segment.mapping(),
            offset,
            &shape,
            spec.dtype,
            readonly,
            owner,
        )
    }

    fn nbytes(&self) -> usize {
        self.shape.iter().product::<isize>() as usize * self.dtype.size()
    }

    fn ptr(&self) -> *mut u8 {
        // SAFETY: `new` checked that offset + nbytes lies inside the mapping.
        unsafe { self.mapping.base_ptr().add(self.offset) }
    }
}

#[pymethods]
impl SlotView {
    /// Shape of the array.
    #[getter]
    fn shape(&self) -> Vec<isize> {
        self.shape.clone()
    }

    /// Element type name (numpy / torch spelling).
    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype.name()
    }

    /// Address of the first byte in this process.
    #[getter]
    fn address(&self) -> usize {
        self.ptr() as usize
    }

    /// Size in bytes.
    #[getter(nbytes)]
    fn py_nbytes(&self) -> usize {
        self.nbytes()
    }

    /// Whether exports are read-only.
    #[getter]
    fn readonly(&self) -> bool {
        self.readonly
    }

    fn __repr__(&self) -> String {
        format!(
            "SlotView(shape={:?}, dtype={}, address={:#x}, readonly={})",
            self.shape,
            self.dtype,
            self.ptr() as usize,
            self.readonly
        )
    }

    /// Buffer protocol export (PEP 3118).
    ///
    /// # Safety
    /// Called by CPython with a valid `view` to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(buffer_export_error("view is null"));
        }
        let this = slf.get();
        if this.readonly && (flags & ffi::PyBUF_WRITABLE) == ffi::PyBUF_WRITABLE {
            return Err(buffer_export_error("this view of the segment is read-only"));
        }
        // SAFETY: `view` is non-null and CPython gives us exclusive access to fill it. The
        // shape/strides/format pointers point into this frozen object, which `view.obj`
        // keeps alive until the export is released.
        unsafe {
            (*view).buf = this.ptr().cast::<c_void>();
            (*view).len = this.nbytes() as isize;
            (*view).readonly = c_int::from(this.readonly);
            (*view).itemsize = this.dtype.size() as isize;
            (*view).format = if (flags & ffi::PyBUF_FORMAT) == ffi::PyBUF_FORMAT {
                format_of(this.dtype).as_ptr().cast_mut()
            } else {
                ptr::null_mut()
            };
            (*view).ndim = this.shape.len() as c_int;
            (*view).shape = if (flags & ffi::PyBUF_ND) == ffi::PyBUF_ND {
                this.shape.as_ptr().cast_mut()
            } else {
                ptr::null_mut()
            };
            (*view).strides = if (flags & ffi::PyBUF_STRIDES) == ffi::PyBUF_STRIDES {
                this.strides.as_ptr().cast_mut()
            } else {
                ptr::null_mut()
            };
            (*view).suboffsets = ptr::null_mut();
            (*view).internal = ptr::null_mut();
            (*view).obj = slf.into_any().into_ptr();
        }
        Ok(())
    }

    /// Nothing to free: shape and strides live in the object itself.
    ///
    /// # Safety
    /// Called by CPython with the view it got from `__getbuffer__`.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

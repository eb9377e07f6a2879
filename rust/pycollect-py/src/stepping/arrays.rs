//! Reading numpy arrays and scalars without numpy's C API, and holding buffer exports.
//!
//! The stepper tests an env's output many times per step (is this exactly a numpy array of this
//! dtype and shape?), so it reads numpy's object headers directly rather than export a buffer
//! for every fresh array (numpy builds buffer information per export, which cost more than the
//! rest of a small env's step). The arrays the stepper writes into are exported once, when it is
//! built, and held for its lifetime.

use std::ffi::{c_char, c_int, CStr};

use pyo3::ffi;
use pyo3::prelude::*;

use crate::errors::config_error;

/// A buffer export held for a stepper's lifetime, released on drop.
pub(crate) struct Export {
    pub(crate) view: ffi::Py_buffer,
}

impl Export {
    /// Exports `obj` with `flags`, or `None` (and no pending exception) if it cannot.
    pub(crate) fn get(obj: &Bound<'_, PyAny>, flags: c_int) -> Option<Self> {
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

    /// Exports `obj` as a writable C-contiguous buffer of exactly `bytes` bytes, with the
    /// struct format `format` when given (`"d"` float64, `"?"` bool, `"q"` int64...).
    ///
    /// Errors name `name`, the object's role; `expected` says what `bytes` is made of.
    pub(crate) fn writable(
        name: &str,
        obj: &Bound<'_, PyAny>,
        format: Option<&CStr>,
        bytes: usize,
        expected: &str,
    ) -> PyResult<Self> {
        let flags = ffi::PyBUF_WRITABLE | ffi::PyBUF_C_CONTIGUOUS | ffi::PyBUF_FORMAT;
        let export = Self::get(obj, flags).ok_or_else(|| {
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
                "{name} holds {} bytes, not {expected}",
                export.bytes()
            )));
        }
        Ok(export)
    }

    /// Bytes the export spans.
    pub(crate) fn bytes(&self) -> usize {
        self.view.len.max(0) as usize
    }

    /// The first byte.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.view.buf as *mut u8
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
        // Exports live inside the native classes (dropped by Python, so with the GIL held, on
        // whichever thread frees them) or on the stack of a method that holds the GIL.
        unsafe { ffi::PyBuffer_Release(&mut self.view) };
    }
}

// SAFETY: a buffer export may be released on any thread that holds the GIL (CPython's buffer
// protocol has no thread affinity), and Python frees the native classes holding exports only
// with the GIL held: the garbage collector can free them on any thread, so they cannot be
// `unsendable`. The bytes behind the pointer are read and written only by methods of those
// classes, which hold the GIL and a borrow of the object, so no two threads use them at once.
unsafe impl Send for Export {}
// SAFETY: as for `Send`: every use of the pointer happens under the GIL and the object's borrow.
unsafe impl Sync for Export {}

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

/// A numpy array as its header describes it (valid while the array is held).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ArrayHead<'a> {
    /// The first element.
    pub(crate) data: *const u8,
    /// The dtype object (`descr`).
    pub(crate) descr: *mut ffi::PyObject,
    /// The shape.
    pub(crate) shape: &'a [isize],
    /// Whether the elements are laid out C-contiguous.
    pub(crate) c_contiguous: bool,
}

/// `value`'s header if `value` is exactly a `numpy.ndarray` (`ndarray` is that type).
pub(crate) fn array_head<'a>(
    value: &'a Bound<'_, PyAny>,
    ndarray: &Bound<'_, pyo3::types::PyType>,
) -> Option<ArrayHead<'a>> {
    if !value.get_type().is(ndarray) {
        return None;
    }
    // SAFETY: `value` is exactly a `numpy.ndarray` (checked above), so it starts with numpy's
    // array header, and the caller holds it (and the GIL) for the lifetime `'a`.
    let head = unsafe { &*(value.as_ptr() as *const NumpyArrayHead) };
    let shape: &[isize] = if head.nd > 0 {
        // SAFETY: an array's `dimensions` holds `nd` entries, valid while the array lives.
        unsafe { std::slice::from_raw_parts(head.dimensions, head.nd as usize) }
    } else {
        &[]
    };
    Some(ArrayHead {
        data: head.data as *const u8,
        descr: head.descr,
        shape,
        c_contiguous: head.flags & NPY_ARRAY_C_CONTIGUOUS != 0,
    })
}

/// Where the data of `value`, exactly a `numpy.ndarray` whose dtype is the object `dtype` and
/// whose shape is `shape`, C-contiguous, starts; `None` for anything else.
pub(crate) fn array_data(
    value: &Bound<'_, PyAny>,
    ndarray: &Bound<'_, pyo3::types::PyType>,
    dtype: &Py<PyAny>,
    shape: &[isize],
) -> Option<*const u8> {
    let head = array_head(value, ndarray)?;
    (head.descr == dtype.as_ptr() && head.c_contiguous && head.shape == shape).then_some(head.data)
}

/// Where the value of a numpy scalar (a `numpy.generic` of a fixed-size numeric type, such as
/// `numpy.float32`) starts.
///
/// numpy's scalar objects are `{PyObject_HEAD; <ctype> obval;}` (`PyArrayScalar_VAL`, in
/// `numpy/arrayscalars.h`, reads `obval` there): the value follows the object header, at the
/// next multiple of its alignment, which for every fixed-size numeric type but the 16-byte
/// long double is right after the 16-byte header.
///
/// # Safety
/// `value` must be exactly an instance of a numpy numeric scalar type of at most 8-byte
/// alignment (the caller checks its type against one it recorded), held by the caller.
pub(crate) unsafe fn scalar_data(value: &Bound<'_, PyAny>) -> *const u8 {
    // SAFETY: per the contract, `value` is a numpy scalar object whose value follows the
    // `PyObject` header.
    unsafe { (value.as_ptr() as *const u8).add(std::mem::size_of::<ffi::PyObject>()) }
}

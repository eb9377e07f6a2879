//! `ActionWriter`: a batch of actions checked against its leaf's bounds and written, cast, into
//! the arrays workers read them from, in one pass.
//!
//! The common case only: the actions are exactly a C-contiguous `numpy.ndarray` of the batch's
//! shape whose dtype is one of numpy's built-in bool, integer or float types (native byte
//! order), of a kind the leaf takes (no floats into an integer leaf), every value inside the
//! bounds (compared as float64, as numpy compares an array with float64 bounds; NaN is
//! outside), and a float value that stays finite when narrowed. Anything else is refused
//! without a message: the Python checks (`pycollect._steps.spaces.ActionChecker`) then take the
//! batch, cast what fits and raise the error that names the value for what does not. A refused
//! batch may have been written in part; the caller sends nothing before a batch is accepted.

use pyo3::prelude::*;
use pyo3::types::PyType;

use super::arrays::{array_head, Export};
use crate::errors::config_error;

/// An element type, as the Python side numbers them (`pycollect._steps.spaces.ELEMENT_CODES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Elem {
    Bool,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F32,
    F64,
}

impl Elem {
    fn from_code(code: u8) -> PyResult<Self> {
        Ok(match code {
            0 => Self::Bool,
            1 => Self::I8,
            2 => Self::I16,
            3 => Self::I32,
            4 => Self::I64,
            5 => Self::U8,
            6 => Self::U16,
            7 => Self::U32,
            8 => Self::U64,
            9 => Self::F32,
            10 => Self::F64,
            other => return Err(config_error(format!("unknown element code {other}"))),
        })
    }

    fn size(self) -> usize {
        match self {
            Self::Bool | Self::I8 | Self::U8 => 1,
            Self::I16 | Self::U16 => 2,
            Self::I32 | Self::U32 | Self::F32 => 4,
            Self::I64 | Self::U64 | Self::F64 => 8,
        }
    }

    fn is_float(self) -> bool {
        matches!(self, Self::F32 | Self::F64)
    }

    /// Element `i` of `data` as a float64, and whether it is a float.
    ///
    /// # Safety
    /// `data` must hold more than `i` elements of this type.
    unsafe fn read(self, data: *const u8, i: usize) -> Value {
        // SAFETY: per the contract; unaligned reads make no assumption about alignment.
        unsafe {
            match self {
                Self::Bool => Value::Int(i128::from(data.add(i).read() != 0)),
                Self::I8 => Value::Int(i128::from((data as *const i8).add(i).read_unaligned())),
                Self::I16 => Value::Int(i128::from((data as *const i16).add(i).read_unaligned())),
                Self::I32 => Value::Int(i128::from((data as *const i32).add(i).read_unaligned())),
                Self::I64 => Value::Int(i128::from((data as *const i64).add(i).read_unaligned())),
                Self::U8 => Value::Int(i128::from(data.add(i).read())),
                Self::U16 => Value::Int(i128::from((data as *const u16).add(i).read_unaligned())),
                Self::U32 => Value::Int(i128::from((data as *const u32).add(i).read_unaligned())),
                Self::U64 => Value::Int(i128::from((data as *const u64).add(i).read_unaligned())),
                Self::F32 => Value::Float(f64::from((data as *const f32).add(i).read_unaligned())),
                Self::F64 => Value::Float((data as *const f64).add(i).read_unaligned()),
            }
        }
    }

    /// Writes `value` as element `i` of `data`, cast as numpy's `astype` casts an in-range value.
    ///
    /// # Safety
    /// `data` must be writable and hold more than `i` elements of this type.
    unsafe fn write(self, data: *mut u8, i: usize, value: Value) {
        let int = |v: Value| match v {
            Value::Int(v) => v,
            Value::Float(v) => v as i128, // never reached: floats go to float leaves only
        };
        // SAFETY: per the contract; unaligned writes make no assumption about alignment. The
        // bounds check passed, so an integer value is within the leaf's range (`as` keeps it).
        unsafe {
            match self {
                Self::Bool => data.add(i).write(u8::from(int(value) != 0)),
                Self::I8 => (data as *mut i8).add(i).write_unaligned(int(value) as i8),
                Self::I16 => (data as *mut i16).add(i).write_unaligned(int(value) as i16),
                Self::I32 => (data as *mut i32).add(i).write_unaligned(int(value) as i32),
                Self::I64 => (data as *mut i64).add(i).write_unaligned(int(value) as i64),
                Self::U8 => data.add(i).write(int(value) as u8),
                Self::U16 => (data as *mut u16).add(i).write_unaligned(int(value) as u16),
                Self::U32 => (data as *mut u32).add(i).write_unaligned(int(value) as u32),
                Self::U64 => (data as *mut u64).add(i).write_unaligned(int(value) as u64),
                Self::F32 => (data as *mut f32)
                    .add(i)
                    .write_unaligned(value.as_f64() as f32),
                Self::F64 => (data as *mut f64).add(i).write_unaligned(value.as_f64()),
            }
        }
    }
}

impl ActionWriter {
    /// Whether each of the `count` elements of `elem` at `data` is within its bounds, compared as
    /// float64 (NaN is not), in a loop typed for `elem`.
    ///
    /// # Safety
    /// `data` must hold `count` elements of `elem`.
    unsafe fn all_within(&self, elem: Elem, data: *const u8, count: usize) -> bool {
        let (low, high) = (self.low.as_slice(), self.high.as_slice());
        // SAFETY: per the contract, `data` holds `count` elements of the type each arm reads.
        unsafe {
            match elem {
                Elem::Bool | Elem::U8 => within::<u8>(data, count, low, high),
                Elem::I8 => within::<i8>(data, count, low, high),
                Elem::I16 => within::<i16>(data, count, low, high),
                Elem::I32 => within::<i32>(data, count, low, high),
                Elem::I64 => within::<i64>(data, count, low, high),
                Elem::U16 => within::<u16>(data, count, low, high),
                Elem::U32 => within::<u32>(data, count, low, high),
                Elem::U64 => within::<u64>(data, count, low, high),
                Elem::F32 => within::<f32>(data, count, low, high),
                Elem::F64 => within::<f64>(data, count, low, high),
            }
        }
    }
}

/// An element type read as float64, as numpy compares an array with float64 bounds.
trait AsF64: Copy {
    fn as_f64(self) -> f64;
}

macro_rules! as_f64 {
    ($($t:ty),*) => {$(
        impl AsF64 for $t {
            fn as_f64(self) -> f64 {
                self as f64
            }
        }
    )*};
}
as_f64!(u8, i8, i16, i32, i64, u16, u32, u64, f32, f64);

/// Whether each of the `count` elements of `T` at `data` lies within its bounds: element `i`
/// within `low[i % n]..=high[i % n]`, `n` the bounds' length (one env's action; `count` is a
/// multiple of it).
///
/// # Safety
/// `data` must hold `count` elements of `T` (aligned or not).
unsafe fn within<T: AsF64>(data: *const u8, count: usize, low: &[f64], high: &[f64]) -> bool {
    let data = data as *const T;
    // SAFETY: per the contract, for every `i < count`.
    let value = |i: usize| unsafe { data.add(i).read_unaligned() }.as_f64();
    if let ([low], [high]) = (low, high) {
        return (0..count).all(|i| {
            let v = value(i);
            v >= *low && v <= *high
        });
    }
    let per_env = low.len();
    if per_env == 0 {
        return true; // actions of no element (a Box of shape (0,)): nothing to check
    }
    (0..count / per_env).all(|env| {
        let first = env * per_env;
        (0..per_env).all(|b| {
            let v = value(first + b);
            v >= low[b] && v <= high[b]
        })
    })
}

/// One action value: integers exactly (an int64 or uint64 fits an i128), floats as they are.
#[derive(Debug, Clone, Copy)]
enum Value {
    Int(i128),
    Float(f64),
}

impl Value {
    /// The value as numpy compares it with float64 bounds (and casts it to a float leaf).
    fn as_f64(self) -> f64 {
        match self {
            Self::Int(v) => v as f64,
            Self::Float(v) => v,
        }
    }
}

/// Checks and writes batches of one action leaf into one array (see the module docs).
#[derive(Debug)]
#[pyclass(module = "pycollect._core")]
pub struct ActionWriter {
    out: Export,
    /// `[N, *shape]` of a batch.
    shape: Vec<isize>,
    /// One bound per element of one env's action (`shape`), as float64.
    low: Vec<f64>,
    high: Vec<f64>,
    target: Elem,
    /// numpy's dtype objects this writer reads, with their element types.
    dtypes: Vec<(Py<PyAny>, Elem)>,
    ndarray: Py<PyType>,
}

#[pymethods]
impl ActionWriter {
    /// Binds `out`, a writable C-contiguous `[N, *shape]` array of the leaf's element type
    /// `target` (a code of `ELEMENT_CODES`), to the leaf's bounds (`low`, `high`: one float64
    /// per element of one env's action, flattened). `dtypes`: `(numpy dtype object, code)` for
    /// every input dtype read natively; `ndarray` is `numpy.ndarray`.
    #[new]
    fn new(
        out: &Bound<'_, PyAny>,
        shape: Vec<isize>,
        low: Vec<f64>,
        high: Vec<f64>,
        target: u8,
        dtypes: Vec<(Py<PyAny>, u8)>,
        ndarray: Py<PyType>,
    ) -> PyResult<Self> {
        let target = Elem::from_code(target)?;
        if shape.is_empty() || shape.iter().any(|&n| n < 0) {
            return Err(config_error(format!("bad batch shape {shape:?}")));
        }
        let per_env = shape[1..].iter().product::<isize>() as usize;
        if low.len() != per_env || high.len() != per_env {
            return Err(config_error(format!(
                "bounds of {} and {} values for actions of {per_env} elements",
                low.len(),
                high.len()
            )));
        }
        let elements = shape[0] as usize * per_env;
        let out = Export::writable(
            "actions out",
            out,
            None,
            elements * target.size(),
            &format!("{elements} elements of {} bytes", target.size()),
        )?;
        let dtypes = dtypes
            .into_iter()
            .map(|(dtype, code)| Ok((dtype, Elem::from_code(code)?)))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Self {
            out,
            shape,
            low,
            high,
            target,
            dtypes,
            ndarray,
        })
    }

    /// Checks `actions` and writes them into the array; `False` (and nothing promised about the
    /// array) when they are not the common case or do not fit (see the module docs).
    fn write(&self, actions: &Bound<'_, PyAny>) -> bool {
        let Some(head) = array_head(actions, self.ndarray.bind(actions.py())) else {
            return false;
        };
        if !head.c_contiguous || head.shape != self.shape.as_slice() {
            return false;
        }
        let Some(&(_, source)) = self
            .dtypes
            .iter()
            .find(|(dtype, _)| dtype.as_ptr() == head.descr)
        else {
            return false;
        };
        if source.is_float() && !self.target.is_float() {
            return false; // floats into an integer leaf: the Python check names the kind
        }
        let per_env = self.low.len();
        let count = self.shape[0] as usize * per_env;
        if source == self.target {
            // The common case of all (actions of the leaf's own dtype): check, then one copy.
            // SAFETY: the array holds `count` elements of `source` (its dtype and shape were
            // checked above; it is C-contiguous and the caller holds it).
            if !unsafe { self.all_within(source, head.data, count) } {
                return false;
            }
            // SAFETY: `out` holds `count` elements of `target`, the same type (checked in
            // `new`), and is writable; `copy` (memmove) is right even if the caller passed a
            // view of `out` itself.
            unsafe { std::ptr::copy(head.data, self.out.ptr(), count * source.size()) };
            return true;
        }
        let narrows = source.is_float() && source.size() > self.target.size();
        for i in 0..count {
            // SAFETY: the array holds `count` elements of `source` (its dtype and shape were
            // checked above; it is C-contiguous and the caller holds it).
            let value = unsafe { source.read(head.data, i) };
            let (v, bound) = (value.as_f64(), i % per_env);
            if !(v >= self.low[bound] && v <= self.high[bound]) {
                return false; // outside, or NaN
            }
            if narrows && v.is_finite() && (v as f32).is_infinite() {
                return false; // overflows the leaf's float type: the Python check names it
            }
            // SAFETY: `out` holds `count` elements of `target` (checked in `new`), writable.
            unsafe { self.target.write(self.out.ptr(), i, value) };
        }
        true
    }
}

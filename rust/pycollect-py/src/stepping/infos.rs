//! Info entries as fixed-size fields: what a vector env's infos hold, written without pickling.
//!
//! Where an env returns an info entry whose value has the same fixed kind on every step (ALE's
//! `lives`, a user env's `"x_position"`), the vector env gives it a field: `[K, *shape]`
//! values and a `[K]` bool mask ("the env returned it at this step") per worker, in shared
//! memory, and a second pair for the final infos of `SAME_STEP` mode. The trainer rebuilds
//! gymnasium's infos from them (`pycollect._steps.infos`). A kind is what decides the dtype of
//! gymnasium's info array (`VectorEnv._add_info`): a Python `int` (int64), `float` (float64) or
//! `bool`, exactly one numpy scalar type, or numpy arrays of one dtype and shape.
//!
//! Here an env's info is stored when it is an exact `dict` whose every kept entry is a field's
//! and of the field's kind; otherwise nothing of it is written and the Python path takes the
//! env (writing what fits into the fields, the rest into the info material it returns). Entries
//! the vector env does not keep (`info_keys`) are ignored.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString, PyType};

use super::arrays::{array_data, scalar_data, Export};
use crate::errors::config_error;

/// An entry's kind, as `pycollect._steps.infos.InfoKind` numbers them.
#[derive(Debug)]
enum Kind {
    /// A Python `int` that fits an int64.
    Int,
    /// A Python `float`.
    Float,
    /// A Python `bool`.
    Bool,
    /// Exactly this numpy scalar type.
    Scalar(Py<PyType>),
    /// An exact `numpy.ndarray` of this dtype object and shape, C-contiguous.
    Array { dtype: Py<PyAny>, shape: Vec<isize> },
}

/// Which of an env's two infos a value goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The info of the step (or of the reset that followed an end, in `SAME_STEP` mode).
    Info,
    /// The final info of an episode that ended in `SAME_STEP` mode.
    Final,
}

/// One entry's values and masks.
#[derive(Debug)]
struct InfoField {
    key: Py<PyString>,
    kind: Kind,
    /// Bytes of one env's value.
    value_bytes: usize,
    values: Export,
    mask: Export,
    /// `SAME_STEP` mode only.
    finals: Option<(Export, Export)>,
}

/// One field as the constructor takes it: `(key, kind, type or dtype, shape, itemsize,
/// values, mask, final values, final mask)`.
pub(crate) type InfoFieldArgs<'py> = (
    Bound<'py, PyString>,
    u8,
    Bound<'py, PyAny>,
    Vec<isize>,
    usize,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Option<Bound<'py, PyAny>>,
    Option<Bound<'py, PyAny>>,
);

/// What an env's info writes: each entry's field and value, all of them fitting.
pub(crate) type Plan<'py> = Vec<(usize, Bound<'py, PyAny>)>;

/// The info fields of `K` envs, and which entries are kept at all.
#[derive(Debug)]
pub(crate) struct InfoFields {
    /// `None`: every entry is kept; else only these.
    keep: Option<Vec<Py<PyString>>>,
    fields: Vec<InfoField>,
    count: usize,
    ndarray: Py<PyType>,
}

impl InfoFields {
    /// Fields for `count` envs; `finals` says whether each field has final arrays (`SAME_STEP`).
    pub(crate) fn new(
        keep: Option<Vec<Py<PyString>>>,
        args: Vec<InfoFieldArgs<'_>>,
        count: usize,
        finals: bool,
        ndarray: Py<PyType>,
    ) -> PyResult<Self> {
        let mut fields = Vec::with_capacity(args.len());
        for (key, code, kind, shape, itemsize, values, mask, final_values, final_mask) in args {
            let name = key.to_string();
            let kind = match code {
                0 => Kind::Int,
                1 => Kind::Float,
                2 => Kind::Bool,
                3 => Kind::Scalar(kind.cast_into::<PyType>()?.unbind()),
                4 => Kind::Array {
                    dtype: kind.unbind(),
                    shape: shape.clone(),
                },
                other => {
                    return Err(config_error(format!(
                        "info field {name:?}: unknown kind {other}"
                    )))
                }
            };
            let value_bytes = shape.iter().product::<isize>().max(0) as usize * itemsize;
            if itemsize == 0 || (matches!(kind, Kind::Int | Kind::Float) && itemsize != 8) {
                return Err(config_error(format!(
                    "info field {name:?}: itemsize {itemsize} does not fit its kind"
                )));
            }
            let what = |part: &str| format!("info field {name:?} {part}");
            let bytes_of = |bytes: usize| format!("{count} envs x {bytes} bytes");
            let values = Export::writable(
                &what("values"),
                &values,
                None,
                value_bytes * count,
                &bytes_of(value_bytes),
            )?;
            let mask = Export::writable(&what("mask"), &mask, Some(c"?"), count, &bytes_of(1))?;
            let finals = match (finals, final_values, final_mask) {
                (false, None, None) => None,
                (true, Some(values), Some(mask)) => Some((
                    Export::writable(
                        &what("final values"),
                        &values,
                        None,
                        value_bytes * count,
                        &bytes_of(value_bytes),
                    )?,
                    Export::writable(&what("final mask"), &mask, Some(c"?"), count, &bytes_of(1))?,
                )),
                _ => {
                    return Err(config_error(format!(
                        "info field {name:?}: final arrays are given exactly in SAME_STEP mode"
                    )))
                }
            };
            fields.push(InfoField {
                key: key.unbind(),
                kind,
                value_bytes,
                values,
                mask,
                finals,
            });
        }
        Ok(Self {
            keep,
            fields,
            count,
            ndarray,
        })
    }

    /// Zeroes env `env`'s values and masks, both targets: what an env that returned nothing
    /// holds (gymnasium's info arrays are zeros where an env has no entry).
    pub(crate) fn clear(&self, env: usize) {
        debug_assert!(env < self.count);
        for field in &self.fields {
            let pairs = std::iter::once((&field.values, &field.mask))
                .chain(field.finals.as_ref().map(|(values, mask)| (values, mask)));
            for (values, mask) in pairs {
                // SAFETY: `env < count` (the caller's loop bound), and each export holds
                // `count` values of `value_bytes` and `count` mask bytes (checked in `new`).
                unsafe {
                    std::ptr::write_bytes(
                        values.ptr().add(env * field.value_bytes),
                        0,
                        field.value_bytes,
                    );
                    mask.ptr().add(env).write(0);
                }
            }
        }
    }

    /// What `info` writes, if it is an exact `dict` whose every kept entry fits a field; `None`
    /// if any does not (nothing is written then: the Python path takes the env).
    pub(crate) fn plan<'py>(&self, info: &Bound<'py, PyAny>) -> Option<Plan<'py>> {
        let dict = info.cast_exact::<PyDict>().ok()?;
        let mut plan = Vec::new();
        if dict.is_empty() {
            return Some(plan);
        }
        let keep_none = self.keep.as_ref().is_some_and(|keep| keep.is_empty());
        if keep_none {
            return Some(plan); // info_keys=(): every entry is dropped
        }
        for (key, value) in dict.iter() {
            let key = key.cast_into::<PyString>().ok()?;
            if let Some(keep) = &self.keep {
                if !keep.iter().any(|kept| same_key(&key, kept)) {
                    continue;
                }
            }
            let n = self
                .fields
                .iter()
                .position(|field| same_key(&key, &field.key))?;
            if !self.fits(&self.fields[n].kind, &value) {
                return None;
            }
            plan.push((n, value));
        }
        Some(plan)
    }

    /// Writes `plan` (from [`plan`](Self::plan)) as env `env`'s `target` info; the env's
    /// values and masks were cleared first.
    pub(crate) fn write(&self, plan: &Plan<'_>, target: Target, env: usize) -> PyResult<()> {
        debug_assert!(env < self.count);
        for (n, value) in plan {
            let field = &self.fields[*n];
            let (values, mask) = match (target, &field.finals) {
                (Target::Info, _) => (&field.values, &field.mask),
                (Target::Final, Some((values, mask))) => (values, mask),
                (Target::Final, None) => {
                    return Err(config_error("a final info outside SAME_STEP mode"))
                }
            };
            // SAFETY: `env < count` and the exports hold `count` values and mask bytes
            // (checked in `new`); `fits` checked the value's kind, so each branch reads a
            // value of exactly `value_bytes` bytes from an object the plan holds.
            unsafe {
                let dst = values.ptr().add(env * field.value_bytes);
                match &field.kind {
                    Kind::Int => (dst as *mut i64).write_unaligned(value.extract::<i64>()?),
                    Kind::Float => {
                        (dst as *mut f64).write_unaligned(value.cast::<PyFloat>()?.value())
                    }
                    Kind::Bool => dst.write(u8::from(value.is_truthy()?)),
                    Kind::Scalar(_) => {
                        std::ptr::copy_nonoverlapping(scalar_data(value), dst, field.value_bytes)
                    }
                    Kind::Array { dtype, shape } => {
                        let ndarray = self.ndarray.bind(value.py());
                        let src = array_data(value, ndarray, dtype, shape)
                            .ok_or_else(|| config_error("an info value changed under the store"))?;
                        if field.value_bytes > 0 {
                            std::ptr::copy(src, dst, field.value_bytes);
                        }
                    }
                }
                mask.ptr().add(env).write(1);
            }
        }
        Ok(())
    }

    /// Whether `value` is of `kind` exactly (the Python path's test, `InfoKind.fits`).
    fn fits(&self, kind: &Kind, value: &Bound<'_, PyAny>) -> bool {
        match kind {
            Kind::Int => value.is_exact_instance_of::<PyInt>() && value.extract::<i64>().is_ok(),
            Kind::Float => value.is_exact_instance_of::<PyFloat>(),
            Kind::Bool => value.is_exact_instance_of::<PyBool>(),
            Kind::Scalar(kind) => value.get_type().is(kind.bind(value.py())),
            Kind::Array { dtype, shape } => {
                array_data(value, self.ndarray.bind(value.py()), dtype, shape).is_some()
            }
        }
    }
}

/// Whether two `str` keys are equal (the same object, most often: keys are interned literals).
fn same_key(key: &Bound<'_, PyString>, other: &Py<PyString>) -> bool {
    let other = other.bind(key.py());
    key.is(other) || key.as_any().eq(other).unwrap_or(false)
}

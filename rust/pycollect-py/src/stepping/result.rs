//! Reading an env's `step` result in the common case (for [`GroupStepper`](super::GroupStepper)).
//!
//! The common case is what gymnasium's envs return almost always: a 5-tuple of an observation
//! the [`Observations`] store takes, a `float` reward, `bool` flags and an info. Anything else
//! is left to the Python path (`None`), which checks and converts it or names what is wrong.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyTuple};

use super::observation::{Observations, Sources};

/// A step result in the common case, unpacked.
pub(crate) struct CommonStep<'py> {
    /// The observation's leaves, ready for [`Observations::copy`].
    pub(crate) sources: Sources<'py>,
    pub(crate) reward: f64,
    pub(crate) terminated: bool,
    pub(crate) truncated: bool,
    /// The info, not looked at here.
    pub(crate) info: Bound<'py, PyAny>,
}

/// `result`'s parts if it is the common case (nothing is written either way).
pub(crate) fn common_step<'py>(
    observations: &Observations,
    result: &Bound<'py, PyAny>,
) -> PyResult<Option<CommonStep<'py>>> {
    let Ok(tuple) = result.cast::<PyTuple>() else {
        return Ok(None);
    };
    if tuple.len() != 5 {
        return Ok(None);
    }
    let (reward, term, trunc) = (tuple.get_item(1)?, tuple.get_item(2)?, tuple.get_item(3)?);
    if !(reward.is_exact_instance_of::<PyFloat>()
        && term.is_exact_instance_of::<PyBool>()
        && trunc.is_exact_instance_of::<PyBool>())
    {
        return Ok(None);
    }
    let Some(sources) = observations.sources(&tuple.get_item(0)?) else {
        return Ok(None);
    };
    Ok(Some(CommonStep {
        sources,
        reward: reward.cast::<PyFloat>()?.value(),
        terminated: term.is_truthy()?,
        truncated: trunc.is_truthy()?,
        info: tuple.get_item(4)?,
    }))
}

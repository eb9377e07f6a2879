//! `StepRecorder`: a group's rows of a vector env's step results, stored as one step column
//! of a rollout's arrays in one native pass.
//!
//! The central engine's workers answer a step in a `SAME_STEP` vector env's result rows
//! (`[N * K]` per field, in shared memory): the observations (the reset one where an episode
//! ended), the final observations, rewards and flags. A group's rollout holds envs of every
//! worker (its `rows` of those), and each step it stores, per env `i` of the group at column
//! `t`: the observation the step returned into `("next", obs)` (the final one where the episode
//! ended), the reward and flags into the `[T, K]` step arrays, and what the policy reads next
//! into `current` (the reset observation where the episode ended), which is also frame `t + 1`
//! of `obs` (for an env whose episode ended, the one frame `("next", obs)` lacks; for the others
//! a copy of `("next", obs)`'s frame `t`, written here while the workers step other groups
//! rather than after the round, while they wait). The observations may go straight into the
//! batch's rows (`out_rows`): a group's envs are rows of every worker, not a block of the
//! batch. Python did this with a dozen numpy calls per step; here it is one call, copies only.

use pyo3::prelude::*;

use super::arrays::Export;
use crate::errors::config_error;

/// One observation leaf: where its rows come from and where they go.
#[derive(Debug)]
struct Leaf {
    /// `[rows, *shape]`: the step's observations (the reset ones where an episode ended).
    source: Export,
    /// `[rows, *shape]`: the observations episodes ended with.
    finals: Export,
    /// `[out_envs, T, *shape]`: `("next", obs)`.
    next: Export,
    /// `[out_envs, T, *shape]`: `obs`.
    first: Export,
    /// `[K, *shape]`: what the policy reads next.
    current: Export,
    /// Bytes of one frame.
    bytes: usize,
}

/// A group's rows of a vector env's step results, recorded as step columns (see the module docs).
#[derive(Debug)]
#[pyclass(module = "pycollect._core")]
pub struct StepRecorder {
    /// The group's env `i` is row `rows[i]` of the results.
    rows: Vec<usize>,
    /// ... and row `out_rows[i]` of the observation leaves' `next` and `first`.
    out_rows: Vec<usize>,
    leaves: Vec<Leaf>,
    /// `[rows]` float64 and bools: the step's results.
    rewards_in: Export,
    terminated_in: Export,
    truncated_in: Export,
    /// `[T, K]` float64 and bools: the rollout's.
    rewards: Export,
    terminated: Export,
    truncated: Export,
    /// `T`.
    steps: usize,
}

/// One leaf as the constructor takes it: `(source, finals, next_obs, obs, current, frame_bytes)`.
type LeafArgs<'py> = (
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    usize,
);

/// Three arrays: rewards (float64), terminated and truncated (bool).
type Flags<'py> = (Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>);

fn exports(
    role: &str,
    (rewards, terminated, truncated): &Flags<'_>,
    cells: usize,
    expected: &str,
) -> PyResult<(Export, Export, Export)> {
    Ok((
        Export::writable(
            &format!("{role} rewards"),
            rewards,
            Some(c"d"),
            cells * 8,
            expected,
        )?,
        Export::writable(
            &format!("{role} terminated"),
            terminated,
            Some(c"?"),
            cells,
            expected,
        )?,
        Export::writable(
            &format!("{role} truncated"),
            truncated,
            Some(c"?"),
            cells,
            expected,
        )?,
    ))
}

#[pymethods]
impl StepRecorder {
    /// Args: `rows` (the group's rows of the results, one per env), `result_rows` (how many
    /// rows the results have), `steps` (`T`), one `(source, finals, next_obs, obs, current,
    /// frame_bytes)` per observation leaf, `results` and `out`: `(rewards, terminated,
    /// truncated)` of the step (`[result_rows]`) and of the rollout (`[T, K]`), and where the
    /// observations go: `out_rows` (env `i`'s row of `next_obs` and `obs`, which have
    /// `out_envs` rows; `None`: row `i` of `K`). Every array is C-contiguous and writable, of
    /// exactly the size these make.
    ///
    /// Raises ConfigError naming the array that does not fit, or a row out of range.
    #[new]
    #[pyo3(signature = (rows, result_rows, steps, leaves, results, out, out_rows=None, out_envs=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        rows: Vec<usize>,
        result_rows: usize,
        steps: usize,
        leaves: Vec<LeafArgs<'_>>,
        results: Flags<'_>,
        out: Flags<'_>,
        out_rows: Option<Vec<usize>>,
        out_envs: Option<usize>,
    ) -> PyResult<Self> {
        if let Some(row) = rows.iter().find(|&&row| row >= result_rows) {
            return Err(config_error(format!(
                "row {row} is not one of the {result_rows} result rows"
            )));
        }
        let k = rows.len();
        let (out_rows, out_envs) = match (out_rows, out_envs) {
            (None, None) => ((0..k).collect(), k),
            (Some(out_rows), Some(out_envs)) => {
                if out_rows.len() != k {
                    return Err(config_error(format!(
                        "{} out_rows for {k} envs",
                        out_rows.len()
                    )));
                }
                if let Some(row) = out_rows.iter().find(|&&row| row >= out_envs) {
                    return Err(config_error(format!(
                        "out row {row} is not one of the {out_envs} rows of the observations"
                    )));
                }
                (out_rows, out_envs)
            }
            _ => {
                return Err(config_error(
                    "out_rows and out_envs go together: both or neither",
                ))
            }
        };
        let what = |count: usize, frames: &str| format!("{count} {frames}");
        let leaves = leaves
            .iter()
            .enumerate()
            .map(|(n, (source, finals, next, first, current, bytes))| {
                let leaf = |role: &str, obj: &Bound<'_, PyAny>, frames: usize| {
                    Export::writable(
                        &format!("leaf {n}'s {role}"),
                        obj,
                        None,
                        frames * bytes,
                        &what(frames, &format!("frames of {bytes} bytes")),
                    )
                };
                Ok(Leaf {
                    source: leaf("source", source, result_rows)?,
                    finals: leaf("finals", finals, result_rows)?,
                    next: leaf("next_obs", next, out_envs * steps)?,
                    first: leaf("obs", first, out_envs * steps)?,
                    current: leaf("current", current, k)?,
                    bytes: *bytes,
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let (rewards_in, terminated_in, truncated_in) = exports(
            "result",
            &results,
            result_rows,
            &what(result_rows, "result rows"),
        )?;
        let (rewards, terminated, truncated) =
            exports("rollout", &out, steps * k, &what(steps * k, "[T, K] cells"))?;
        Ok(Self {
            rows,
            out_rows,
            leaves,
            rewards_in,
            terminated_in,
            truncated_in,
            rewards,
            terminated,
            truncated,
            steps,
        })
    }

    /// Record the step's results as column `t`; the group's envs whose episode ended, in order.
    ///
    /// Raises ConfigError if `t` is not a column of the rollout.
    fn record(&self, t: usize) -> PyResult<Vec<usize>> {
        let steps = self.steps;
        if t >= steps {
            return Err(config_error(format!(
                "step {t} is outside the rollout's {steps} steps"
            )));
        }
        let k = self.rows.len();
        let mut ended = Vec::new();
        for (i, (&row, &out_row)) in self.rows.iter().zip(&self.out_rows).enumerate() {
            let cell = t * k + i;
            // SAFETY: `row < result_rows` (checked in `new`) and `cell < T * K` (`t < T`,
            // `i < K`); `new` checked each export's size in those units (8 bytes a reward, one
            // a flag). Unaligned accesses assume nothing of the buffers' alignment.
            let done = unsafe {
                let reward = (self.rewards_in.ptr() as *const f64)
                    .add(row)
                    .read_unaligned();
                (self.rewards.ptr() as *mut f64)
                    .add(cell)
                    .write_unaligned(reward);
                let terminated = self.terminated_in.ptr().add(row).read();
                let truncated = self.truncated_in.ptr().add(row).read();
                self.terminated.ptr().add(cell).write(terminated);
                self.truncated.ptr().add(cell).write(truncated);
                terminated != 0 || truncated != 0
            };
            let frame = out_row * steps + t;
            for leaf in &self.leaves {
                let bytes = leaf.bytes;
                let returned = if done { &leaf.finals } else { &leaf.source };
                // SAFETY: every offset is a whole frame inside its export (`row < result_rows`,
                // `frame + 1 <= out_envs * T` when `t + 1 < T` as `out_row < out_envs`, `i < K`;
                // sizes checked in `new`), and the source exports (the step's results) are
                // other buffers than the rollout's.
                unsafe {
                    let source = leaf.source.ptr().add(row * bytes);
                    std::ptr::copy_nonoverlapping(
                        returned.ptr().add(row * bytes),
                        leaf.next.ptr().add(frame * bytes),
                        bytes,
                    );
                    std::ptr::copy_nonoverlapping(source, leaf.current.ptr().add(i * bytes), bytes);
                    if t + 1 < steps {
                        std::ptr::copy_nonoverlapping(
                            source,
                            leaf.first.ptr().add((frame + 1) * bytes),
                            bytes,
                        );
                    }
                }
            }
            if done {
                ended.push(i);
            }
        }
        Ok(ended)
    }
}

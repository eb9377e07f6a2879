//! `Segment`: one collector's shared memory, as seen from Python.

use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex};

use pycollect_core::consts::SNAPSHOT_HEADER;
use pycollect_core::metrics::BatchCount;
use pycollect_core::Watch as CoreWatch;
use pycollect_core::{
    AttachOptions, Backing, DType, Field, Layout, LayoutParams, Segment as CoreSegment,
};
use pyo3::prelude::*;

use crate::metrics::Watch;

use crate::blocking::non_negative_seconds;
use crate::control::WorkerControl;
use crate::errors::{config_error, py_err, transport_error};
use crate::exchange::StepChannel;
use crate::ring::{Consumer, Producer};
use crate::view::{field_index, SlotView};
use crate::weights::{WeightsReader, WeightsWriter};

/// `(name, dtype name, per-step shape)`, as Python receives fields.
type FieldDef = (String, String, Vec<usize>);
/// A field as Python passes it: the shape's dimensions are checked by [`size_arg`].
type FieldArg<'py> = (String, String, Vec<Bound<'py, PyAny>>);

/// A collector's shared-memory segment: rollout rings, control blocks, weights store.
#[derive(Debug)]
#[pyclass(frozen, module = "pycollect._core")]
pub struct Segment {
    pub(crate) inner: Arc<CoreSegment>,
    /// The one `StepChannel` per worker this handle gives out (made on first request).
    step_channels: Mutex<Vec<Option<Py<StepChannel>>>>,
}

impl Segment {
    fn from_core(inner: CoreSegment) -> Self {
        let n = inner.layout().n_workers();
        Self {
            inner: Arc::new(inner),
            step_channels: Mutex::new((0..n).map(|_| None).collect()),
        }
    }

    fn check_slot(&self, slot: usize) -> PyResult<()> {
        let slots = self.inner.layout().params().slots_per_worker;
        if slot >= slots {
            return Err(config_error(format!(
                "slot {slot} out of range: the rings have {slots} slots"
            )));
        }
        Ok(())
    }

    fn check_worker(&self, worker: usize) -> PyResult<()> {
        let n = self.inner.layout().n_workers();
        if worker >= n {
            return Err(config_error(format!(
                "worker {worker} out of range: the segment has {n} workers"
            )));
        }
        Ok(())
    }
}

/// A size passed from Python as a `usize`, or a ConfigError naming `what` and the value (a
/// negative number, one past 64 bits, or no integer at all).
fn size_arg(what: &str, value: &Bound<'_, PyAny>) -> PyResult<usize> {
    value.extract::<usize>().map_err(|_| {
        let shown = value
            .repr()
            .map_or_else(|_| "?".to_owned(), |r| r.to_string());
        config_error(format!(
            "{what} must be an integer in 0..={}, got {shown}",
            usize::MAX
        ))
    })
}

fn parse_fields(fields: Vec<FieldArg<'_>>) -> PyResult<Vec<Field>> {
    fields
        .into_iter()
        .map(|(name, dtype, shape)| {
            let dt = DType::from_name(&dtype).ok_or_else(|| {
                config_error(format!("field '{name}': unsupported dtype '{dtype}'"))
            })?;
            let what = format!("field '{name}': every shape dimension");
            let shape = shape
                .iter()
                .map(|d| size_arg(&what, d))
                .collect::<PyResult<Vec<usize>>>()?;
            Ok(Field::new(name, dt, &shape))
        })
        .collect()
}

/// The layout `Segment.create` and `segment_bytes` compute from the same arguments; only
/// offsets are computed, nothing is allocated.
#[allow(clippy::too_many_arguments)]
fn layout_of(
    fields: Vec<FieldArg<'_>>,
    n_workers: &Bound<'_, PyAny>,
    envs_per_worker: &Bound<'_, PyAny>,
    steps: &Bound<'_, PyAny>,
    slots_per_worker: &Bound<'_, PyAny>,
    weights_capacity: &Bound<'_, PyAny>,
    weights_buffers: &Bound<'_, PyAny>,
    mailbox_bytes: Option<&Bound<'_, PyAny>>,
    snapshot_bytes: Option<&Bound<'_, PyAny>>,
) -> PyResult<Layout> {
    // `None` (the Python default) is 0: no step channels, no snapshots.
    let optional = |name: &str, bytes: Option<&Bound<'_, PyAny>>| -> PyResult<usize> {
        Ok(bytes.map(|b| size_arg(name, b)).transpose()?.unwrap_or(0))
    };
    let mailbox_bytes = optional("mailbox_bytes", mailbox_bytes)?;
    let snapshot_bytes = optional("snapshot_bytes", snapshot_bytes)?;
    let params = LayoutParams::new(
        parse_fields(fields)?,
        size_arg("n_workers", n_workers)?,
        size_arg("envs_per_worker", envs_per_worker)?,
        size_arg("steps", steps)?,
        size_arg("slots_per_worker", slots_per_worker)?,
    )
    .with_weights(
        size_arg("weights_capacity", weights_capacity)?,
        size_arg("weights_buffers", weights_buffers)?,
    )
    .with_mailbox(mailbox_bytes)
    .with_snapshots(snapshot_bytes);
    Layout::new(params).map_err(py_err)
}

/// The size in bytes of the segment `Segment.create` would map for these arguments, computed
/// from the layout alone: nothing is allocated, so it is the check to make before creating.
#[pyfunction]
#[pyo3(signature = (fields, *, n_workers, envs_per_worker, steps, slots_per_worker, weights_capacity, weights_buffers, mailbox_bytes=None, snapshot_bytes=None))]
#[allow(clippy::too_many_arguments)]
pub fn segment_bytes(
    fields: Vec<FieldArg<'_>>,
    n_workers: &Bound<'_, PyAny>,
    envs_per_worker: &Bound<'_, PyAny>,
    steps: &Bound<'_, PyAny>,
    slots_per_worker: &Bound<'_, PyAny>,
    weights_capacity: &Bound<'_, PyAny>,
    weights_buffers: &Bound<'_, PyAny>,
    mailbox_bytes: Option<&Bound<'_, PyAny>>,
    snapshot_bytes: Option<&Bound<'_, PyAny>>,
) -> PyResult<usize> {
    let layout = layout_of(
        fields,
        n_workers,
        envs_per_worker,
        steps,
        slots_per_worker,
        weights_capacity,
        weights_buffers,
        mailbox_bytes,
        snapshot_bytes,
    )?;
    Ok(layout.total_len())
}

fn attach_options(expected_layout_hash: Option<u64>, timeout_s: f64) -> PyResult<AttachOptions> {
    Ok(AttachOptions {
        ready_timeout: non_negative_seconds("timeout_s", timeout_s)?,
        expected_layout_hash,
    })
}

#[pymethods]
impl Segment {
    /// Creates a segment sized for `fields` over `n_workers` x `envs_per_worker` envs
    /// (`segment_bytes` of the same arguments says how big it will be).
    #[staticmethod]
    #[pyo3(signature = (fields, *, n_workers, envs_per_worker, steps, slots_per_worker, weights_capacity, weights_buffers, backing, mailbox_bytes=None, snapshot_bytes=None))]
    #[allow(clippy::too_many_arguments)]
    fn create(
        py: Python<'_>,
        fields: Vec<FieldArg<'_>>,
        n_workers: &Bound<'_, PyAny>,
        envs_per_worker: &Bound<'_, PyAny>,
        steps: &Bound<'_, PyAny>,
        slots_per_worker: &Bound<'_, PyAny>,
        weights_capacity: &Bound<'_, PyAny>,
        weights_buffers: &Bound<'_, PyAny>,
        backing: &str,
        mailbox_bytes: Option<&Bound<'_, PyAny>>,
        snapshot_bytes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let backing = match backing {
            "auto" => Backing::Auto,
            "memfd" => Backing::Memfd,
            "named" => Backing::Named,
            other => {
                return Err(config_error(format!(
                    "backing must be 'auto', 'memfd' or 'named', got '{other}'"
                )))
            }
        };
        let layout = layout_of(
            fields,
            n_workers,
            envs_per_worker,
            steps,
            slots_per_worker,
            weights_capacity,
            weights_buffers,
            mailbox_bytes,
            snapshot_bytes,
        )?;
        // Creating pre-faults every page, which can take a while for big segments.
        let inner = py
            .detach(|| CoreSegment::create_with(layout, backing))
            .map_err(py_err)?;
        Ok(Self::from_core(inner))
    }

    /// Attaches to the segment behind an inherited file descriptor (which is duplicated).
    #[staticmethod]
    #[pyo3(signature = (fd, *, timeout_s, expected_layout_hash=None))]
    fn attach(
        py: Python<'_>,
        fd: i32,
        timeout_s: f64,
        expected_layout_hash: Option<u64>,
    ) -> PyResult<Self> {
        if fd < 0 {
            return Err(config_error(format!(
                "fd must be a file descriptor, got {fd}"
            )));
        }
        let opts = attach_options(expected_layout_hash, timeout_s)?;
        // SAFETY: the caller passes a descriptor it owns for the duration of this call;
        // `attach` duplicates it before returning and never closes the original.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let inner = py
            .detach(|| CoreSegment::attach(borrowed, opts))
            .map_err(py_err)?;
        Ok(Self::from_core(inner))
    }

    /// Attaches to a named fallback segment (`/pycollect-...`).
    #[staticmethod]
    #[pyo3(signature = (name, *, timeout_s, expected_layout_hash=None))]
    fn attach_named(
        py: Python<'_>,
        name: &str,
        timeout_s: f64,
        expected_layout_hash: Option<u64>,
    ) -> PyResult<Self> {
        let opts = attach_options(expected_layout_hash, timeout_s)?;
        let inner = py
            .detach(|| CoreSegment::attach_named(name, opts))
            .map_err(py_err)?;
        Ok(Self::from_core(inner))
    }

    /// The segment's file descriptor in this process (pass it to children).
    #[getter]
    fn fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.inner.fd().as_raw_fd()
    }

    /// `/dev/shm` name of a named segment until unlinked; `None` for memfd.
    #[getter]
    fn name(&self) -> Option<String> {
        self.inner.name()
    }

    /// Removes the name of a named segment (once every party has attached). Does nothing in a
    /// process forked from the one that made this handle.
    fn unlink_name(&self) -> PyResult<()> {
        self.inner.unlink_name().map_err(py_err)
    }

    /// Hash of everything that determines the layout; attachers compare it.
    #[getter]
    fn layout_hash(&self) -> u64 {
        self.inner.layout().hash()
    }

    /// Number of workers.
    #[getter]
    fn n_workers(&self) -> usize {
        self.inner.layout().n_workers()
    }

    /// Environments per worker (K).
    #[getter]
    fn envs_per_worker(&self) -> usize {
        self.inner.layout().params().envs_per_worker
    }

    /// Steps per rollout (T).
    #[getter]
    fn steps(&self) -> usize {
        self.inner.layout().params().steps
    }

    /// Rollout slots in each worker's ring.
    #[getter]
    fn slots_per_worker(&self) -> usize {
        self.inner.layout().params().slots_per_worker
    }

    /// Bytes one set of weights may take in the weights store.
    #[getter]
    fn weights_capacity(&self) -> usize {
        self.inner.layout().params().weights_capacity
    }

    /// Bytes of each half of every worker's step-channel mailbox (0: no step channels).
    #[getter]
    fn mailbox_bytes(&self) -> usize {
        self.inner.layout().params().mailbox_bytes
    }

    /// Size of the segment in bytes.
    #[getter]
    fn total_len(&self) -> usize {
        self.inner.layout().total_len()
    }

    /// Base address of this process's mapping.
    #[getter]
    fn address(&self) -> usize {
        self.inner.base_ptr() as usize
    }

    /// The field table: `(name, dtype, shape)` for every field.
    fn fields(&self) -> Vec<FieldDef> {
        self.inner
            .layout()
            .params()
            .fields
            .iter()
            .map(|f| (f.name.clone(), f.dtype.name().to_owned(), f.shape.clone()))
            .collect()
    }

    /// View of one worker's rollout of `field` in `slot`: `[K, T, *shape]`.
    #[pyo3(signature = (field, slot, worker, *, writable=false))]
    fn slot_view(
        &self,
        field: &str,
        slot: usize,
        worker: usize,
        writable: bool,
    ) -> PyResult<SlotView> {
        let index = field_index(&self.inner, field)?;
        self.check_slot(slot)?;
        self.check_worker(worker)?;
        Ok(SlotView::of_worker(
            &self.inner,
            index,
            slot,
            worker,
            !writable,
            None,
        ))
    }

    /// View of `field` in `slot` for all workers at once: `[n_workers*K, T, *shape]`.
    #[pyo3(signature = (field, slot, *, writable=false))]
    fn batch_view(&self, field: &str, slot: usize, writable: bool) -> PyResult<SlotView> {
        let index = field_index(&self.inner, field)?;
        self.check_slot(slot)?;
        let layout = self.inner.layout();
        let (spec, _) = layout.field(index);
        let p = layout.params();
        let mut shape = vec![p.n_workers * p.envs_per_worker, p.steps];
        shape.extend_from_slice(&spec.shape);
        let (offset, _len) = layout.field_block(index, slot);
        Ok(SlotView::new(
            self.inner.mapping(),
            offset,
            &shape,
            spec.dtype,
            !writable,
            None,
        ))
    }

    /// Bytes of each rollout slot's snapshot area (0: none).
    #[getter]
    fn snapshot_bytes(&self) -> usize {
        self.inner.layout().params().snapshot_bytes
    }

    /// The snapshot area of `worker`'s `slot`: `SNAPSHOT_HEADER` bytes (the snapshot's length
    /// first, a little-endian u64), then `snapshot_bytes` bytes. The worker writes it before
    /// it commits the slot; whoever pops the slot reads it.
    #[pyo3(signature = (worker, slot, *, writable=false))]
    fn snapshot_view(&self, worker: usize, slot: usize, writable: bool) -> PyResult<SlotView> {
        self.check_slot(slot)?;
        self.check_worker(worker)?;
        let layout = self.inner.layout();
        let offset = layout.snapshot_offset(worker, slot).ok_or_else(|| {
            config_error("this segment has no snapshots: it was created with snapshot_bytes=0")
        })?;
        let len = SNAPSHOT_HEADER + layout.params().snapshot_bytes;
        Ok(SlotView::new(
            self.inner.mapping(),
            offset,
            &[len],
            DType::U8,
            !writable,
            None,
        ))
    }

    /// The producing end of `worker`'s data ring, for the given generation.
    fn producer(&self, worker: usize, generation: u64) -> PyResult<Producer> {
        self.check_worker(worker)?;
        Producer::new(&self.inner, worker, generation)
    }

    /// The consuming end of `worker`'s data ring.
    fn consumer(slf: Bound<'_, Self>, worker: usize) -> PyResult<Consumer> {
        let this = slf.get();
        this.check_worker(worker)?;
        let core = Arc::clone(&this.inner);
        Consumer::new(slf.into_any().unbind(), core, worker)
    }

    /// `worker`'s control block.
    fn worker_control(&self, worker: usize) -> PyResult<WorkerControl> {
        self.check_worker(worker)?;
        WorkerControl::new(&self.inner, worker)
    }

    /// `worker`'s step channel: the same object on every call for this handle.
    fn step_channel(&self, py: Python<'_>, worker: usize) -> PyResult<Py<StepChannel>> {
        self.check_worker(worker)?;
        let mut channels = self.step_channels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(channel) = &channels[worker] {
            return Ok(channel.clone_ref(py));
        }
        let channel = Py::new(py, StepChannel::new(&self.inner, worker)?)?;
        channels[worker] = Some(channel.clone_ref(py));
        Ok(channel)
    }

    /// The weights store's writing end (the trainer).
    fn weights_writer(&self) -> PyResult<WeightsWriter> {
        WeightsWriter::new(&self.inner)
    }

    /// The weights store's reading end for `worker`.
    fn weights_reader(&self, worker: usize) -> PyResult<WeightsReader> {
        self.check_worker(worker)?;
        WeightsReader::new(&self.inner, worker)
    }

    /// Sets the shutdown flag and wakes every waiter (idempotent). Does nothing in a process
    /// forked from the one that made this handle.
    fn shutdown(&self) {
        self.inner.shutdown();
    }

    /// Whether the shutdown flag is set.
    #[getter]
    fn is_shutdown(&self) -> bool {
        self.inner.is_shutdown()
    }

    /// A read-only view of this segment's metrics and workers (what `pycollect top` reads).
    fn watch(&self) -> Watch {
        Watch {
            inner: CoreWatch::of(&self.inner),
        }
    }

    /// Trainer: a batch of `frames` frames was delivered after `wait_ns` of waiting for its
    /// data; `lag_sum`, `lag_min` and `lag_max` are its frames' policy lag (versions behind
    /// the latest), `dropped` the frames left out for too large a lag.
    #[allow(clippy::too_many_arguments)]
    fn count_batch(
        &self,
        frames: u64,
        wait_ns: u64,
        lag_sum: u64,
        lag_min: u64,
        lag_max: u64,
        dropped: u64,
    ) {
        self.inner.trainer_metrics().batch_done(BatchCount {
            frames,
            wait_ns,
            lag_sum,
            lag_min,
            lag_max,
            dropped,
        });
    }

    /// Trainer of a vector env, whose batches are steps: `steps` steps, `frames` frames in all.
    fn count_steps(&self, steps: u64, frames: u64) {
        self.inner.trainer_metrics().steps_done(steps, frames);
    }

    /// Trainer: the weights of `version`, `size` bytes, were published in `ns` nanoseconds.
    fn count_publish(&self, version: u64, size: u64, ns: u64) {
        self.inner.trainer_metrics().published(version, size, ns);
    }

    /// Trainer: a policy call of its own (the central engine's) took `ns` nanoseconds.
    fn count_policy(&self, ns: u64) {
        self.inner.trainer_metrics().policy_ran(ns);
    }

    /// Trainer, once: what the collection is (``pycollect top``'s title); at most 248 bytes
    /// of UTF-8 are kept.
    fn describe(&self, text: &str) {
        self.inner.trainer_metrics().set_description(text);
    }

    fn __repr__(&self) -> String {
        let p = self.inner.layout().params();
        format!(
            "Segment(n_workers={}, envs_per_worker={}, steps={}, slots_per_worker={}, total_len={}, fd={})",
            p.n_workers,
            p.envs_per_worker,
            p.steps,
            p.slots_per_worker,
            self.inner.layout().total_len(),
            self.fd()
        )
    }
}

/// Removes named fallback segments (`/dev/shm/pycollect-<pid>-...`) whose creator is dead;
/// returns their names. memfd segments never need this: they vanish with their last user.
#[pyfunction]
pub fn sweep_stale_segments() -> PyResult<Vec<String>> {
    pycollect_core::segment::sweep_stale_named_segments()
        .map_err(|e| transport_error(format!("sweeping /dev/shm failed: {e}")))
}

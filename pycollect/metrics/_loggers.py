"""A collection's metrics as scalars of the loggers people train with: TensorBoard, TorchRL's, W&B."""

from __future__ import annotations

from typing import Any

from pycollect.exceptions import ConfigError
from pycollect.metrics._reading import CollectionMetrics

__all__ = ["log_metrics"]

# A worker's fields that are no figure to plot: its index is in the tag, a pid, a state's name.
_NOT_SCALARS = ("worker", "pid", "state")


def _scalars(metrics: CollectionMetrics, prefix: str) -> dict[str, float]:
    """``{tag: value}``: the trainer's figures, then each worker's, those it has."""
    scalars = {f"{prefix}/trainer/{name}": float(value) for name, value in vars(metrics.trainer).items()}
    for worker in metrics.workers:
        for name, value in vars(worker).items():
            if name not in _NOT_SCALARS and value is not None:
                scalars[f"{prefix}/worker_{worker.worker}/{name}"] = float(value)
    return scalars


def log_metrics(logger: Any, metrics: CollectionMetrics, step: int, *, prefix: str = "pycollect") -> None:
    """Write ``metrics`` as scalars at ``step`` to a TensorBoard, TorchRL or W&B-style logger.

    Tags are ``PREFIX/trainer/FIELD`` and ``PREFIX/worker_I/FIELD``, one per number of
    :class:`TrainerMetrics` and :class:`WorkerMetrics` (``frames_per_s``, ``wait_share``, ...;
    ``straggler`` as 0 or 1). A worker's ``pid`` and ``state`` are not written, nor a figure it
    does not have (``step_p50_s`` before its first step).

    Args:
        logger: Where to write, by the first method it has: ``add_scalar(tag, value, step)``
            (``torch.utils.tensorboard.SummaryWriter``), ``log_scalar(name, value, step=step)``
            (TorchRL's loggers: ``TensorboardLogger``, ``WandbLogger``, ``CSVLogger``, ...) or
            ``log(dict, step=step)`` (a ``wandb`` run, once for all the figures).
        metrics: The figures, e.g. ``collector.stats().metrics``.
        step: The step to log them at (your training step, or the frames collected).
        prefix: The first part of every tag.

    Raises:
        ConfigError: ``logger`` has none of the three methods.
    """
    scalars = _scalars(metrics, prefix)
    if callable(getattr(logger, "add_scalar", None)):
        for tag, value in scalars.items():
            logger.add_scalar(tag, value, step)
    elif callable(getattr(logger, "log_scalar", None)):
        for tag, value in scalars.items():
            logger.log_scalar(tag, value, step=step)
    elif callable(getattr(logger, "log", None)):
        logger.log(scalars, step=step)
    else:
        raise ConfigError(
            f"log_metrics: a {type(logger).__name__} is no logger it knows: it looks for add_scalar "
            "(TensorBoard's SummaryWriter), log_scalar (TorchRL's loggers) or log (a W&B run)"
        )

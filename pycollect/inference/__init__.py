"""The inference-runner extension point: how the policy is called on a batch of observations.

A collector calls its policy once per step on the observations of the envs stepped together
(all of them with ``engine="central"``, in the trainer). An :class:`InferenceRunner` decides
how that call is made: as it is (``"plain"``, the default), through ``torch.compile``
(``"compile"``), or however a plugin's runner does it (a CUDA graph, a dedicated thread).
Plugins contribute runners through the ``register_inference_runner()`` hook; users pick one
with ``Collector(..., inference_runner="<name>")`` or an instance carrying its options.
"""

from __future__ import annotations

from pycollect.inference.runner import InferenceRunner

__all__ = ["InferenceRunner"]

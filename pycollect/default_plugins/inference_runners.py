"""The built-in inference runners, ``plain`` and ``compile``, registered as any plugin's would be."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pycollect.exceptions import ConfigError, PolicyError
from pycollect.hookspecs import hookimpl
from pycollect.inference.runner import InferenceRunner

if TYPE_CHECKING:
    import torch

__all__ = ["CompileRunner", "PlainRunner"]


class PlainRunner(InferenceRunner):
    """The policy, called as it is (the default)."""

    name = "plain"

    def prepare(self, policy: Callable[..., Any], device: torch.device) -> Callable[..., Any]:
        """``policy`` itself."""
        return policy

    def __eq__(self, other: object) -> bool:
        return type(other) is PlainRunner

    def __hash__(self) -> int:
        return hash(PlainRunner)


_COMPILE_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


class CompileRunner(InferenceRunner):
    """The policy through ``torch.compile``: compiled on its first call, shape by shape.

    The compiled module shares the policy's parameters, so new weights reach it. Compiling
    takes seconds to minutes on the first call (and again for each new batch shape: the
    ``central`` engine's batch is fixed, an async pool's may take two shapes); it pays off for
    convolutional or large policies called many times.

    Args:
        mode: ``torch.compile``'s mode (``None``: its default; ``"reduce-overhead"`` uses CUDA
            graphs on a GPU).
        fullgraph: Refuse graph breaks (``torch.compile``'s ``fullgraph``).
        dynamic: ``torch.compile``'s ``dynamic``.
        backend: ``torch.compile``'s backend (``"inductor"``, the default, generates code;
            ``"eager"`` only traces, which is quick and changes no result: for tests).

    Raises:
        ConfigError: An unknown ``mode``.
    """

    name = "compile"

    def __init__(
        self,
        mode: str | None = None,
        *,
        fullgraph: bool = False,
        dynamic: bool | None = None,
        backend: str = "inductor",
    ) -> None:
        if mode not in _COMPILE_MODES:
            raise ConfigError(
                f"CompileRunner(mode={mode!r}): torch.compile's mode is one of {', '.join(map(repr, _COMPILE_MODES))}"
            )
        if not isinstance(backend, str) or not backend:
            raise ConfigError(f"CompileRunner(backend={backend!r}): the name of a torch.compile backend")
        self.mode, self.fullgraph, self.dynamic, self.backend = mode, fullgraph, dynamic, backend

    def prepare(self, policy: Callable[..., Any], device: torch.device) -> Callable[..., Any]:
        """``torch.compile(policy, ...)``: a wrapper sharing the policy's parameters.

        Raises:
            PolicyError: ``torch.compile`` refuses the policy (its message says why).
        """
        import torch

        try:
            return torch.compile(
                policy, mode=self.mode, fullgraph=self.fullgraph, dynamic=self.dynamic, backend=self.backend
            )
        except Exception as exc:  # torch raises RuntimeError or its own errors here
            raise PolicyError(f"inference_runner='compile': torch.compile refused the policy: {exc}") from exc

    def describe(self) -> str:
        """``compile`` with its options."""
        return (
            f"compile(mode={self.mode!r}, fullgraph={self.fullgraph}, dynamic={self.dynamic}, backend={self.backend!r})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CompileRunner) and self._options() == other._options()

    def __hash__(self) -> int:
        return hash((CompileRunner, *self._options()))

    def _options(self) -> tuple[Any, ...]:
        return (self.mode, self.fullgraph, self.dynamic, self.backend)


@hookimpl
def register_inference_runner() -> Sequence[type[InferenceRunner]]:
    """Register :class:`PlainRunner` and :class:`CompileRunner`."""
    return [PlainRunner, CompileRunner]

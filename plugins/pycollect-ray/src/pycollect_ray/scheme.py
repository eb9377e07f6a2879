"""The ``ray`` weight-sync scheme: weights reach Ray actors through the object store."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pycollect.exceptions import ConfigError
from pycollect.weights import WeightSyncScheme

if TYPE_CHECKING:
    import torch

    from pycollect.weights.scheme import SenderContext, WeightSender

__all__ = ["RayScheme"]


class RayScheme(WeightSyncScheme):
    """Trainer to actors through the Ray object store; actors to their workers through ``local``.

    ``update_policy_weights_()`` puts the state dict in the object store once per version
    (:meth:`publish`); every actor fetches that one object (:meth:`fetch`) between rollouts and
    loads it into its local collector, whose own scheme (``local``, ``"shared_memory"`` by
    default) takes it to the actor's workers and stamps the version on every frame. The
    trainer's version is the actors' version.

    It is the scheme of ``engine="ray"`` (the default there) and works with that engine only:
    a single-machine collector has no actors to send to.

    Args:
        local: The weight-sync scheme of each actor's local collector (a registered name).
    """

    name = "ray"

    def __init__(self, local: str = "shared_memory") -> None:
        if not isinstance(local, str) or local == self.name:
            raise ConfigError(f"RayScheme(local={local!r}): name the scheme actors use locally, e.g. 'shared_memory'")
        self.local = local

    def sender(self, context: SenderContext) -> WeightSender:
        """Refused: this scheme moves weights between Ray actors, not to local workers."""
        raise ConfigError(
            "weight_sync='ray' carries weights to Ray actors and needs engine='ray' "
            "(pycollect_ray.RayEngine); local workers use weight_sync='shared_memory'"
        )

    def publish(self, state: Mapping[str, torch.Tensor]) -> Any:
        """Put one version's state dict in the object store (once) and return its ``ObjectRef``."""
        import ray

        return ray.put({name: tensor.detach().cpu() for name, tensor in state.items()})

    def fetch(self, ref: Any) -> dict[str, torch.Tensor]:
        """In an actor: the state dict behind ``ref``."""
        import ray

        return dict(ray.get(ref))

    def __repr__(self) -> str:
        return f"RayScheme(local={self.local!r})"

"""Checking that a config travels whole: every setting arrives where it is sent, unchanged.

An engine that builds collectors elsewhere (other processes, other machines) passes them the
trainer's :class:`~pycollect.CollectorConfig`. Its test sets every setting away from its
default (:func:`changed_supervision` for the supervision part) and compares what arrives
setting by setting with :func:`same_setting`, so that a setting added later is checked too.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pycollect.config import SupervisionConfig

__all__ = ["changed_supervision", "same_setting", "unchanged_settings"]


def changed_supervision() -> SupervisionConfig:
    """A :class:`~pycollect.SupervisionConfig` whose every setting differs from its default."""
    return SupervisionConfig(
        restart="transient",
        max_restarts=4,
        restart_window_s=30.0,
        heartbeat_timeout_s=25.0,
        startup_timeout_s=100.0,
        backoff_initial_s=0.2,
        backoff_max_s=4.0,
        check_interval_s=0.05,
        shutdown_grace_s=1.5,
        term_timeout_s=1.5,
    )


def same_setting(here: Any, there: Any) -> bool:
    """Whether two values of one setting agree: equal, or plugin objects of one class with equal attributes.

    A plugin object (a scheme, a device policy, an engine) has no equality of its own; one
    that travelled by pickle is a copy, equal in class and attributes.
    """
    if here == there:
        return True
    return hasattr(here, "__dict__") and type(here) is type(there) and vars(here) == vars(there)


def unchanged_settings(config: Any, defaults: Any, skip: frozenset[str] = frozenset()) -> list[str]:
    """The fields of the dataclass ``config`` (but ``skip``) still equal to those of ``defaults``.

    A test that checks settings travel sets them all; this names the ones it forgot.
    """
    return [
        field.name
        for field in dataclasses.fields(config)
        if field.name not in skip and same_setting(getattr(config, field.name), getattr(defaults, field.name))
    ]

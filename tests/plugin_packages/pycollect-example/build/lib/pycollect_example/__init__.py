"""pycollect-example: an env backend (``example``) and a weight-sync scheme (``file``)."""

from __future__ import annotations

import pycollect
from pycollect_example.backend import WalkBackend
from pycollect_example.scheme import FileScheme


@pycollect.hookimpl
def register_env_backend():
    return WalkBackend


@pycollect.hookimpl
def register_scheme():
    return [FileScheme]

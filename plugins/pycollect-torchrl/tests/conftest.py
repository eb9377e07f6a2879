"""Shared test setup: headless MuJoCo, and the factories module importable by workers.

Leftover processes and segments are checked by pycollect's own pytest plugin, switched on for
every test by ``pycollect_check_leftovers`` in this package's pyproject.toml.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "disable")  # dm_control never renders here; workers inherit it

# Worker processes get the trainer's sys.path, so they can import the factories module.
sys.path.insert(0, str(Path(__file__).parent))

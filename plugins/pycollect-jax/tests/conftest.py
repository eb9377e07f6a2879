"""Shared test setup: the helpers module importable by workers.

Leftover processes and segments are checked by pycollect's own pytest plugin, switched on for
every test by ``pycollect_check_leftovers`` in this package's pyproject.toml.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Worker processes get the trainer's sys.path, so they can import the helpers module.
sys.path.insert(0, str(Path(__file__).parent))

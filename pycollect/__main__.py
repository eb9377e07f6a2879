"""``python -m pycollect`` is the same as the ``pycollect`` command."""

from pycollect.cli import main

raise SystemExit(main())

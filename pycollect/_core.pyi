"""Type stubs for the native module ``pycollect._core`` (built from rust/pycollect-py)."""

__version__: str

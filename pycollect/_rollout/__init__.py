"""Work in progress: this package is being carved out (see docs/architecture.md)."""

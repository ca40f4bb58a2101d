"""The package version, a constant: importable from anywhere (it imports nothing)."""

__version__ = "0.1.0"

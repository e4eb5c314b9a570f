"""The `annotate` command: load a torch file, trace its entry, write JAX beside it or as a module."""

__version__ = "0.1.0"

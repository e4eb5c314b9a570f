"""The `annotate` command: load a torch file, trace its entry, write JAX beside it or as a module."""

"""Trace -> source: JAX comments beside torch lines, a structured JAX module, an HTML view."""

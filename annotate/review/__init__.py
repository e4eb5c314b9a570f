"""``annotate review TORCH_FILE PORT_FILE``: check a hand-written JAX port against its torch original.

The command and its run: `command`. Which files are the port: `files`. Weights onto the port: `mapping`
(plain pytrees by path), `fit` and `frameworks` (Flax and Equinox modules), `modules` (tracing a module
port), `loader` (`--port-weights`). The comparison: `align` (values, first divergence), `outputs` (results
leaf by leaf). What the user reads: `report` (text), `page` (HTML).
"""

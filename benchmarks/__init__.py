"""Benchmarks: capture overhead, the annotate CLI, exported-module runtime, rendering speed.

``python -m benchmarks`` prints the table (``make bench``); ``python -m benchmarks --smoke``
runs a tiny version of every row, without judging the numbers. docs/performance.md has the
table and how to read it. Importing this package imports neither torch nor jax: the plain
Python row also runs on interpreters that have no torch.
"""

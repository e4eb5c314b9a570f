"""`python -m jaxside`: the `annotate` command."""

import runpy

runpy.run_module("jaxside.annotate", run_name="__main__", alter_sys=True)

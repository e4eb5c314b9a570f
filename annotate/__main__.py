import os
import sys

from jaxside.annotate.cli import command
from jaxside.annotate.errors import EXIT_INTERRUPTED

code = command()
if code == EXIT_INTERRUPTED:
    # Interrupted, maybe inside a library's import: skip the interpreter's teardown of whatever
    # was left half-built (it can crash), once everything is flushed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
raise SystemExit(code)

import os
import sys

from jaxside.annotate.cli import main
from jaxside.annotate.collecting import leave
from jaxside.annotate.errors import EXIT_INTERRUPTED

code = main()
if code == EXIT_INTERRUPTED:
    # Interrupted, maybe inside a library's import: skip the interpreter's teardown of whatever
    # was left half-built (it can crash), once everything is flushed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
leave(code)  # the heap not freed object by object (`annotate.collecting`)

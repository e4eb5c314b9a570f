"""``python -m benchmarks.peak OUT (-m MODULE | -c CODE) [ARGS...]``: run, then write the peak memory to OUT.

The peak is the process's own ``VmHWM``: `wait4`'s ``ru_maxrss`` would also count the
parent's memory, which a child started with fork or vfork carries until it execs.
"""

from __future__ import annotations

import atexit
import runpy
import sys
from pathlib import Path


def main() -> None:
    out, how, what, *args = sys.argv[1:]

    @atexit.register
    def report() -> None:
        status = Path("/proc/self/status")
        if status.exists():
            kilobytes = next(line.split()[1] for line in status.read_text().splitlines()
                             if line.startswith("VmHWM:"))
        else:  # not Linux: the OS's peak, which may include the parent's
            import resource

            kilobytes = str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        Path(out).write_text(kilobytes)

    sys.argv = [what, *args]
    if how == "-c":
        exec(compile(what, "<string>", "exec"), {"__name__": "__main__"})
    else:
        runpy.run_module(what, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

"""Where results go: ``-o`` (written only when it changed, never over FILE) or stdout."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from annotate.errors import Failure


def emit(text: str, options: argparse.Namespace) -> None:
    """Write the result to ``-o`` (only if it changed) or to stdout."""
    if options.output:
        write(text, options.output, options.file, "-o")
    else:
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
        sys.stdout.flush()


def write(text: str, path: str, file: str, flag: str) -> None:
    target = Path(path)
    check_target(path, file, flag)
    try:
        if target.exists() and target.read_bytes() == text.encode("utf-8"):
            print(f"annotate: {path} unchanged", file=sys.stderr)
            return
        with open(target, "w", encoding="utf-8", newline="") as out:
            out.write(text)
    except OSError as error:
        raise Failure(f"cannot write it ({error.strerror})",
                      "choose a path in a directory you can write to", file=path) from None
    print(f"annotate: wrote {path}", file=sys.stderr)


def check_target(path: str, file: str, flag: str) -> None:
    target = Path(path)
    source = Path(file)
    if target.resolve() == source.resolve() or (
        target.exists() and source.exists() and os.path.samefile(target, source)
    ):
        raise Failure(f"{flag} names FILE itself, and annotate never overwrites its input",
                      f"write somewhere else, e.g. {flag} {source.stem}_jax.py", file=path)
    if target.is_dir():
        raise Failure(f"{flag} names a directory", "give a file path", file=path)
    directory = target.resolve().parent
    if not directory.is_dir():
        raise Failure(f"its directory {directory} does not exist", f"create it, or choose another {flag}",
                      file=path)
    if not os.access(directory, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise Failure("cannot write there (permission denied)",
                      f"choose another {flag} in a directory you can write to", file=path)

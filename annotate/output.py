"""Where results go: ``-o`` or stdout, written whole and only when changed, never over FILE or
over a file annotate did not write (unless ``--force``). Files carry annotate's seal (seal.py)."""

from __future__ import annotations

import contextlib
import io
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jaxside.annotate import interrupts
from jaxside.annotate.errors import Failure
from jaxside.annotate.loading import is_link_loop
from jaxside.annotate.seal import is_sealed, seal


@dataclass(frozen=True)
class Guard:
    """What decides whether a path may be written: the input never written over (`file`), and
    whether a file annotate did not write may be replaced (`force`)."""

    file: str
    force: bool = False


Say = Callable[[str], None]
"""Where "wrote PATH" goes (a run's `Status.say`)."""


def emit(
    text: str, output: str | None, guard: Guard, say: Say, *, encoding: str = "utf-8", form: str = "python"
) -> None:
    """Write the result to `output` (``-o``: only if it changed) or, when it is None or ``-``, to
    stdout, encoded in `encoding`."""
    if output and output != "-":
        write(text, output, guard, "-o", say, encoding=encoding, form=form)
    else:
        to_stdout(text if text.endswith("\n") or not text else text + "\n", encoding)


def _encode(text: str, encoding: str) -> bytes:
    # Only comments can hold what the encoding lacks (FILE's own text came from it): escape it there.
    return text.encode(encoding, errors="backslashreplace")


def to_stdout(text: str, encoding: str = "utf-8") -> None:
    """Bytes on stdout, the same `-o` would write, whatever encoding the terminal or locale has."""
    interrupts.check()
    try:
        sys.stdout.flush()
        buffer = getattr(sys.stdout, "buffer", None)
        if buffer is None:  # a text-only stream put in place of stdout
            sys.stdout.write(text)
            sys.stdout.flush()
        else:
            buffer.write(_encode(text, encoding))
            buffer.flush()
    except OSError as error:  # a full disk (`> /dev/full`), a closed pipe
        _drop_stdout()
        raise Failure(f"cannot write it ({error.strerror or error})",
                      "free space on its device, or write to a file with -o PATH", file="<stdout>") from None


def _drop_stdout() -> None:
    """Point stdout at the null device, so what failed to be written is not tried again at exit
    (Python's own flush would print a second error)."""
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        sys.stdout.flush()
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """While user code runs: its prints, and its writes to file descriptor 1 (`os.write(1, ...)`,
    `sys.__stdout__`, C code), go to stderr, so stdout carries only what annotate writes."""
    saved = _stdout_fd_to_stderr()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            _flush(sys.__stdout__)
            os.dup2(saved, 1)
            os.close(saved)


def _stdout_fd_to_stderr() -> int | None:
    """Point fd 1 at fd 2; a copy of the old fd 1 to restore (None where fds cannot be moved)."""
    _flush(sys.stdout)
    _flush(sys.__stdout__)
    try:
        saved = os.dup(1)
    except OSError:
        return None
    try:
        os.dup2(2, 1)
    except OSError:
        os.close(saved)
        return None
    return saved


def _flush(stream: Any) -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        stream.flush()


def write(
    text: str, path: str, guard: Guard, flag: str, say: Say, *,
    encoding: str = "utf-8", form: str = "python",
) -> bool:
    """Write `text` to `path` when it changed: whole or not at all (a temporary file renamed over it),
    sealed as `form` (``python``, ``module``, ``html`` or ``json``); stdout gets the text alone. Whether the
    file changed."""
    interrupts.check()
    if path == "-":
        to_stdout(text, encoding)
        return True
    check_target(path, guard, flag)
    data = seal(_encode(text, encoding), form)
    target = Path(path).resolve()
    try:
        if target.is_file() and target.read_bytes() == data:
            say(f"{path} unchanged")
            return False
        _replace(target, data)
    except OSError as error:
        raise Failure(f"cannot write it ({error.strerror})",
                      "choose a path in a directory you can write to", file=path) from None
    say(f"wrote {path}")
    return True


def _replace(target: Path, data: bytes) -> None:
    if target.exists() and not target.is_file():  # a device or a pipe: write into it
        with open(target, "wb") as out:
            out.write(data)
        return
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o666 & ~_umask()
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(temporary, mode)
        interrupts.check()
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _lower(text: str | None) -> str:
    return (text[:1].lower() + text[1:]) if text else "cannot create a file"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def refuse_link_loop(path: str, flag: str) -> None:
    """Refuse an output path that is a symbolic link loop (nothing can be written through it)."""
    if is_link_loop(Path(path)):
        raise Failure(f"{flag} names a symbolic link loop (it leads back to itself)",
                      f"remove the link, or choose another {flag}", file=path)


def check_target(path: str, guard: Guard, flag: str) -> None:
    """Refuse an output path before anything runs: FILE itself, a directory, a place that cannot
    be written (tried, not guessed: root passes every permission check), or an existing file
    annotate did not write, unless --force."""
    target = Path(path)
    source = Path(guard.file)
    refuse_link_loop(path, flag)
    if target.resolve() == source.resolve() or (
        target.exists() and source.exists() and os.path.samefile(target, source)
    ):
        raise Failure(f"{flag} names FILE itself, and annotate never overwrites its input",
                      f"write somewhere else, e.g. {flag} {source.stem}_jax.py", file=path)
    if target.is_dir():
        raise Failure(f"{flag} names a directory", "give a file path", file=path)
    resolved = target.resolve()
    directory = resolved.parent
    if not directory.is_dir():
        raise Failure(f"its directory {directory} does not exist", f"create it, or choose another {flag}",
                      file=path)
    denied = Failure("cannot write there (permission denied)",
                     f"choose another {flag} in a directory you can write to", file=path)
    if resolved.exists() and not resolved.is_file():  # a device or a pipe is written into
        if not os.access(resolved, os.W_OK):
            raise denied
        return
    if resolved.exists() and not os.access(resolved, os.W_OK):
        raise denied
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=f".{resolved.name}.", suffix=".tmp"):
            pass
    except OSError as error:
        raise Failure(f"cannot write there ({_lower(error.strerror)})",
                      f"choose another {flag} in a directory you can write to", file=path) from None
    if resolved.is_file() and not guard.force and not _written_by_annotate(resolved):
        raise Failure("exists without annotate's seal (annotate did not write it, or it was edited since)",
                      f"pass --force to replace it, or choose another {flag}", file=path)


def _written_by_annotate(target: Path) -> bool:
    """Whether replacing `target` loses nothing: it is empty, or carries annotate's seal unbroken
    (seal.py; files of annotate before the seal have none, and need --force once)."""
    try:
        data = target.read_bytes()
    except OSError:
        return False
    return not data.strip() or is_sealed(data)

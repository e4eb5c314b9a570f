"""What the command line's own text says, checked before torch or jax is imported (seconds).

The ``--entry``, ``--inputs`` and ``--kwargs`` expressions and the ``--setup`` statements must
parse: a typo is reported at once as one line naming the flag, not after the imports. `loading`
compiles them again, with these same errors, when it evaluates them in FILE's namespace.
"""

from __future__ import annotations

import shlex
from types import CodeType

from jaxside.annotate.errors import Failure
from jaxside.annotate.options import Source

EXPRESSIONS = ("entry", "inputs", "kwargs")
"""The options holding one Python expression each (evaluated in FILE's namespace)."""


def check_expressions(source: Source) -> None:
    """Refuse an ``--entry``, ``--inputs``, ``--kwargs`` or ``--setup`` that does not parse."""
    for name in EXPRESSIONS:
        text = getattr(source, name)
        if text is not None:
            compiled_expression(f"--{name}", text, source.file)
    if source.setup is not None:
        compiled_statements("--setup", source.setup, source.file)


def compiled_expression(option: str, expression: str, file: str | None) -> CodeType:
    """`expression` compiled for `eval`, or a `Failure` naming `option` and what is wrong."""
    return _compiled(option, expression, "eval", file)


def compiled_statements(option: str, statements: str, file: str | None) -> CodeType:
    """`statements` compiled for `exec`, or a `Failure` naming `option` and what is wrong."""
    return _compiled(option, statements, "exec", file)


_KINDS = {
    "eval": ("a Python expression", "give an expression such as 'Net()' or '(torch.randn(2, 8),)'"),
    "exec": ("Python", "give statements such as 'model.setup_caches(1, 64)'"),
}


def _compiled(option: str, text: str, mode: str, file: str | None) -> CodeType:
    try:
        return compile(text, f"<{option}>", mode, dont_inherit=True)
    except (SyntaxError, ValueError) as error:
        what, fix = _KINDS[mode]
        raise Failure(f"{option} {shlex.quote(text)} is not {what} ({_why(error)})", fix, file=file) from None


def _why(error: Exception) -> str:
    return error.msg if isinstance(error, SyntaxError) else str(error)

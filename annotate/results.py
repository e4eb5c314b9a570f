"""Every output of one run from its one trace: the main result, ``--json PATH``, ``--html PATH``, ``--check``.

The main result is the module with ``--export``, the JSON map with a bare ``--json``, else the
comments; it goes to ``-o PATH`` or stdout, and ``-o DIR/`` (comments only) writes an annotated
copy of every file whose code made JAX. The comments are written unless only other outputs were
asked for (``--html PATH`` or ``--json PATH`` without ``-o``). ``--check`` adds the comparison
with torch to whichever of these is written. What cannot be done together is refused by
`check_outputs` before torch or jax is imported.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jaxside.annotate import files
from jaxside.annotate.collecting import ordinary
from jaxside.annotate.errors import EXIT_OK, Failure
from jaxside.annotate.options import MAIN, Options
from jaxside.annotate.output import Guard, Say, check_target, emit, refuse_link_loop, stdout_to_stderr, write

__all__ = ["MAIN", "check_outputs", "main_result", "run_export", "write_results"]


def main_result(options: Options) -> str | None:
    """What goes to ``-o`` or stdout: "module", "json", "comments", or None (only other outputs)."""
    outputs = options.outputs
    if options.jax.export:
        return "module"
    if outputs.json is MAIN:
        return "json"
    if outputs.output or not (outputs.html or outputs.json):
        return "comments"
    return None


def check_outputs(options: Options) -> None:
    """Refuse a combination of outputs that cannot be written from one run, before any import."""
    outputs = options.outputs
    if outputs.json is MAIN and options.jax.export:
        raise Failure("a bare --json and --export both want to be the result on stdout or -o",
                      "give the map its own path: --export -o model_jax.py --json map.json")
    main = main_result(options)
    directory = files.is_directory(outputs.output)
    if directory and main != "comments":
        what = "--export writes one module" if main == "module" else "--json writes one map of every file"
        raise Failure(f"-o DIR/ writes an annotated copy of each traced file, and {what}",
                      "give -o a file path", file=outputs.output)
    if outputs.file_name is not None:
        if directory:
            raise Failure("--file shows one file's comments, and -o DIR/ writes every file's",
                          "give one of them")
        if main != "comments" and not outputs.html:
            raise Failure("--file chooses which file's comments or HTML view to write, and this run writes "
                          "neither", "drop --file, or add --html PATH")
    paths = _paths(options)
    stdout = [f"{flag} -" for flag, path in paths.items() if path == "-"]
    if main and not outputs.output:
        stdout.insert(0, f"the {main}")
    if len(stdout) > 1:
        two = len(stdout) == 2
        raise Failure(f"{' and '.join(stdout)} {'both' if two else 'all'} want stdout",
                      "write one of them to a file" if two else "write all but one of them to files")
    for flag, path in paths.items():
        if path and path != "-":
            refuse_link_loop(path, flag)
    named = [(flag, Path(path).resolve()) for flag, path in paths.items() if path and path != "-"]
    for n, (flag, path) in enumerate(named):
        clash = next((other for other, second in named[n + 1:] if second == path), None)
        if clash is not None:
            raise Failure(f"{flag} and {clash} name the same file", "give them different paths",
                          file=str(paths[flag]))
    if directory:
        files.check_directory(outputs.output, options.source.file)
    for flag, path in paths.items():
        if path and path != "-" and not (flag == "-o" and directory):
            check_target(path, _guard(options), flag)


def _paths(options: Options) -> dict[str, str | None]:
    """The path each output flag names (None: not written)."""
    outputs = options.outputs
    return {"-o": outputs.output if main_result(options) else None, "--html": outputs.html,
            "--json": outputs.json if isinstance(outputs.json, str) else None}


def write_results(
    options: Options,
    trace: Any,
    entry: Any,
    retrace: Callable[[Any], Any] | None,
    say: Say,
    status: Any = None,
) -> int:
    """Write every output the options ask for from `trace`, lowered once (with `retrace`, sizes
    that follow the inputs generic) for all of them: the comments, the page and the map show the
    program the module is; the exit code (1: --check found a mismatch). `status`, the command
    line's, hears the lowering's steps and shows the writing as a phase."""
    from jaxside.annotate.loading import source_encoding
    from jaxside.render.lower import lower

    main, outputs, written = main_result(options), options.outputs, _guard(options)
    traced = files.choose(trace, options.source.file, outputs.file_name, _shown_as(options))
    views = main == "comments" or outputs.html
    copies = main == "comments" and files.is_directory(outputs.output)
    for flag, path in _paths(options).items():  # before anything is written
        if path and path != "-" and not (flag == "-o" and copies):
            files.refuse_sources(path, traced, flag)
    if views and not copies:
        text = files.note(traced, options.source.file)
        if text is not None:
            say(text)
    program = lower(trace, retrace, progress=status.step if status is not None else None)
    if status is not None and retrace is not None:  # after the retraces' phases: the writing's own
        status.phase("writing the results")
    if main == "json":
        emit(_json(program), outputs.output, written, say, form="json")
    elif copies:
        write_copies(options, program, traced, say)
    elif main == "comments":
        text = _comments(program, traced.shown, options)
        emit(text, outputs.output, written, say, encoding=source_encoding(traced.shown))
    if isinstance(outputs.json, str):
        write(_json(program), outputs.json, written, "--json", say, form="json")
    if outputs.html:
        from jaxside.render.html import side_by_side

        write(side_by_side(program, traced.shown, shapes=outputs.shapes), outputs.html, written, "--html",
              say, form="html")
    if options.jax.export or options.jax.check:
        return run_export(options, program, entry, say)
    return EXIT_OK


def run_export(options: Options, program: Any, entry: Any, say: Say) -> int:
    """``--export`` and ``--check``: the module to ``-o`` or stdout (unless only checked), then
    compared with torch eager (its table on stderr); the exit code."""
    from jaxside.annotate.export import module_source

    module = options.jax
    text = module_source(program, options.source.shown_file, module.style, entry.fn)
    if module.export:
        emit(text, options.outputs.output, _guard(options), say, form="module")
    if not module.check:
        return EXIT_OK
    from jaxside.annotate.check import check_export, load_module
    from jaxside.annotate.check_modules import runner

    unwritten = "" if module.export else "; not written: --export -o PATH keeps it"
    with stdout_to_stderr(), ordinary():  # torch eager runs the user's code again, on real numbers
        report = check_export(load_module(text), program, entry, rtol=module.rtol, atol=module.atol,
                              note=unwritten, show=lambda line: print(line, file=sys.stderr),
                              run=runner(module.style))
    return report.exit_code


def write_copies(options: Options, program: Any, traced: files.Traced, say: Say) -> None:
    """``-o DIR/``: an annotated copy of each traced file, in that file's own encoding."""
    from jaxside.annotate.loading import source_encoding

    copies = files.copy_paths(traced, options.outputs.output)
    for target in copies.values():
        files.refuse_sources(target, traced, "-o")
    texts = {source: _comments(program, source, options) for source in copies}
    for source, target in copies.items():  # every target checked before the first is written
        target.parent.mkdir(parents=True, exist_ok=True)
        check_target(str(target), Guard(source, options.outputs.force), "-o")
    for source, target in copies.items():
        write(texts[source], str(target), _guard(options), "-o", say, encoding=source_encoding(source))


def _comments(program: Any, path: str, options: Options) -> str:
    from jaxside.render.comments import annotate_file

    return annotate_file(program, path, shapes=options.outputs.shapes)


def _json(program: Any) -> str:
    from jaxside.render.json_map import to_json

    return to_json(program)


def _shown_as(options: Options) -> str | None:
    """FILE's name in notes when it was read from a pipe (`<stdin>`), else None."""
    source = options.source
    return source.shown_file if source.shown_file != source.file else None


def _guard(options: Options) -> Guard:
    """What decides whether the run may write a path: FILE, and ``--force``."""
    return Guard(options.source.file, options.outputs.force)

"""Load the user's file the way Python would import it, and find what to trace in it."""

from __future__ import annotations

import ast
import contextlib
import errno
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import shlex
import stat
import sys
import tempfile
import textwrap
import tokenize
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from jaxside.annotate.errors import Failure, UserCodeRaised, syntax_error
from jaxside.annotate.preflight import compiled_expression, compiled_statements

_NOT_SOURCE = {
    ".ipynb": "a notebook", ".pt": "a checkpoint", ".pth": "a checkpoint", ".bin": "a checkpoint",
    ".ckpt": "a checkpoint", ".safetensors": "a checkpoint", ".onnx": "an ONNX model",
    ".pyc": "compiled bytecode",
}
_GIVE_SOURCE = "give the .py file that defines the model"
_OWN_PACKAGES = ("jaxside",)


class EntryOptions(Protocol):
    """The options that say what to trace in FILE (`annotate`'s and `annotate review`'s)."""

    @property
    def file(self) -> str: ...

    @property
    def entry(self) -> str | None: ...

    @property
    def inputs(self) -> str | None: ...

    @property
    def kwargs(self) -> str | None: ...

    @property
    def setup(self) -> str | None: ...


@dataclass
class Entry:
    """What to trace: a function or `nn.Module`, its inputs, and the module FILE was loaded as."""

    fn: Any
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    module: ModuleType | None = None


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Undo what loading a user file did to this interpreter once the run is over: `sys.path`, the
    modules imported from the directories it put there (or that it replaced), torch's
    process-wide settings (default device and dtype, grad mode, modes left entered) and the
    interpreter's (`_process_state`: warnings, logging, environment, jax flags...)."""
    from jaxside.annotate import _process_state, _torch_state

    path, modules = list(sys.path), dict(sys.modules)
    settings, process = _torch_state.save(), _process_state.save()
    try:
        yield
    finally:
        _torch_state.restore(settings)
        _process_state.restore(process)
        added = tuple(str(Path(p).resolve()) + os.sep for p in sys.path if p not in path)
        resolved = _Resolved()
        for name, module in list(sys.modules.items()):
            if modules.get(name) is module:
                continue
            if name in modules:
                sys.modules[name] = modules[name]
            elif added and resolved(getattr(module, "__file__", None) or "/").startswith(added):
                del sys.modules[name]
        sys.path[:] = path


class _Resolved:
    """`str(Path(file).resolve())`, each directory resolved once: a run imports torch and jax, a
    thousand modules in a hundred directories, and resolving a path stats each of its parts."""

    def __init__(self) -> None:
        self.directories: dict[str, str] = {}

    def __call__(self, file: str) -> str:
        path = file if os.path.isabs(file) else os.path.join(os.getcwd(), file)  # `..` kept: links first
        directory, name = os.path.split(path)
        if not name or name in (".", "..") or os.path.islink(path):
            return str(Path(file).resolve())
        if directory not in self.directories:
            self.directories[directory] = str(Path(directory).resolve())
        return os.path.join(self.directories[directory], name)


STDIN = "-"
"""FILE that means standard input."""


@contextlib.contextmanager
def readable_copy(path: str) -> Iterator[str]:
    """FILE as a path Python can import: FILE itself when it is a regular file (or missing: that
    is reported later); for standard input (``-``, ``/dev/stdin``), a pipe or a device, a copy of
    what it held, read once, in a temporary directory removed afterwards."""
    if path != STDIN:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISCHR(mode) and not stat.S_ISFIFO(mode):
            yield path
            return
    try:
        if path == STDIN:
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as stream:
                data = stream.read()
    except OSError as error:
        raise Failure(f"cannot read it ({error.strerror})", "give a readable file", file=path) from None
    stem = Path(path).stem if path != STDIN else "stdin"
    with tempfile.TemporaryDirectory(prefix="jaxside-") as directory:
        copy = Path(directory) / f"{stem if stem.isidentifier() else 'stdin'}.py"
        copy.write_bytes(data)
        yield str(copy)


def source_encoding(path: str | Path) -> str:
    """The encoding Python reads a source file in: its coding cookie, ``utf-8-sig`` with a BOM,
    else UTF-8 (the same codec writes the file back, BOM included)."""
    with open(path, "rb") as stream:
        return tokenize.detect_encoding(stream.readline)[0]


def is_link_loop(path: Path) -> bool:
    """Whether `path` is a symbolic link that never reaches a file (``a -> b -> a``)."""
    try:
        path.resolve(strict=True)
    except (RuntimeError, OSError) as error:  # RuntimeError up to 3.12, OSError ELOOP after
        return isinstance(error, RuntimeError) or getattr(error, "errno", None) == errno.ELOOP
    return False


def check_source(path: str, role: str = "the torch .py file to annotate") -> Path:
    """FILE resolved, once it is known to be a Python source file that parses; `role` says what the
    file is for, in the hint when there is none."""
    file = Path(path)
    if is_link_loop(file):
        raise Failure("is a symbolic link loop (it leads back to itself)", "give the path of the file itself",
                      file=path)
    if not file.exists():
        raise Failure("no such file", f"give the path of {role}", file=path)
    if file.is_dir():
        raise Failure("is a directory", "give the model's .py file inside it", file=path)
    kind = _NOT_SOURCE.get(file.suffix.lower())
    if kind is not None:
        fix = _GIVE_SOURCE if kind != "a notebook" else "save it as a script (jupyter nbconvert --to script)"
        raise Failure(f"not Python source but {kind}", fix, file=path)
    try:
        data = file.read_bytes()
        encoding, _ = tokenize.detect_encoding(iter(data.splitlines(keepends=True)).__next__)
        data.decode(encoding)
    except OSError as error:
        raise Failure(f"cannot read it ({error.strerror})", "check its permissions", file=path) from None
    except (SyntaxError, UnicodeDecodeError, LookupError):
        raise Failure("not Python source (not text)", _GIVE_SOURCE, file=path) from None
    if b"\0" in data:
        raise Failure("not Python source (binary)", _GIVE_SOURCE, file=path)
    try:
        compile(data, str(file.resolve()), "exec", dont_inherit=True)
    except SyntaxError as error:
        raise syntax_error(error) from None
    except ValueError as error:
        raise Failure(f"not Python source ({error})", _GIVE_SOURCE, file=path) from None
    return file.resolve()


def load_file(path: str) -> ModuleType:
    """Import FILE once: by its dotted name when it sits in a package (so relative imports work),
    else under its own name with its directory importable, as ``python FILE`` would."""
    file = check_source(path)
    argv, dont_write_bytecode = list(sys.argv), sys.dont_write_bytecode
    sys.argv[:] = [str(file)]  # what the file sees when run as a script
    sys.dont_write_bytecode = True  # leave no __pycache__ beside the user's files
    try:
        return _import(file, path)
    finally:
        sys.argv[:] = argv
        sys.dont_write_bytecode = dont_write_bytecode


def _import(file: Path, path: str) -> ModuleType:
    package = _package_of(file)
    if package is not None:
        root, dotted = package
        _check_package_name(dotted, root, path)
        if str(root) not in (str(Path(p).resolve()) for p in sys.path if p):
            sys.path.insert(0, str(root))
        return _run_user_code(f"importing {file.name}", lambda: importlib.import_module(dotted))
    sys.path.insert(0, str(file.parent))
    name = file.stem
    previous = sys.modules.get(name)
    if previous is not None and getattr(previous, "__file__", None) != str(file):
        name = f"_jaxside_{file.stem}"  # never shadow an imported module of the same name
    loader = importlib.machinery.SourceFileLoader(name, str(file))
    spec = importlib.util.spec_from_file_location(name, file, loader=loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module

    def execute() -> ModuleType:
        loader.exec_module(module)
        return module

    return _run_user_code(f"importing {file.name}", execute)


def _package_of(file: Path) -> tuple[Path, str] | None:
    """The sys.path root and dotted name of FILE when its directory is a package."""
    parts = [] if file.name == "__init__.py" else [file.stem]
    directory = file.parent
    while (directory / "__init__.py").is_file() and directory.name.isidentifier():
        parts.insert(0, directory.name)
        directory = directory.parent
    if directory == file.parent or not all(p.isidentifier() for p in parts):
        return None
    return directory, ".".join(parts)


def _check_package_name(dotted: str, root: Path, path: str) -> None:
    """Refuse a package whose name is taken by one already imported, or by one of ours (whose
    generic names a user's package could shadow)."""
    top = dotted.partition(".")[0]
    loaded = sys.modules.get(top)
    if loaded is not None:
        locations = [str(Path(p).resolve()) for p in getattr(loaded, "__path__", ())]
    elif top in _OWN_PACKAGES:
        locations = [str(Path(__file__).resolve().parent.parent.parent / top)]
    else:
        return
    if str(root / top) not in locations:
        where = locations[0] if locations else getattr(loaded, "__file__", "?")
        raise Failure(
            f"it is part of package `{top}`, but that name is taken by another package ({where})",
            "rename the package directory, or annotate a copy of the file outside it", file=path,
        )


def _run_user_code(doing: str, run: Callable[[], Any], option: str | None = None) -> Any:
    try:
        return run()
    except (Exception, SystemExit) as error:
        raise UserCodeRaised(doing, error, option) from error


# -- what to trace --------------------------------------------------------------------------------


def namespace_of(module: ModuleType) -> dict[str, Any]:
    """FILE's names, with torch importable as `torch`, for evaluating options' expressions."""
    import torch

    return {"torch": torch, **vars(module)}


def find_entry(module: ModuleType, options: EntryOptions, *, abstract: bool = False) -> Entry:
    """The entry and its inputs from ``--entry/--inputs/--kwargs`` or FILE's ``example()``,
    then ``--setup``; under ``--abstract`` all of it is built on the ``meta`` device."""
    import torch

    namespace = namespace_of(module)
    with torch.device("meta") if abstract else contextlib.nullcontext():
        args: Any = ()
        kwargs: Any = {}
        if options.entry is not None:
            fn = evaluate("--entry", options.entry, namespace)
        else:
            fn, args, kwargs = _from_example(module, options)
        if options.inputs is not None:
            args = evaluate("--inputs", options.inputs, namespace)
            args = args if isinstance(args, tuple) else (args,)
        if options.kwargs is not None:
            kwargs = evaluate("--kwargs", options.kwargs, namespace)
            if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
                raise Failure(f"--kwargs gave a {type(kwargs).__name__}, not a dict of names",
                              "write it as dict(use_cache=False) or {'use_cache': False}",
                              file=options.file)
        _check_callable(fn, options)
        if options.setup is not None:
            run_setup(options.setup, {**namespace, "model": fn})
    return Entry(fn, tuple(args), dict(kwargs), module)


def evaluate(option: str, expression: str, namespace: dict[str, Any]) -> Any:
    code = compiled_expression(option, expression, namespace.get("__file__"))
    given = f"{option} {shlex.quote(expression)}"
    return _run_user_code(f"evaluating {given}", lambda: eval(code, dict(namespace)), given)


def run_setup(statements: str, namespace: dict[str, Any]) -> None:
    code = compiled_statements("--setup", statements, namespace.get("__file__"))
    given = f"--setup {shlex.quote(statements)}"
    _run_user_code(f"running {given}", lambda: exec(code, namespace), given)


def _from_example(module: ModuleType, options: EntryOptions) -> tuple[Any, Any, Any]:
    example = getattr(module, "example", None)
    if not callable(example):
        raise no_entry(module, options.file)
    result = _run_user_code("calling example()", example)
    code = getattr(example, "__code__", None)
    where = {"file": options.file, "line": code.co_firstlineno if code else None}
    shape = "it must return (fn_or_module, args) or (fn_or_module, args, kwargs)"
    if not isinstance(result, (tuple, list)) or len(result) not in (2, 3):
        raise Failure(f"example() returned {_a(result)}", shape, **where)
    fn, args, *rest = result
    kwargs = rest[0] if rest else {}
    if not isinstance(args, (tuple, list)):
        args = (args,)
    if not isinstance(kwargs, Mapping):
        raise Failure(f"example() returned kwargs as {_a(kwargs)}, not a dict", shape, **where)
    return fn, args, kwargs


def _check_callable(fn: Any, options: EntryOptions) -> None:
    import torch

    given = f"--entry {shlex.quote(options.entry)}" if options.entry is not None else "example()"
    if isinstance(fn, type) and issubclass(fn, torch.nn.Module):
        raise Failure(f"{given} gave the class {fn.__name__}, not a module",
                      f"instantiate it: --entry '{fn.__name__}(...)'", file=options.file)
    if not callable(fn):
        raise Failure(f"{given} gave {_a(fn)}, which cannot be called",
                      "give a function or an nn.Module", file=options.file)


def _a(value: Any) -> str:
    name = type(value).__name__
    return ("an " if name[:1].lower() in "aeiou" else "a ") + name


def no_entry(module: ModuleType, file: str) -> Failure:
    """Nothing to trace: say what FILE defines and a command line to start from."""
    namespace = vars(module)
    defined = defined_names(namespace)
    if not defined:
        return Failure("nothing to trace: no example(), no --entry, and no nn.Module or function here",
                       "define example() returning (model, args), or pass --entry and --inputs", file=file)
    modules = [n for n in defined if isinstance(namespace[n], type)]
    functions = [n for n in defined if n not in modules]
    listing = " and ".join(
        f"{label} {', '.join(names)}"
        for label, names in (("modules", modules), ("functions", functions)) if names
    )
    name = _top_module(modules, namespace) if modules else functions[0]
    target = namespace[name]
    if isinstance(target, type):
        entry = f"{name}({', '.join(f'{p}=...' for p in _required(target.__init__)[1:])})"
        inputs = _required(target.forward)[1:]
    else:
        entry, inputs = name, _required(target)
    placeholders = ", ".join("torch.randn(1, 16)" for _ in inputs)
    tuple_text = f"({placeholders},)" if len(inputs) == 1 else f"({placeholders})"
    command = f"annotate {shlex.quote(file)} --entry {shlex.quote(entry)} --inputs {shlex.quote(tuple_text)}"
    return Failure(f"nothing to trace: no example() and no --entry; it defines {listing}",
                   f"start from: {command}", file=file)


def defined_names(namespace: dict[str, Any]) -> list[str]:
    """The nn.Module subclasses, then the functions, that a module's own code defines."""
    import torch

    name = namespace.get("__name__")
    modules, functions = [], []
    for key, value in namespace.items():
        if getattr(value, "__module__", None) != name or key.startswith("_"):
            continue
        if isinstance(value, type) and issubclass(value, torch.nn.Module):
            modules.append(key)
        elif inspect.isfunction(value):
            functions.append(key)
    return modules + functions


def _top_module(names: list[str], namespace: dict[str, Any]) -> str:
    """The module class no other one's code names (the whole model), else the first defined; a name in
    a docstring or comment is no use (minGPT's `NewGELU` says "as in OpenAI GPT")."""
    named: dict[str, set[str]] = {}
    for name in names:
        with contextlib.suppress(OSError, TypeError, SyntaxError):
            tree = ast.parse(textwrap.dedent(inspect.getsource(namespace[name])))
            named[name] = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
                n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for name in names:
        if not any(name in used for other, used in named.items() if other != name):
            return name
    return names[0]


def _required(function: Any) -> list[str]:
    """The positional parameters without a default (``self`` included, for methods of a class)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in parameters if p.kind in kinds and p.default is inspect.Parameter.empty]

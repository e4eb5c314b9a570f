"""The frame recorder on plain Python (no torch): runs under every interpreter we have.

`make test` runs the whole suite again on Python 3.12 (with torch), and this file on 3.13, so both
backends are exercised (docs/testing.md).
"""

from __future__ import annotations

import contextlib
import sys
import textwrap

import pytest
from plain_values import Box, Probe, Value

from jaxside.tracing._frames import _BACKENDS, DEFAULT_BACKEND, Recorder


def is_this_file(filename: str) -> bool:
    return filename == __file__


def helper(a, b):
    total = a + b
    return total, a


def program(x, y):
    def inner(p):
        doubled = p + p
        return doubled

    s = x + y
    pair = helper(s, y)
    first, _ = pair
    t = inner(first)
    for _ in range(2):
        t = t + x
    gen = sum(1 for _ in range(3))  # a generator expression is not a call node
    return t, gen


BACKENDS = sorted(_BACKENDS)


def record(fn, *args, backend):
    recorder = Recorder(is_this_file, Probe(), backend)
    with recorder:
        result = fn(*args)
    return recorder, result


@pytest.mark.parametrize("backend", BACKENDS)
def test_call_tree_and_bindings(backend):
    x, y = Value("x"), Value("y")
    recorder, (t, _) = record(program, x, y, backend=backend)
    (root,) = recorder.roots
    assert root.qualname == "program"
    assert [c.qualname for c in root.children] == ["helper", "program.<locals>.inner"]
    assert root.args == [("x", x), ("y", y)]
    helper_call, inner_call = root.children
    assert [name for name, _, _ in helper_call.bindings] == ["total"]
    assert helper_call.returned[0][0] == "[0]" and helper_call.returned[1] == ("[1]", helper_call.args[0][1])
    bound = [name for name, _, _ in root.bindings]
    assert bound == ["s", "first", "t", "t", "t"]  # `t` rebound in the loop, each value seen
    assert inner_call.bindings[0][0] == "doubled"
    assert root.returned[0] == ("[0]", t)
    assert root.start <= helper_call.start <= helper_call.end <= inner_call.start <= root.end


@pytest.mark.parametrize("backend", BACKENDS)
def test_binding_on_the_last_line_before_return(backend):
    def last(x):
        y = x + x
        return y

    def one_liner(x):
        z = x + x; return z  # noqa: E702

    for fn, name in ((last, "y"), (one_liner, "z")):
        recorder, _ = record(fn, Value("x"), backend=backend)
        assert [b[0] for b in recorder.roots[0].bindings] == [name]


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_item_assignment_rebinds_its_container(backend):
    def update(cache, pos, new):
        out = cache
        out[pos] = new
        return out

    cache = Box(Value("cache"))
    recorder, _ = record(update, cache, 0, Value("new"), backend=backend)
    bindings = recorder.roots[0].bindings
    # `out` first names the cache as it came in (already seen as `cache`), then its new value.
    assert [name for name, _, _ in bindings] == ["out", "out"]
    assert bindings[-1][2] is cache.current


@pytest.mark.parametrize("backend", BACKENDS)
def test_exception_leaves_no_hook_and_marks_frames(backend):
    def boom(x):
        y = x + x  # noqa: F841
        raise ValueError("user error")

    def caller(x):
        return boom(x)

    before = sys.gettrace()
    recorder = Recorder(is_this_file, Probe(), backend)
    with pytest.raises(ValueError), recorder:
        caller(Value("x"))
    assert sys.gettrace() is before
    (root,) = recorder.roots
    assert root.raised and root.children[0].raised
    assert root.children[0].bindings[0][0] == "y"
    # Recording again afterwards works (monitoring tool ids are released).
    recorder, _ = record(program, Value("a"), Value("b"), backend=backend)
    assert recorder.roots[0].qualname == "program"


@pytest.mark.parametrize("backend", BACKENDS)
def test_handled_exception_is_not_a_raise(backend):
    def careful(x):
        try:
            raise KeyError
        except KeyError:
            y = x + x
        return y

    recorder, _ = record(careful, Value("x"), backend=backend)
    assert not recorder.roots[0].raised
    assert [b[0] for b in recorder.roots[0].bindings] == ["y"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_library_code_is_not_recorded(backend):
    import json

    def uses_library(x):
        json.dumps([1, 2])
        return x + x

    recorder, _ = record(uses_library, Value("x"), backend=backend)
    assert [r.code.co_name for r in recorder.roots] == ["uses_library"]
    assert recorder.roots[0].children == []
    assert recorder.stores_of(json.dumps.__code__) is None


def test_default_backend_follows_the_interpreter():
    assert DEFAULT_BACKEND == ("monitoring" if sys.version_info >= (3, 12) else "settrace")
    with pytest.raises(ValueError, match="`backend` must be one of"):
        Recorder(is_this_file, Probe(), "nope")


class PausingProbe(Probe):
    """A probe whose `library` calls run with the hook paused, as torch calls do in a capture."""

    def __init__(self) -> None:
        self.zones = 0
        self.pause = self.resume = lambda: None

    @contextlib.contextmanager
    def library_calls(self, pause, resume):
        self.zones += 1
        self.pause, self.resume = pause, resume
        yield

    def library(self, fn, *args):
        self.pause()
        try:
            return fn(*args)
        finally:
            self.resume()


def twice(x):
    doubled = x + x
    return doubled


@pytest.mark.parametrize("backend", BACKENDS)
def test_library_calls_pause_the_hook_only_under_settrace(backend):
    probe = PausingProbe()

    def model(x):
        y = probe.library(twice, x)  # user code reached from inside a paused library call
        z = twice(y)
        return z

    before = sys.gettrace()
    with Recorder(is_this_file, probe, backend) as recorder:
        model(Value("x"))
    assert sys.gettrace() is before
    (root,) = recorder.roots
    assert [b[0] for b in root.bindings] == ["y", "z"]
    library, second = root.children
    assert (library.qualname, second.qualname) == ("PausingProbe.library", "twice")
    if backend == "settrace":
        assert probe.zones == 1
        assert library.children == []  # called while paused: not seen
    else:  # monitoring needs no pausing: every call is seen
        assert probe.zones == 0
        assert [c.qualname for c in library.children] == ["twice"]


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is Python 3.12+")
def test_code_disabled_as_library_is_recorded_once_it_is_user_code():
    for user, expected in ((False, []), (True, ["twice"]), (False, []), (True, ["twice"])):
        with Recorder(lambda f, user=user: user and is_this_file(f), Probe(), "monitoring") as recorder:
            twice(Value("x"))
        assert [c.qualname for c in recorder.roots] == expected


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is Python 3.12+")
def test_files_never_user_code_are_not_asked_about_again():
    """A library file switched off by one recording is not looked at by the next (3.12: asking
    about each of hundreds of torch files cost every capture milliseconds)."""
    asked: list[str] = []

    def is_user(filename: str) -> bool:
        asked.append(filename)
        return is_this_file(filename)

    with Recorder(is_user, Probe(), "monitoring", never_user=lambda f: not is_this_file(f)):
        textwrap.dedent(" x")  # library code, switched off for later recordings
        twice(Value("x"))
    asked.clear()
    with Recorder(is_user, Probe(), "monitoring") as recorder:
        twice(Value("x"))
    assert textwrap.__file__ not in asked
    assert [c.qualname for c in recorder.roots] == ["twice"]


def branches(x, flag):
    if flag:
        x = x + x
    else:
        x = helper(x, x)
    try:
        y = x
    except TypeError:
        y = None
    return y


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_call_records_the_lines_it_ran(backend):
    """Every line of the call's own code that ran, none of a branch it skipped: the page's evidence."""
    recorder, _ = record(branches, Value("x"), False, backend=backend)
    (root,) = recorder.roots
    first = branches.__code__.co_firstlineno
    assert {line - first for line in root.lines} == {1, 4, 5, 6, 9}, root.lines  # not 2, 7, 8
    (called,) = root.children
    assert {line - helper.__code__.co_firstlineno for line in called.lines} == {1, 2}

"""The command's garbage collection and its fast exit (`annotate.collecting`)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import weakref

from conftest import ROOT

from jaxside.annotate.collecting import FROZEN_BEFORE, NEVER, YOUNG, attempt, collection, ordinary, settle


class Node:
    """A cycle's member: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_a_run_freezes_what_each_phase_built_and_puts_everything_back():
    before = gc.get_threshold()
    with collection():
        assert gc.get_threshold() == (max(YOUNG, before[0]), NEVER, NEVER)
        kept = [Node() for _ in range(100)]
        settle()
        frozen = gc.get_freeze_count()
        assert frozen >= len(kept)
        assert gc.collect() >= 0 and gc.get_freeze_count() == frozen  # a full collection skips them
        with collection():  # the command run within another, in process: the outer one unfreezes
            settle()
        assert gc.get_freeze_count() >= frozen
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


def test_a_phase_s_objects_are_frozen_unwalked_and_its_dropped_cycles_freed_when_the_run_ends():
    with collection():
        gone = weakref.ref(Node())  # garbage once made: a cycle nothing refers to
        kept = Node()
        collections = gc.get_stats()
        settle()
        assert gc.get_stats() == collections  # nothing walked
        assert gone() is not None and gc.is_tracked(kept) and gc.get_freeze_count() > 0
    gc.collect()
    assert gone() is None


def test_what_a_phase_that_raised_made_is_collected_before_the_next_freeze():
    with collection():
        settle()
        try:
            with attempt():
                failed = Node()
                gone = weakref.ref(failed)
                raise ValueError(failed)  # its traceback's frame holds `failed`
        except ValueError:
            pass
        del failed
        assert gone() is not None
        settle()
        assert gone() is None
        with attempt():  # a phase that did not raise: frozen as it is
            dropped = weakref.ref(Node())
        settle()
        assert dropped() is not None
    gc.collect()
    assert dropped() is None


def test_work_on_real_numbers_is_collected_as_outside_a_run():
    before = gc.get_threshold()
    with collection():
        settle()
        gone = weakref.ref(Node())
        with ordinary():
            assert gone() is None and gc.get_threshold() == before
        assert gc.get_threshold() == (max(YOUNG, before[0]), NEVER, NEVER)
    with ordinary():  # outside a run: nothing changes
        assert gc.get_threshold() == before


def test_python_s_own_frozen_objects_do_not_stop_a_run_from_freezing():
    """Python 3.12 starts with objects of its own frozen (375): a run still freezes, and unfreezes."""
    with collection():
        settle()
        assert gc.get_freeze_count() > FROZEN_BEFORE
    assert gc.get_freeze_count() == 0


def test_nothing_is_frozen_outside_a_run_and_a_caller_s_frozen_objects_stay_so():
    before, thresholds = gc.get_freeze_count(), gc.get_threshold()
    settle()
    assert gc.get_freeze_count() == before
    theirs = Node()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collection():
            with collection():  # the command run within another, in process
                settle()
            settle()
            assert gc.get_freeze_count() == frozen and theirs.me is theirs
            assert gc.get_threshold() == thresholds  # nothing frozen: collected as the caller does
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
    gc.disable()
    try:
        with collection():
            settle()  # the caller switched collection off: left as it is
            assert gc.get_freeze_count() == 0
    finally:
        gc.enable()


def run(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60,
    )


def test_leaving_flushes_and_runs_the_exit_handlers_with_the_code():
    result = run("""
        import atexit, sys
        from jaxside.annotate.collecting import leave
        atexit.register(lambda: print("handler ran"))
        print("unflushed", end=" ")
        sys.stderr.write("on stderr")
        leave(3)
        print("never")
    """)
    assert (result.returncode, result.stdout, result.stderr) == (3, "unflushed handler ran\n", "on stderr")


def test_leaving_waits_for_a_running_thread_of_the_user():
    result = run("""
        import threading, time
        from jaxside.annotate.collecting import leave
        threading.Thread(target=lambda: (time.sleep(0.3), print("thread done"))).start()
        leave(0)
    """)
    assert (result.returncode, result.stdout) == (0, "thread done\n"), result.stderr


def test_python_m_jaxside_leaves_with_the_result_written(tmp_path):
    out = tmp_path / "mlp_jax.py"
    command = [sys.executable, "-m", "jaxside", str(ROOT / "samples" / "mlp.py"), "--export", "-o", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "def forward(" in out.read_text(encoding="utf-8")

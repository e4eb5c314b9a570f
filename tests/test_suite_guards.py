"""The suite's own guards: a golden is never rewritten under CI and a rewrite never passes; a
missing sample fails."""

from __future__ import annotations

from pathlib import Path

import golden
import pytest
from conftest import load_sample


@pytest.fixture
def goldens(tmp_path, monkeypatch):
    monkeypatch.setattr(golden, "GOLDEN", tmp_path / "golden")
    monkeypatch.setattr(golden, "ACTUAL", tmp_path / "actual")
    (tmp_path / "golden" / "kind").mkdir(parents=True)
    (tmp_path / "golden" / "kind" / "name").write_text("old\n")
    monkeypatch.delenv("CI", raising=False)
    return tmp_path / "golden" / "kind" / "name"


def test_a_changed_output_fails_and_is_kept_for_review(goldens, monkeypatch):
    monkeypatch.delenv("JAXSIDE_UPDATE_GOLDEN", raising=False)
    with pytest.raises(pytest.fail.Exception, match="kind/name changed"):
        golden.assert_golden("kind", "name", "new\n")
    assert goldens.read_text() == "old\n" and (golden.ACTUAL / "kind" / "name").read_text() == "new\n"
    golden.assert_golden("kind", "name", "old\n")


def test_updating_a_golden_rewrites_it_and_still_fails(goldens, monkeypatch):
    monkeypatch.setenv("JAXSIDE_UPDATE_GOLDEN", "1")
    with pytest.raises(pytest.fail.Exception, match="kind/name rewritten"):
        golden.assert_golden("kind", "name", "new\n")
    assert goldens.read_text() == "new\n"
    golden.assert_golden("kind", "name", "new\n")  # unchanged: nothing to rewrite, a pass


def test_goldens_are_never_rewritten_under_ci(goldens, monkeypatch):
    monkeypatch.setenv("JAXSIDE_UPDATE_GOLDEN", "1")
    monkeypatch.setenv("CI", "true")
    for text in ("new\n", "old\n"):
        with pytest.raises(pytest.fail.Exception, match="under CI"):
            golden.assert_golden("kind", "name", text)
    assert goldens.read_text() == "old\n"


def test_a_missing_sample_fails():
    with pytest.raises(pytest.fail.Exception, match="missing sample .*no_such_sample.py"):
        load_sample("no_such_sample")


# What the recorder and the source positions depend on runs on every interpreter `make test` uses.
EVERY_INTERPRETER = ["test_frames", "test_capture", "test_source", "test_annotate", "test_comments",
                     "test_export", "test_shapes", "test_jax_programs", "test_review", "test_notebook"]


@pytest.mark.parametrize("name", EVERY_INTERPRETER)
def test_interpreter_dependent_tests_are_not_marked_for_one_interpreter(name):
    text = (Path(__file__).parent / f"{name}.py").read_text(encoding="utf-8")
    assert "one_interpreter" not in text, f"{name} must run on 3.12 too (docs/testing.md)"

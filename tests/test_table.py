"""The leaf table `--check` and `annotate review` print: `--check`'s lines within 100 columns, the
columns aligned, a path too long for its column wrapped at its joints and read back whole; a
review's paths kept whole where its verdicts (the port's path) leave them no room."""

from __future__ import annotations

import re

import torch

import jaxside
from jaxside.annotate.table import WIDTH, leaf_table, wrap

VERDICT = "max abs 7.45e-08  rel 3.68e-07  ok"


def _paths_read_back(lines: list[str]) -> list[str]:
    """Each row's path, its wrapped lines joined: a line holding a cell ends a row."""
    paths, part = [], ""
    for line in lines:
        cells = re.split(r" {2,}", line.strip())
        part += cells[0]
        if len(cells) > 1:
            paths.append(part)
            part = ""
    return paths


def test_a_long_path_is_wrapped_at_its_joints_within_the_width():
    paths = ["['logits']", "['past_key_values']['layers'][11]['values']",
             "state model.layers.11.self_attn.rotary_embedding.inverse_frequencies_long_cache",
             "['encoder_outputs']['hidden_states'][3]['cross_attention_weights']['normalised']"]
    lines = leaf_table([(path, "float32[1,2,4,8]", VERDICT) for path in paths])
    assert all(len(line) <= WIDTH for line in lines), "\n".join(lines)
    assert _paths_read_back(lines) == paths
    ends = {line.index("float32") for line in lines if "float32" in line}
    assert len(ends) == 1, "\n".join(lines)  # the shapes in one column
    for before, line in zip(lines, lines[1:]):
        if "float32" not in before:  # a path wrapped: the next line goes on at one of its joints
            assert re.match(r"    [\[.]", line), "\n".join(lines)

def test_the_path_column_is_as_wide_as_the_longest_path_that_fits():
    lines = leaf_table([("[0]", "float32[2]", VERDICT), ("[1]['hidden']", "int32[2,3]", VERDICT)])
    assert lines == ["  [0]            float32[2]  " + VERDICT, "  [1]['hidden']  int32[2,3]  " + VERDICT]


def test_a_part_longer_than_the_column_is_cut():
    assert wrap("x" * 60, 24) == ["x" * 24, "  " + "x" * 22, "  " + "x" * 14]
    assert wrap("['a']['b']", 24) == ["['a']['b']"]


class _Cache(torch.nn.Module):
    """Returns its output under deep, long keys: the paths `--check` names its leaves by."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> dict:
        h = self.proj(x)
        layers = [{"keys": h * i, "values_of_the_attention_cache": h + i} for i in range(12)]
        return {"logits": h, "past_key_values": {"layers_of_the_decoder": layers}}


def test_the_check_table_of_deep_paths_keeps_within_the_width():
    report = jaxside.export(_Cache(), torch.randn(2, 4)).check()
    assert report.ok, report.table()
    rows = [line for line in report.lines if line.startswith("  ")]
    assert rows and all(len(line) <= WIDTH for line in rows), report.table()
    paths = _paths_read_back(rows)
    assert "['past_key_values']['layers_of_the_decoder'][11]['values_of_the_attention_cache']" in paths
    assert len(paths) == len(report.comparisons)


def test_paths_stay_whole_beside_verdicts_that_leave_them_no_room():
    """Review's rows name the port's path too: wrapping the torch path would not bring them within
    the width, only cut it up."""
    path = "['past_key_values']['layers'][0]['values']"
    lines = leaf_table([(path, "float32[1, 2, 8, 8]", f"<- {path}  max abs 0.00e+00  ok")])
    assert len(lines) == 1 and lines[0].startswith(f"  {path}  float32")

"""Stand-ins for traced tensors, kept out of the test file so their methods are library code."""

from __future__ import annotations


class Value:
    """Stands for a traced tensor: the probe records these and nothing else."""

    made = 0

    def __init__(self, label: str) -> None:
        self.label = label
        Value.made += 1

    def __add__(self, other: Value) -> Value:
        return Value(f"({self.label}+{other.label})")


class Probe:
    def key(self, value):
        if isinstance(value, Box):
            return value.current
        return value if isinstance(value, Value) else None

    def leaves(self, value, path=""):
        if isinstance(value, Value):
            return [(path, value)]
        if isinstance(value, (tuple, list)):
            return [leaf for i, item in enumerate(value) for leaf in self.leaves(item, f"{path}[{i}]")]
        return []

    def watermark(self):
        return Value.made


class Box:
    """A tensor updated in place: item assignment swaps the value it stands for."""

    def __init__(self, value: Value) -> None:
        self.current = value

    def __setitem__(self, index: object, value: Value) -> None:
        self.current = self.current + value

"""The entry review is given: the port itself lives in the nnx_port package beside it."""

from nnx_port import build

__all__ = ["build"]

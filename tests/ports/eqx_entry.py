"""The entry review is given: the port itself lives in the eqx_port package beside it."""

from eqx_port.model import build

__all__ = ["build"]

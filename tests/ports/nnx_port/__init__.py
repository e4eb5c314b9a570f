"""A Flax NNX port of tiny_decoder.py split over modules: layers, rotary, model."""

from nnx_port.model import build

__all__ = ["build"]

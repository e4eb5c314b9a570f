"""A torch entry file that takes its model from another file, as a user's script does."""

from tiny_decoder import example

__all__ = ["example"]

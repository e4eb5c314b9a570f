"""The entry review is given: the port itself is the linen_port module beside it."""

from linen_port import Decoder


def build():
    return Decoder()

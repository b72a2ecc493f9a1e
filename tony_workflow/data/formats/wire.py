"""Protocol buffers' wire format, the little of it the readers need: ORC's footer and TensorFlow's
``tf.train.Example`` are read field by field, without the projects' message definitions."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["fields", "varint"]


def varint(data: bytes, i: int) -> tuple[int, int]:
    """The variable-length integer at ``data[i]``, and where the next value starts."""
    value, shift = 0, 0
    while True:
        if i >= len(data):
            raise ValueError("the message ends inside a number")
        b = data[i]
        value |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            return value, i
        shift += 7


def fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of each field of one message: varints as ints, the other
    types as their bytes."""
    i, n = 0, len(data)
    while i < n:
        tag, i = varint(data, i)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, i = varint(data, i)
            yield number, wire, value
        elif wire == 2:
            length, i = varint(data, i)
            yield number, wire, data[i:i + length]
            i += length
        elif wire == 5:
            yield number, wire, data[i:i + 4]
            i += 4
        elif wire == 1:
            yield number, wire, data[i:i + 8]
            i += 8
        else:
            raise ValueError(f"wire type {wire}, which a message cannot hold")

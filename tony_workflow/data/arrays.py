"""Arrow batches as the numpy arrays a training step takes.

A column becomes one array: numbers, booleans, dates and times as numpy's own types (a null
number as NaN), strings and bytes as object arrays, a list whose rows have one length (a
fixed-size list always) as one more dimension, other lists as arrays of arrays. A struct column
becomes one array per field, named ``column.field`` (recursively), so that its numbers stay
numbers and its timestamps numpy's, whose range is far wider than Python's datetime.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["flat_fields", "to_numpy"]


def _whole(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """One array of a column: its only chunk as it is (combining copies, even one chunk)."""
    if not isinstance(column, pa.ChunkedArray):
        return column
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _numpy(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    array = _whole(column)
    kind = array.type
    if pa.types.is_fixed_size_list(kind) and array.null_count == 0:
        inner = _numpy(array.flatten())
        return inner.reshape(len(array), kind.list_size, *inner.shape[1:])
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and array.null_count == 0 and len(array):
        lengths = np.diff(np.asarray(array.offsets))
        if (lengths == lengths[0]).all():
            inner = _numpy(array.flatten())
            return inner.reshape(len(array), int(lengths[0]), *inner.shape[1:])
    result: np.ndarray = array.to_numpy(zero_copy_only=False)
    return result


def _columns(name: str, array: pa.Array, out: dict[str, np.ndarray]) -> None:
    if pa.types.is_struct(array.type):
        for field, child in zip(array.type, array.flatten()):
            _columns(f"{name}.{field.name}", child, out)
    else:
        out[name] = _numpy(array)


def to_numpy(table: pa.Table | pa.RecordBatch) -> dict[str, np.ndarray]:
    """A batch as a dict of column name to numpy array (see the module's docstring)."""
    out: dict[str, np.ndarray] = {}
    for name in table.schema.names:
        _columns(name, _whole(table.column(name)), out)
    return out


def flat_fields(schema: pa.Schema, columns: list[str]) -> list[tuple[str, pa.DataType]]:
    """The arrays :func:`to_numpy` makes of ``columns``: their names and Arrow types."""
    out: list[tuple[str, pa.DataType]] = []

    def walk(name: str, kind: pa.DataType) -> None:
        if pa.types.is_struct(kind):
            for field in kind:
                walk(f"{name}.{field.name}", field.type)
        else:
            out.append((name, kind))

    for column in columns:
        walk(column, schema.field(column).type)
    return out

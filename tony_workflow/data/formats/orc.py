"""ORC, through pyarrow: a unit is a stripe.

pyarrow reads a stripe by number but does not tell a stripe's rows or where it lies; both are in
the file's footer (ORC's ``StripeInformation``: offset, index, data and footer lengths, rows),
which pyarrow hands over decompressed as the serialized file tail. The few fields needed are read
from that protobuf message with :mod:`.wire`, rather than bringing ORC's definitions along.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from .base import BadFile, FileInfo, Format, Unit
from .wire import fields

__all__ = ["ORC", "stripes"]


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of one message of the footer: varints as ints, lengths as bytes."""
    try:
        for number, wire, value in fields(data):
            if wire in (0, 2):
                yield number, value
    except ValueError as e:
        raise BadFile(f"the ORC footer cannot be read: {e}") from None


# FileTail { postscript = 1; footer = 2; }, Footer { stripes = 3; }, StripeInformation { offset = 1;
# indexLength = 2; dataLength = 3; footerLength = 4; numberOfRows = 5 }: ORC's orc_proto.proto.
def stripes(tail: bytes) -> list[Unit]:
    footer = next((v for n, v in _fields(tail) if n == 2 and isinstance(v, bytes)), None)
    if footer is None:
        raise BadFile("the ORC file tail has no footer")
    units = []
    for number, value in _fields(footer):
        if number == 3 and isinstance(value, bytes):
            info = {n: v for n, v in _fields(value) if isinstance(v, int)}
            length = info.get(2, 0) + info.get(3, 0) + info.get(4, 0)
            units.append(Unit(info.get(5, 0), info.get(1, 0), length))
    return units


def _open(file: Any) -> Any:
    from pyarrow import orc
    try:
        return orc.ORCFile(file)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise BadFile(f"not a readable ORC file: {e}") from None


class ORC(Format):
    name = "orc"
    extensions = (".orc",)
    columnar = True

    def inspect(self, file: Any, size: int) -> FileInfo:
        of = _open(file)
        try:
            units = stripes(of.reader.serialized_file_tail())
            schema = of.schema
        except (pa.ArrowException, ValueError) as e:
            raise BadFile(f"its ORC footer cannot be read: {e}") from None
        if len(units) != of.nstripes or sum(u.rows for u in units) != of.nrows:
            raise BadFile(f"its footer lists {len(units)} stripes of {sum(u.rows for u in units)} rows, "
                          f"but the file says {of.nstripes} of {of.nrows}")
        return FileInfo(schema, of.nrows, tuple(units))

    def open(self, file: Any) -> Any:
        return _open(file)

    def read(self, file: Any, info: FileInfo, unit: int, columns: Sequence[str] | None) -> pa.Table:
        of = file
        try:
            batch = of.read_stripe(unit, columns=list(columns) if columns is not None else None)
        except (pa.ArrowException, OSError, ValueError) as e:
            raise BadFile(f"stripe {unit}: {e}", info.units[unit].offset) from None
        return pa.Table.from_batches([batch])

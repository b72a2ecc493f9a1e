"""Parquet, through pyarrow: a unit is a row group, its rows and byte range from the footer.

Projection reads only the asked columns' chunks; a filter first drops row groups whose column
statistics (min, max, nulls, as the writer kept them) prove no row can match, through pyarrow's
dataset fragments, then the remaining rows are filtered as they are read. INT96 timestamps (Spark's,
Impala's) are read in microseconds, their writers' resolution.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from .base import BadFile, FileInfo, Format, Unit

__all__ = ["Parquet"]


# Spark writes INT96 timestamps in microseconds; read at nanoseconds, years past 2262 or before 1677
# would wrap around silently.
_INT96 = "us"


def _open(file: Any) -> Any:
    import pyarrow.parquet as pq
    try:
        return pq.ParquetFile(file, coerce_int96_timestamp_unit=_INT96)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise BadFile(f"not a readable Parquet file: {e}") from None


class Parquet(Format):
    name = "parquet"
    extensions = (".parquet", ".parq", ".pq")
    columnar = True

    def inspect(self, file: Any, size: int) -> FileInfo:
        pf = _open(file)
        meta = pf.metadata
        units = []
        for i in range(meta.num_row_groups):
            group = meta.row_group(i)
            starts, ends = [], []
            for c in range(group.num_columns):
                column = group.column(c)
                first = column.data_page_offset
                if column.has_dictionary_page and column.dictionary_page_offset is not None:
                    first = min(first, column.dictionary_page_offset)
                starts.append(first)
                ends.append(first + column.total_compressed_size)
            offset = min(starts) if starts else 0
            units.append(Unit(group.num_rows, offset, (max(ends) - offset) if ends else 0))
        try:
            schema = pf.schema_arrow
        except (pa.ArrowException, ValueError) as e:
            raise BadFile(f"its Parquet schema has no Arrow form: {e}") from None
        return FileInfo(schema, meta.num_rows, tuple(units))

    def open(self, file: Any) -> Any:
        return _open(file)

    def read(self, file: Any, info: FileInfo, unit: int, columns: Sequence[str] | None) -> pa.Table:
        pf = file
        try:
            return pf.read_row_group(unit, columns=list(columns) if columns is not None else None)
        except (pa.ArrowException, OSError, ValueError) as e:
            raise BadFile(f"row group {unit}: {e}", info.units[unit].offset) from None

    def pruned(self, info: FileInfo, file: Any, expression: Any) -> list[bool]:
        import pyarrow.dataset as ds
        try:
            options = ds.ParquetReadOptions(coerce_int96_timestamp_unit=_INT96)
            fragment = ds.ParquetFileFormat(read_options=options).make_fragment(file)
            kept = {g.id for f in fragment.split_by_row_group(expression, schema=info.schema) for g in f.row_groups}
        except (pa.ArrowException, ValueError, TypeError):
            return [False] * len(info.units)
        return [i not in kept for i in range(len(info.units))]

"""Avro object container files: the header and the blocks are walked here, the records decoded by
fastavro.

A unit is a run of whole blocks (about :data:`UNIT_BYTES` of them), found by reading each
block's record count and size from the file and stepping over its data to the sync marker that
must follow it, never by searching for the marker: a marker's bytes may appear anywhere, in the
header's metadata too (Avro's ``syncInMeta`` test file), and a reader that searches would split
there. A unit is read by handing fastavro a small file of its own: a header written anew (magic,
schema, codec, the sync marker; the file's other metadata left out, since it may hold bytes that
are no text), then the unit's blocks as they are. The codecs are fastavro's: null, deflate,
snappy (cramjam), zstandard (backports.zstd), bzip2, xz.

Records become Arrow columns by the writer's schema (:func:`arrow_type`): Avro's primitives,
records as structs, arrays as lists, maps, enums as strings, fixed as fixed-size binary, the
logical types (decimal, date, times, timestamps, uuid), and a union with null as a nullable value.
A union of two or more other types has no Arrow array a training step could take; such a column
is refused by name (leave it out with ``columns``).
"""
from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from .base import BadFile, FileInfo, Format, Unit

__all__ = ["UNIT_BYTES", "Avro", "arrow_type"]

MAGIC = b"Obj\x01"
#: About how many bytes of blocks one unit holds (at least one block).
UNIT_BYTES = 4 << 20
_CODECS = ("null", "deflate", "snappy", "zstandard", "bzip2", "xz")


class _Stream:
    """Forward reading of a file with Avro's variable-length numbers, keeping the offset."""

    def __init__(self, file: Any, size: int):
        self.file, self.size = file, size
        self.offset = 0
        self.buffer = b""
        self.buffer_at = 0

    def _fill(self, n: int) -> None:
        have = self.buffer_at + len(self.buffer) - self.offset
        if have >= n:
            return
        self.file.seek(self.offset)
        self.buffer = self.file.read(max(n, 1 << 16))
        self.buffer_at = self.offset

    def read(self, n: int) -> bytes:
        self._fill(n)
        start = self.offset - self.buffer_at
        data = self.buffer[start:start + n]
        if len(data) < n:
            raise BadFile(f"the file ends inside a block ({len(data)} of {n} bytes)", self.offset)
        self.offset += n
        return data

    def skip(self, n: int) -> None:
        if self.offset + n > self.size:
            raise BadFile(f"a block says it holds {n} bytes, past the end of the file", self.offset)
        self.offset += n

    def long(self) -> int:
        start, value, shift = self.offset, 0, 0
        while True:
            b = self.read(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return (value >> 1) ^ -(value & 1)
            shift += 7
            if shift > 63:
                raise BadFile("a number longer than Avro's longs", start)

    def bytes_(self) -> bytes:
        n = self.long()
        if n < 0:
            raise BadFile(f"a negative length ({n})", self.offset)
        return self.read(n)


def _long(value: int) -> bytes:
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        if z < 0x80:
            out.append(z)
            return bytes(out)
        out.append((z & 0x7F) | 0x80)
        z >>= 7


def _header(stream: _Stream) -> tuple[dict[str, bytes], bytes]:
    if stream.read(4) != MAGIC:
        raise BadFile("not an Avro object container file (no 'Obj\\x01' at its start)", 0)
    meta: dict[str, bytes] = {}
    while True:
        count = stream.long()
        if count == 0:
            break
        if count < 0:
            count = -count
            stream.long()  # the block's size in bytes
        for _ in range(count):
            key = stream.bytes_().decode("utf-8", errors="replace")
            meta[key] = stream.bytes_()
    return meta, stream.read(16)


def _header_bytes(schema: str, codec: str, sync: bytes) -> bytes:
    out = bytearray(MAGIC)
    entries = {"avro.schema": schema.encode(), "avro.codec": codec.encode()}
    out += _long(len(entries))
    for key, value in entries.items():
        out += _long(len(key)) + key.encode() + _long(len(value)) + value
    out += _long(0) + sync
    return bytes(out)


_PRIMITIVES = {"null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
               "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(), "string": pa.string()}


def arrow_type(schema: Any, named: dict[str, Any] | None = None, where: str = "") -> pa.DataType:
    """The Arrow type of an Avro schema (parsed JSON). Raises ValueError naming ``where`` for a
    union Arrow cannot hold."""
    named = {} if named is None else named
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        if schema in named:
            return named[schema]
        raise ValueError(f"{where or 'the schema'} names the type {schema!r}, which the schema does not define")
    if isinstance(schema, list):
        others = [s for s in schema if s != "null"]
        if len(others) == 1:
            return arrow_type(others[0], named, where)
        if not others:
            return pa.null()
        raise ValueError(f"column {where} is an Avro union of {', '.join(_type_name(s) for s in others)}, "
                         "which has no Arrow array; leave it out with columns, or write it as one type")
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        result: pa.DataType = pa.decimal128(int(schema["precision"]), int(schema.get("scale", 0)))
    elif logical == "date" and kind == "int":
        result = pa.date32()
    elif logical == "time-millis" and kind == "int":
        result = pa.time32("ms")
    elif logical == "time-micros" and kind == "long":
        result = pa.time64("us")
    elif logical in ("timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros") \
            and kind == "long":
        result = pa.timestamp("ms" if "millis" in logical else "us", None if logical.startswith("local") else "UTC")
    elif logical == "uuid" and kind == "string":
        result = pa.string()
    elif kind == "record" or kind == "error":
        fields = [pa.field(f["name"], arrow_type(f["type"], named, f"{where}.{f['name']}".lstrip(".")),
                           nullable=_nullable(f["type"])) for f in schema.get("fields", [])]
        result = pa.struct(fields)
    elif kind == "enum":
        result = pa.string()
    elif kind == "array":
        result = pa.list_(arrow_type(schema["items"], named, f"{where}[]"))
    elif kind == "map":
        result = pa.map_(pa.string(), arrow_type(schema["values"], named, f"{where}{{}}"))
    elif kind == "fixed":
        result = pa.binary(int(schema["size"]))
    else:
        result = arrow_type(kind, named, where)
    name = schema.get("name")
    if name and kind in ("record", "error", "enum", "fixed"):
        named[name] = result
        if schema.get("namespace") and "." not in name:
            named[f"{schema['namespace']}.{name}"] = result
    return result


def _type_name(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("name") or schema.get("type"))
    return str(schema)


def _nullable(schema: Any) -> bool:
    return schema == "null" or (isinstance(schema, list) and "null" in schema)


def arrow_schema(avro: Any, columns: Sequence[str] | None = None) -> pa.Schema:
    """The Arrow schema of an Avro record schema; with ``columns``, only those fields are
    converted (a union elsewhere is no matter)."""
    if not isinstance(avro, dict) or avro.get("type") != "record":
        return pa.schema([pa.field("value", arrow_type(avro, {}, "value"))])
    named: dict[str, Any] = {}
    fields = []
    for f in avro.get("fields", []):
        if columns is None or f["name"] in columns:
            fields.append(pa.field(f["name"], arrow_type(f["type"], named, f["name"]), nullable=_nullable(f["type"])))
        else:
            try:  # named types defined in a field left out may be used by one kept
                arrow_type(f["type"], named, f["name"])
            except ValueError:
                pass
    return pa.schema(fields)


def _fix(value: Any) -> Any:
    """A decoded value as Arrow takes it (fastavro gives UUIDs as objects, maps as dicts)."""
    if isinstance(value, dict):
        return {k: _fix(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fix(v) for v in value]
    if type(value).__name__ == "UUID":
        return str(value)
    return value


class Avro(Format):
    name = "avro"
    extensions = (".avro",)

    def inspect(self, file: Any, size: int) -> FileInfo:
        stream = _Stream(file, size)
        meta, sync = _header(stream)
        try:
            schema_text = meta["avro.schema"].decode("utf-8")
            writer = json.loads(schema_text)
        except (KeyError, UnicodeDecodeError, ValueError) as e:
            raise BadFile(f"its header holds no readable avro.schema ({e})", 0) from None
        codec = meta.get("avro.codec", b"null").decode("utf-8", errors="replace") or "null"
        if codec not in _CODECS:
            raise BadFile(f"its codec {codec!r} is not one of {', '.join(_CODECS)}", 0)
        header_end = stream.offset
        units: list[Unit] = []
        first, rows, total = header_end, 0, 0
        while stream.offset < size:
            count = stream.long()
            length = stream.long()
            if count < 0 or length < 0:
                raise BadFile(f"a block with {count} records of {length} bytes", stream.offset)
            stream.skip(length)
            if stream.read(16) != sync:
                raise BadFile("a block is not followed by the file's sync marker: the file is corrupt or cut",
                              stream.offset - 16)
            rows += count
            total += count
            if stream.offset - first >= UNIT_BYTES:
                units.append(Unit(rows, first, stream.offset - first))
                first, rows = stream.offset, 0
        if stream.offset > first:
            units.append(Unit(rows, first, stream.offset - first))
        try:
            schema = arrow_schema(writer)
            extra_columns: list[str] = []
        except ValueError:
            # A union somewhere: keep the fields Arrow can hold; asking for another is refused then.
            schema, extra_columns = self._partial_schema(writer)
        return FileInfo(schema, total, tuple(units),
                        {"schema": schema_text, "codec": codec, "sync": sync.hex(), "unions": extra_columns})

    @staticmethod
    def _partial_schema(writer: Any) -> tuple[pa.Schema, list[str]]:
        fields, unions = [], []
        for f in writer.get("fields", []) if isinstance(writer, dict) else []:
            try:
                fields.append(pa.field(f["name"], arrow_type(f["type"], {}, f["name"]), nullable=_nullable(f["type"])))
            except ValueError:
                unions.append(f["name"])
        return pa.schema(fields), unions

    def read(self, file: Any, info: FileInfo, unit: int, columns: Sequence[str] | None) -> pa.Table:
        import fastavro

        u = info.units[unit]
        extra = info.extra
        file.seek(u.offset)
        body = file.read(u.length)
        data = _header_bytes(extra["schema"], extra["codec"], bytes.fromhex(extra["sync"])) + body
        writer = json.loads(extra["schema"])
        schema = info.schema if columns is None else pa.schema([info.schema.field(c) for c in columns])
        try:
            records = [_fix(r) for r in fastavro.reader(io.BytesIO(data))]
        except Exception as e:  # noqa: BLE001 - fastavro raises what its decoders raise: each means a bad block
            raise BadFile(f"records of blocks at {u.offset} cannot be decoded: {type(e).__name__}: {e}",
                          u.offset) from None
        if len(records) != u.rows:
            raise BadFile(f"blocks at {u.offset} hold {len(records)} records, their headers said {u.rows}", u.offset)
        if not isinstance(writer, dict) or writer.get("type") != "record":
            records = [{"value": r} for r in records]
        names = schema.names
        try:
            return pa.Table.from_pylist([{n: r.get(n) for n in names} for r in records], schema=schema)
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise BadFile(f"records of blocks at {u.offset} do not fit their schema: {e}", u.offset) from None

"""TFRecord files, plain or compressed (GZIP, ZLIB), read without TensorFlow.

A record is TensorFlow's frame: its length (8 bytes, little-endian), a masked CRC-32C of those
bytes, the data, a masked CRC-32C of the data. A unit is a run of whole records (about
:data:`UNIT_BYTES`), found by walking the frames; each length's checksum is verified as it is
walked, and each record's as it is read (google-crc32c), so a cut or damaged file is refused at
the record where it goes wrong.

A compressed file is one stream with no point to start from but its beginning: its units are runs
of records of the decompressed stream, and reading one decompresses the file from its start to
there (a file is read through once per epoch when its units are read in order; a restore within
it decompresses up to the position again). Write large datasets uncompressed, or as many files.

Records holding ``tf.train.Example`` messages are decoded into one column per feature (the
protobuf wire format is read here: ``Example.features`` is a map of names to ``BytesList``,
``FloatList`` or ``Int64List``), by the first records' types and lengths: a feature with one
value a record is a column of scalars, one with the same number of values in every record a
column of fixed-size lists, any other a list. Records that are not Examples are one ``record``
column of bytes.
"""
from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from .base import BadFile, FileInfo, Format, Unit
from .wire import fields

__all__ = ["UNIT_BYTES", "TFRecord", "decode_example", "masked_crc"]

UNIT_BYTES = 4 << 20
_SAMPLE = 64
_WBITS = {"gzip": 31, "zlib": 15}
_MASK_DELTA = 0xA282EAD8


def _crc32c() -> Any:
    try:
        import google_crc32c
    except ImportError:
        raise BadFile("reading TFRecord needs google-crc32c; install tony-workflow[data]") from None
    return google_crc32c.value


def masked_crc(data: bytes) -> int:
    crc = int(_crc32c()(data))
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def compression_of(path: str) -> str:
    return "gzip" if path.endswith((".gz", ".gzip")) else "zlib" if path.endswith(".zlib") else ""


class _Plain:
    """A file's bytes, forward, in large reads."""

    def __init__(self, file: Any, start: int = 0):
        self.file = file
        file.seek(start)
        self.offset = start
        self.buffer = b""
        self.position = 0

    def read(self, n: int) -> bytes:
        while len(self.buffer) - self.position < n:
            more = self._more()
            if not more:
                break
            self.buffer = self.buffer[self.position:] + more
            self.position = 0
        data = self.buffer[self.position:self.position + n]
        self.position += len(data)
        self.offset += len(data)
        return data

    def _more(self) -> bytes:
        return bytes(self.file.read(1 << 20))


class _Inflated(_Plain):
    """A compressed file's decompressed bytes, forward."""

    def __init__(self, file: Any, wbits: int):
        self.inflate = zlib.decompressobj(wbits)
        super().__init__(file, 0)
        self.offset = 0

    def _more(self) -> bytes:
        while True:
            raw = self.file.read(1 << 20)
            if not raw:
                return self.inflate.flush()
            try:
                data = self.inflate.decompress(raw)
            except zlib.error as e:
                raise BadFile(f"its compressed stream is damaged: {e}") from None
            if data:
                return data


def _stream(file: Any, compression: str, start: int = 0) -> _Plain:
    if compression:
        stream = _Inflated(file, _WBITS[compression])
        while stream.offset < start:  # no way into a compressed stream but from its start
            if not stream.read(min(start - stream.offset, 1 << 20)):
                break
        return stream
    return _Plain(file, start)


def _records(stream: _Plain, end: int | None, verify: bool) -> Iterator[tuple[int, bytes | None]]:
    """(offset, data) of each record from the stream's position to ``end`` (None: the file's end);
    data is None when not ``verify``-ing (the walk only steps over it)."""
    crc = _crc32c() if verify else None
    while end is None or stream.offset < end:
        at = stream.offset
        head = stream.read(12)
        if not head:
            return
        if len(head) < 12:
            raise BadFile("the file ends inside a record's length", at)
        (length,), (length_crc,) = struct.unpack("<Q", head[:8]), struct.unpack("<I", head[8:])
        if masked_crc(head[:8]) != length_crc:
            raise BadFile("a record's length fails its checksum: not a TFRecord file, or a damaged one", at)
        body = stream.read(length + 4)
        if len(body) < length + 4:
            raise BadFile("the file ends inside a record", at)
        if crc is not None:
            value = crc(body[:length])
            if ((((value >> 15) | (value << 17)) + _MASK_DELTA) & 0xFFFFFFFF) != struct.unpack("<I", body[length:])[0]:
                raise BadFile("a record's data fails its checksum", at)
            yield at, body[:length]
        else:
            yield at, None


# -- tf.train.Example on the wire --------------------------------------------------------------------

def _packed_varints(data: bytes) -> np.ndarray:
    raw = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(raw < 0x80)
    out = np.zeros(len(ends), dtype=np.uint64)
    starts = np.concatenate([[0], ends[:-1] + 1])
    width = int((ends - starts).max()) + 1 if len(ends) else 0
    for k in range(width):
        index = starts + k
        live = index <= ends
        out[live] |= (raw[index[live]].astype(np.uint64) & np.uint64(0x7F)) << np.uint64(7 * k)
    return out.view(np.int64)


def _feature(data: bytes) -> tuple[str, Any]:
    for number, _, value in fields(data):
        if number == 1:  # BytesList
            return "bytes", [v for n, w, v in fields(value) if n == 1]
        if number == 2:  # FloatList
            parts = [np.frombuffer(v, "<f4") for n, _, v in fields(value) if n == 1]  # packed or not
            return "float", np.concatenate(parts) if parts else np.zeros(0, np.float32)
        if number == 3:  # Int64List
            ints = [(_packed_varints(v) if w == 2 else np.array([v], np.uint64).view(np.int64))
                    for n, w, v in fields(value) if n == 1]
            return "int64", np.concatenate(ints) if ints else np.zeros(0, np.int64)
    return "none", []


def decode_example(record: bytes) -> dict[str, tuple[str, Any]]:
    """A serialized ``tf.train.Example``'s features: name -> (kind, values). Raises ValueError
    when the record is not one."""
    out: dict[str, tuple[str, Any]] = {}
    for number, wire, features in fields(record):
        if number != 1 or wire != 2:
            raise ValueError("not an Example")
        for n, w, entry in fields(features):
            if n != 1 or w != 2:
                raise ValueError("not an Example's features")
            key, value = None, b""
            for en, ew, ev in fields(entry):
                if en == 1 and ew == 2:
                    key = ev.decode("utf-8")
                elif en == 2 and ew == 2:
                    value = ev
            if key is None:
                raise ValueError("a feature without a name")
            out[key] = _feature(value)
    return out


_ARROW = {"bytes": pa.binary(), "float": pa.float32(), "int64": pa.int64()}


def _example_schema(records: list[bytes]) -> tuple[pa.Schema, dict[str, int]]:
    kinds: dict[str, str] = {}
    lengths: dict[str, set[int]] = {}
    for record in records:
        for name, (kind, values) in decode_example(record).items():
            if kind == "none":
                continue
            if kinds.setdefault(name, kind) != kind:
                raise ValueError(f"feature {name} is {kinds[name]} in one record and {kind} in another")
            lengths.setdefault(name, set()).add(len(values))
    fields, widths = [], {}
    for name in sorted(kinds):
        base = _ARROW[kinds[name]]
        seen = lengths[name]
        if seen == {1}:
            fields.append(pa.field(name, base))
            widths[name] = 1
        elif len(seen) == 1:
            width = seen.pop()
            fields.append(pa.field(name, pa.list_(base, width)))
            widths[name] = width
        else:
            fields.append(pa.field(name, pa.list_(base)))
            widths[name] = -1
    return pa.schema(fields), widths


class TFRecord(Format):
    name = "tfrecord"
    extensions = (".tfrecord", ".tfrecords", ".tfrecord.gz", ".tfrecords.gz", ".tfrecord.zlib")

    def inspect(self, file: Any, size: int, compression: str = "") -> FileInfo:
        stream = _stream(file, compression)
        units: list[Unit] = []
        first, rows, total = 0, 0, 0
        for _ in _records(stream, None, verify=False):
            rows += 1
            total += 1
            if stream.offset - first >= UNIT_BYTES:
                units.append(Unit(rows, first, stream.offset - first))
                first, rows = stream.offset, 0
        if stream.offset > first:
            units.append(Unit(rows, first, stream.offset - first))
        sample: list[bytes] = []
        for _, data in _records(_stream(file, compression), None, verify=True):
            if data is None or len(sample) >= _SAMPLE:
                break
            sample.append(data)
        try:
            schema, widths = _example_schema(sample) if sample else (pa.schema([("record", pa.binary())]), {})
            example = bool(sample)
        except (ValueError, IndexError, UnicodeDecodeError):
            schema, widths, example = pa.schema([("record", pa.binary())]), {}, False
        return FileInfo(schema, total, tuple(units), {"compression": compression, "example": example,
                                                       "widths": widths})

    def read(self, file: Any, info: FileInfo, unit: int, columns: Sequence[str] | None) -> pa.Table:
        u = info.units[unit]
        stream = _stream(file, info.extra.get("compression", ""), u.offset)
        records = [data for _, data in _records(stream, u.offset + u.length, verify=True) if data is not None]
        if len(records) != u.rows:
            raise BadFile(f"records at {u.offset} are {len(records)}, the walk found {u.rows}", u.offset)
        names = list(columns) if columns is not None else info.schema.names
        if not info.extra.get("example"):
            return pa.table({"record": pa.array(records, pa.binary())}).select(names)
        widths = info.extra.get("widths", {})
        values: dict[str, list[Any]] = {n: [] for n in names}
        for i, record in enumerate(records):
            try:
                features = decode_example(record)
            except (ValueError, IndexError, UnicodeDecodeError):
                raise BadFile(f"record {i} of the unit at {u.offset} is not a tf.train.Example", u.offset) from None
            for n in names:
                kind, v = features.get(n, ("none", []))
                width = widths.get(n, -1)
                if width > 0 and len(v) != width:
                    raise BadFile(f"feature {n} of record {i} of the unit at {u.offset} has {len(v)} values, "
                                  f"the file's first records {width}", u.offset)
                values[n].append(v[0] if width == 1 else list(v) if kind == "bytes" else v)
        arrays = []
        for n in names:
            field = info.schema.field(n)
            if pa.types.is_list(field.type) or pa.types.is_fixed_size_list(field.type):
                flat = values[n]
                if flat and isinstance(flat[0], np.ndarray):
                    offsets = np.concatenate([[0], np.cumsum([len(v) for v in flat])]).astype(np.int32)
                    child = pa.array(np.concatenate(flat), field.type.value_type)
                    array = pa.ListArray.from_arrays(pa.array(offsets), child)
                    arrays.append(array.cast(field.type))
                    continue
            arrays.append(pa.array(values[n], field.type))
        return pa.Table.from_arrays(arrays, schema=pa.schema([info.schema.field(n) for n in names]))

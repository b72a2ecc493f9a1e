"""The format readers, by name and by file extension (:mod:`.base` says what each one does)."""
from __future__ import annotations

from .avro import Avro
from .base import BadFile, FileInfo, Format, Unit
from .orc import ORC
from .parquet import Parquet
from .tfrecord import TFRecord

__all__ = ["FORMATS", "BadFile", "FileInfo", "Format", "Unit", "format_named", "inferred_format"]

#: Every format, by its name in a job's ``tony.data.<name>.format``.
FORMATS: dict[str, Format] = {f.name: f for f in (Parquet(), ORC(), Avro(), TFRecord())}


def format_named(name: str) -> Format:
    return FORMATS[name]


def inferred_format(path: str) -> str | None:
    """The format a file's name says, or None (the longest matching extension wins)."""
    lower = path.lower()
    best: tuple[int, str] | None = None
    for f in FORMATS.values():
        for ext in f.extensions:
            if lower.endswith(ext) and (best is None or len(ext) > best[0]):
                best = (len(ext), f.name)
    return best[1] if best else None

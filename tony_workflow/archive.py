"""Archives a job ships to its tasks (a ``python_venv`` zip): which of them are safe to unpack.

An entry named with ``..`` or an absolute path, or one that is a symbolic link, would let an
archive write (or later point) outside the task's directory when it is unpacked. Such an archive is
refused when the job is submitted, naming the entry, and the executor checks again before it
unpacks, since the archive it gets is the one on disk then.
"""
from __future__ import annotations

import os
import stat
import zipfile
from pathlib import PurePosixPath, PureWindowsPath

__all__ = ["unsafe_entry"]


def unsafe_entry(path: str | os.PathLike[str]) -> str | None:
    """Why the zip at ``path`` must not be unpacked (naming its first unsafe entry), or None when every
    entry stays inside the directory it is unpacked into. Raises ValueError when ``path`` is not a zip."""
    if not zipfile.is_zipfile(path):
        raise ValueError("is not a zip file")
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            name = info.filename
            parts = PurePosixPath(name.replace("\\", "/")).parts
            if name.startswith(("/", "\\")) or PureWindowsPath(name).drive:
                return f"entry {name!r} has an absolute path"
            if ".." in parts:
                return f"entry {name!r} climbs out of the archive with '..'"
            if stat.S_ISLNK(info.external_attr >> 16):
                return f"entry {name!r} is a symbolic link"
    return None

"""Archives a job ships to its tasks (a ``python_venv`` zip, a resource marked ``#archive``): which
of them are safe to unpack, and unpacking them.

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

__all__ = ["unpack", "unsafe_entry"]


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


def unpack(path: str | os.PathLike[str], dest: str | os.PathLike[str]) -> None:
    """Unpacks the zip or jar, tar, tar.gz or tgz at ``path`` into directory ``dest``, as YARN
    unpacks an archive resource: by the file's name. Raises ValueError for another kind of file or
    an entry that would land outside ``dest`` (naming it)."""
    name = os.fspath(path).lower()
    os.makedirs(dest, exist_ok=True)
    if name.endswith((".zip", ".jar")):
        unsafe = unsafe_entry(path)
        if unsafe:
            raise ValueError(f"cannot be unpacked safely: {unsafe}")
        with zipfile.ZipFile(path) as archive:
            archive.extractall(dest)
            for info in archive.infolist():  # the permission bits a zip keeps (an executable stays one)
                mode = (info.external_attr >> 16) & 0o777
                if mode and not info.is_dir():
                    os.chmod(os.path.join(dest, info.filename), mode | 0o400)
    elif name.endswith((".tar", ".tar.gz", ".tgz")):
        import tarfile  # only for what is unpacked: an executor imports this module on every start
        try:
            with tarfile.open(path) as archive:
                archive.extractall(dest, filter="data")
        except tarfile.FilterError as e:
            raise ValueError(f"cannot be unpacked safely: {e}") from None
        except tarfile.TarError as e:
            raise ValueError(f"is not a tar archive: {e}") from None
    else:
        raise ValueError("is not an archive YARN unpacks (.zip, .jar, .tar, .tar.gz, .tgz)")

"""Where an input's files are, and how their bytes are read: local files and HDFS over WebHDFS.

A :class:`FileSystem` lists the files a path names (a file, a directory read recursively, or a
glob; names Hadoop and Spark keep for themselves, ``_SUCCESS``, ``_metadata``, ``.crc`` files and
anything hidden, are left out) and opens one for random access. Local files are opened with
pyarrow's own files, which read without holding the GIL. An HDFS file is read with ranged
``OPEN`` calls (``offset``/``length``) through one pooled HTTP session per process, a block of
:data:`BLOCK` bytes at a time with the next one read ahead in the background, so a reader that
walks a file forward never waits on the network twice for one block; a DataNode that fails
mid-read is retried (the NameNode sends the retry to another replica). Security is the
checkpoint store's: SPNEGO with the caller's ticket, or the container's HDFS delegation token
(:class:`~tony_workflow.storage.WebHDFSStorage`).

``hdfs://`` paths without a NameNode (``hdfs:///data``) mean ``fs.defaultFS``; ``webhdfs://``
names the NameNode's HTTP address itself. Anything without a scheme, or ``file://``, is local.
"""
from __future__ import annotations

import fnmatch
import io
import logging
import os
import posixpath
import threading
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = ["BLOCK", "FileStat", "FileSystem", "HDFSFileSystem", "LocalFileSystem", "filesystem_for", "is_hidden"]

log = logging.getLogger("tony.data")

#: How much of an HDFS file one request reads.
BLOCK = 8 << 20
#: How many blocks past the one being read are asked for ahead, each in a request of its own.
AHEAD = 2
_GLOB_CHARS = set("*?[")


@dataclass(frozen=True)
class FileStat:
    path: str
    size: int
    mtime: float


def is_hidden(name: str) -> bool:
    """Files a dataset's directory holds beside its data: markers, checksums, temporary files."""
    return name.startswith((".", "_")) or name.endswith((".crc", ".tmp", ".tony-part", "~"))


def _has_glob(path: str) -> bool:
    return any(c in _GLOB_CHARS for c in path)


class FileSystem:
    """Lists and opens the files of one file system. Paths are as the user wrote them (URIs
    for HDFS), so messages name files in the user's terms."""

    def stat(self, path: str) -> FileStat | None:  # pragma: no cover - interface
        """The file at ``path``, or None when there is none (a directory is not a file)."""
        raise NotImplementedError

    def is_dir(self, path: str) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def children(self, path: str) -> list[tuple[str, bool]]:  # pragma: no cover - interface
        """A directory's entries: (path, is a directory)."""
        raise NotImplementedError

    def open(self, path: str, size: int | None = None) -> Any:  # pragma: no cover - interface
        """A seekable binary file for ``path`` (pyarrow reads it as it is)."""
        raise NotImplementedError

    def blocks(self, path: str, size: int) -> list[tuple[int, int, list[str]]]:
        """The file's blocks as (offset, length, hosts keeping a replica); empty where the system
        cannot say (a local file: every rank's machine reads it alike)."""
        return []

    def join(self, base: str, name: str) -> str:
        return posixpath.join(base, name)

    def expand(self, path: str) -> list[FileStat]:
        """The files ``path`` names: itself, every file under it, or what its glob matches; in
        order of their paths. Raises FileNotFoundError naming the path when it names none."""
        if _has_glob(path):
            found = [f for p in self._glob(path) for f in self._files(p)]
        else:
            found = self._files(path)
        if not found:
            raise FileNotFoundError(f"{path}: no such file or directory" if not _has_glob(path) and
                                    not self.is_dir(path) else f"{path}: no data files there")
        return sorted({f.path: f for f in found}.values(), key=lambda f: f.path)

    def _files(self, path: str) -> list[FileStat]:
        stat = self.stat(path)
        if stat is not None:
            return [stat]
        if not self.is_dir(path):
            return []
        out = []
        for child, is_dir in self.children(path):
            if is_hidden(posixpath.basename(child.rstrip("/"))):
                continue
            out.extend(self._files(child) if is_dir else [s for s in [self.stat(child)] if s])
        return out

    def _glob(self, pattern: str) -> list[str]:
        root, parts = self._split(pattern)
        current = [root]
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            nxt = []
            for base in current:
                if not _has_glob(part):
                    candidate = self.join(base, part)
                    if last or self.is_dir(candidate):
                        nxt.append(candidate)
                    continue
                if not self.is_dir(base):
                    continue
                for child, is_dir in self.children(base):
                    name = posixpath.basename(child.rstrip("/"))
                    if fnmatch.fnmatchcase(name, part) and not is_hidden(name) and (last or is_dir):
                        nxt.append(child)
            current = nxt
        return current

    def _split(self, pattern: str) -> tuple[str, list[str]]:  # pragma: no cover - interface
        raise NotImplementedError


class LocalFileSystem(FileSystem):
    def _local(self, path: str) -> str:
        return path.removeprefix("file://")

    def stat(self, path: str) -> FileStat | None:
        try:
            st = os.stat(self._local(path))
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not os.path.isfile(self._local(path)):
            return None
        return FileStat(path, st.st_size, st.st_mtime)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(self._local(path))

    def children(self, path: str) -> list[tuple[str, bool]]:
        with os.scandir(self._local(path)) as entries:
            return sorted((self.join(path, e.name), e.is_dir()) for e in entries)

    def open(self, path: str, size: int | None = None) -> Any:
        import pyarrow as pa
        return pa.memory_map(self._local(path), "r")

    def _split(self, pattern: str) -> tuple[str, list[str]]:
        local = self._local(pattern)
        absolute = os.path.abspath(local)
        prefix = "file://" if pattern.startswith("file://") else ""
        return prefix + "/", [p for p in absolute.split("/") if p]


class HDFSFileSystem(FileSystem):
    """HDFS through a :class:`~tony_workflow.storage.WebHDFSStorage` rooted at ``/`` (its
    session, its login and its retries). ``prefix`` is the scheme and authority paths are given
    with (``hdfs://nn:8020``), kept in the paths this lists."""

    def __init__(self, store: Any, prefix: str):
        self.store = store
        self.prefix = prefix.rstrip("/")
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def _path(self, path: str) -> str:
        parts = urlsplit(path)
        return parts.path or "/"

    def _uri(self, hdfs_path: str) -> str:
        return f"{self.prefix}{hdfs_path}"

    def stat(self, path: str) -> FileStat | None:
        p = self._path(path)
        try:
            st = self.store._call(f"stat {p}", lambda: self.store.client.get_file_status(p))
        except FileNotFoundError:
            return None
        if st.type != "FILE":
            return None
        return FileStat(path, int(st.length), st.modificationTime / 1000.0)

    def is_dir(self, path: str) -> bool:
        p = self._path(path)
        try:
            st = self.store._call(f"stat {p}", lambda: self.store.client.get_file_status(p))
        except FileNotFoundError:
            return False
        return bool(st.type == "DIRECTORY")

    def children(self, path: str) -> list[tuple[str, bool]]:
        p = self._path(path)
        listing = self.store._call(f"list {p}", lambda: self.store.client.list_status(p))
        base = path.rstrip("/")
        return sorted((f"{base}/{st.pathSuffix}", st.type == "DIRECTORY") for st in listing)

    def _files(self, path: str) -> list[FileStat]:
        # One LISTSTATUS a directory: its entries carry their sizes and times already.
        p = self._path(path)
        try:
            st = self.store._call(f"stat {p}", lambda: self.store.client.get_file_status(p))
        except FileNotFoundError:
            return []
        if st.type == "FILE":
            return [FileStat(path, int(st.length), st.modificationTime / 1000.0)]
        out = []
        base = path.rstrip("/")
        for entry in self.store._call(f"list {p}", lambda: self.store.client.list_status(p)):
            child = f"{base}/{entry.pathSuffix}"
            if is_hidden(entry.pathSuffix):
                continue
            if entry.type == "DIRECTORY":
                out.extend(self._files(child))
            elif entry.type == "FILE":
                out.append(FileStat(child, int(entry.length), entry.modificationTime / 1000.0))
        return out

    def read(self, path: str, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset + length)`` of the file, in one ranged OPEN, retried whole. A
        DataNode that failed it (unreachable, or gone mid-answer) is named to the NameNode as one
        to avoid (``excludedatanodes``) on the retries, which then read another replica: until
        the NameNode declares a dead DataNode dead (ten minutes by default) it would otherwise keep
        offering it."""
        import requests
        import urllib3

        p = self._path(path)
        avoid: list[str] = []

        def fetch() -> bytes:
            extra = {"excludedatanodes": ",".join(avoid)} if avoid else {}
            served_by = None
            try:
                with self.store.client.open(p, offset=offset, length=length, **extra) as response:
                    served_by = getattr(response, "url", None)
                    data = response.read()
            except (requests.RequestException, urllib3.exceptions.HTTPError) as e:
                request = getattr(e, "request", None)
                self._avoid(avoid, p, offset, getattr(request, "url", None) or served_by)
                raise
            if len(data) != length:  # a DataNode that went away mid-answer
                self._avoid(avoid, p, offset, served_by)
                raise ConnectionError(f"read {p} at {offset}: {len(data)} of {length} bytes")
            return bytes(data)

        return bytes(self.store._call(f"read {p} at {offset}", fetch))

    def _avoid(self, avoid: list[str], p: str, offset: int, url: str | None) -> None:
        """Adds the DataNode that served ``url`` to ``avoid``, as the NameNode names DataNodes to
        exclude: by their data transfer address, which the block's locations give for its HTTP
        address (several DataNodes may share a host); by its host where they cannot be read."""
        netloc = urlsplit(url or "").netloc
        if not netloc or "/webhdfs/" not in (url or ""):
            return
        log.warning("reading %s at %d: the DataNode at %s failed; reading another replica", p, offset, netloc)
        host, _, port = netloc.rpartition(":")
        store = self.store
        try:
            namenode = store.client.get_active_namenode(max_staleness=30)
            r = store._session.get(f"{store.scheme}://{namenode}/webhdfs/v1{p}",
                                   params={"op": "GET_BLOCK_LOCATIONS", "offset": offset, "length": 1,
                                           "user.name": store.user}, timeout=store.timeout)
            blocks = (r.json().get("LocatedBlocks") or {}).get("locatedBlocks") or [] if r.status_code == 200 else []
            for block in blocks:
                for node in block.get("locations") or []:
                    if str(node.get("infoPort")) == port and host in (node.get("ipAddr"), node.get("hostName")):
                        name = f"{node['ipAddr']}:{node['xferPort']}"
                        if name not in avoid:
                            avoid.append(name)
                        return
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if host and host not in avoid:
            avoid.append(host)

    def ahead(self, fn: Any) -> Future[bytes]:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=AHEAD + 1, thread_name_prefix="tony-data-read")
            return self._pool.submit(fn)

    def open(self, path: str, size: int | None = None) -> Any:
        if size is None:
            stat = self.stat(path)
            if stat is None:
                raise FileNotFoundError(path)
            size = stat.size
        return RangeFile(self, path, size)

    def blocks(self, path: str, size: int) -> list[tuple[int, int, list[str]]]:
        """One ``GETFILEBLOCKLOCATIONS`` for the whole file; empty when the NameNode cannot answer
        it (WebHDFS before Hadoop 3.3): the reading then prefers no rank's machine."""
        p = self._path(path)
        store = self.store

        def ask() -> list[tuple[int, int, list[str]]]:
            host = store.client.get_active_namenode(max_staleness=30)
            r = store._session.get(f"{store.scheme}://{host}/webhdfs/v1{p}",
                                   params={"op": "GETFILEBLOCKLOCATIONS", "offset": 0, "length": max(size, 1),
                                           "user.name": store.user}, timeout=store.timeout)
            if r.status_code != 200:
                return []
            found = ((r.json().get("BlockLocations") or {}).get("BlockLocation")) or []
            return [(int(b["offset"]), int(b["length"]), [str(h) for h in b.get("hosts") or []]) for b in found]

        try:
            return list(store._call(f"block locations {p}", ask))
        except (OSError, ValueError, KeyError, TypeError):
            return []

    def _split(self, pattern: str) -> tuple[str, list[str]]:
        return self._uri("/"), [p for p in self._path(pattern).split("/") if p]

    def join(self, base: str, name: str) -> str:
        return f"{base.rstrip('/')}/{name}"


class RangeFile(io.RawIOBase):
    """A read-only, seekable HDFS file read a block at a time, the next :data:`AHEAD` blocks read
    ahead while the reader walks forward; a few blocks are kept for readers that come back."""

    KEEP = AHEAD + 3

    def __init__(self, fs: HDFSFileSystem, path: str, size: int, block: int = BLOCK):
        super().__init__()
        self.fs, self.path, self.size, self.block = fs, path, size, block
        self.position = 0
        self.blocks: OrderedDict[int, Future[bytes]] = OrderedDict()
        self.requests = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def _fetch(self, index: int) -> Future[bytes]:
        if index in self.blocks:
            self.blocks.move_to_end(index)
            return self.blocks[index]
        start = index * self.block
        length = min(self.block, self.size - start)
        self.requests += 1
        future = self.fs.ahead(lambda: self.fs.read(self.path, start, length))
        self.blocks[index] = future
        while len(self.blocks) > self.KEEP:
            self.blocks.popitem(last=False)
        return future

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self.size - self.position
        n = min(n, self.size - self.position)
        if n <= 0:
            return b""
        parts: list[memoryview] = []
        while n > 0:
            index, skip = divmod(self.position, self.block)
            data = self._fetch(index).result()
            for ahead in range(index + 1, index + 1 + AHEAD):
                if ahead * self.block < self.size:
                    self._fetch(ahead)
            chunk = memoryview(data)[skip:skip + n]
            parts.append(chunk)
            self.position += len(chunk)
            n -= len(chunk)
        return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def chunks(self, offset: int, length: int) -> Iterator[bytes]:
        self.seek(offset)
        while length > 0:
            data = self.read(min(length, self.block))
            if not data:
                return
            length -= len(data)
            yield data


_SYSTEMS: dict[tuple[str, str, str | None, int], FileSystem] = {}
_SYSTEMS_LOCK = threading.Lock()


def qualified_path(path: str, hadoop_conf_dir: str | None = None) -> str:
    """``path`` naming its NameNode (``hdfs:///p`` gets ``fs.defaultFS``'s), so that a task reads
    what the client planned whatever its own configuration says."""
    if path.lower().startswith("hdfs:///"):
        from ..storage import qualified
        return qualified(path, hadoop_conf_dir)
    return path


def filesystem_for(path: str, *, hadoop_conf_dir: str | None = None, login: Any = None) -> FileSystem:
    """The file system ``path`` is on: local, or HDFS through the Hadoop configuration in
    ``hadoop_conf_dir`` (default ``$HADOOP_CONF_DIR``) as ``login`` (default: the ticket cache,
    or the container's delegation token). One a process per NameNode and login: its connections
    are pooled."""
    scheme = urlsplit(path).scheme.lower() if "://" in path else ""
    if scheme in ("", "file"):
        return LocalFileSystem()
    if scheme not in ("hdfs", "webhdfs", "swebhdfs"):
        raise ValueError(f"{path}: the data reader reads local files, hdfs:// and webhdfs:// paths, not {scheme}://")
    parts = urlsplit(qualified_path(path, hadoop_conf_dir))
    key = (parts.scheme, parts.netloc, hadoop_conf_dir, id(login))
    with _SYSTEMS_LOCK:
        if key not in _SYSTEMS:
            from ..storage import open_storage
            store = open_storage(f"{parts.scheme}://{parts.netloc}/", hadoop_conf_dir=hadoop_conf_dir, login=login)
            _SYSTEMS[key] = HDFSFileSystem(store, f"{parts.scheme}://{parts.netloc}")
        return _SYSTEMS[key]

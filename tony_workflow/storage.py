"""Filesystems for staging and the checkpoint mirror.

A :class:`Storage` stores whole files under slash-separated keys. The checkpoint mirror copies a
task's local checkpoint directory up to storage in an order that keeps the stored copy loadable at
every moment (data files, then index files, then the ``checkpoint`` state file), and restores it
into a fresh local directory before a session starts.

Stores: :class:`LocalStorage` (a local or mounted directory) and :class:`WebHDFSStorage` (HDFS over
its HTTP API, so no Hadoop client or JVM is needed where tasks run). :func:`open_storage` picks one
from a location: a path, ``file://``, ``hdfs://`` or ``webhdfs://``.

On a Kerberized cluster WebHDFS wants proof of who calls: a YARN container shows the HDFS delegation
token YARN gave it (``delegation=``), anyone else a Kerberos ticket through SPNEGO (see
:mod:`tony_workflow.kerberos`).
"""
from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote, urlsplit

from .errors import ConfigError, StoreError
from .hadoop import read_conf
from .kerberos import Login, hdfs_delegation_token, is_secure
from .process import user_name

__all__ = ["CheckpointMirror", "LocalStorage", "Storage", "WebHDFSStorage", "open_storage", "upload_order"]

T = TypeVar("T")

# Files a checkpoint writer produces while saving; copying them would publish half a checkpoint.
_TEMP_MARKERS = (".tmp", "_temp", ".tony-part", "~")


def _is_temp(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return any(m in base for m in _TEMP_MARKERS) or base.startswith(".")


def upload_order(name: str) -> int:
    """Rank for copying: data first, index next, state files last, so readers never see a
    state file pointing at a checkpoint whose data has not arrived."""
    base = name.rsplit("/", 1)[-1]
    if base == "checkpoint" or base.endswith(".json") and "metadata" in base:
        return 2
    if base.endswith(".index"):
        return 1
    return 0


_PERMANENT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


def retry(fn: Callable[[], T], attempts: int = 5, base_delay: float = 0.2,
          retry_on: Callable[[BaseException], bool] | None = None) -> T:
    """Runs ``fn`` with exponential backoff. By default it retries OSError other than
    FileNotFoundError (network filesystems hiccup); ``retry_on`` picks the retried errors instead."""
    def transient(e: BaseException) -> bool:
        if retry_on is not None:
            return retry_on(e)
        # A missing file, a refused permission, a full disk or a read-only store stay so: no retry.
        return (isinstance(e, OSError) and not isinstance(e, (FileNotFoundError, PermissionError))
                and e.errno not in _PERMANENT_ERRNOS)

    for i in range(attempts):
        try:
            return fn()
        except Exception as e:
            if i == attempts - 1 or not transient(e):
                raise
            time.sleep(base_delay * (2 ** i))
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Entry:
    size: int
    mtime: float


class Storage:
    """Interface of a file store. Keys are relative, slash-separated paths."""

    uri: str

    def list(self, prefix: str) -> dict[str, Entry]:  # pragma: no cover - interface
        raise NotImplementedError

    def put(self, local: Path, key: str) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def get(self, key: str, local: Path) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def delete(self, key: str) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class LocalStorage(Storage):
    """A directory on the local filesystem (or any mounted one)."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)
        self.uri = str(self.root)

    def _path(self, key: str) -> Path:
        p = (self.root / key).resolve()
        if self.root.resolve() not in (p, *p.parents):
            raise ValueError(f"storage key escapes the store: {key!r}")
        return p

    def list(self, prefix: str) -> dict[str, Entry]:
        base = self._path(prefix) if prefix else self.root
        out: dict[str, Entry] = {}
        if not base.is_dir():
            return out
        for p in base.rglob("*"):
            if p.is_file() and not _is_temp(p.name):
                st = p.stat()
                out[p.relative_to(base).as_posix()] = Entry(st.st_size, st.st_mtime)
        return out

    def put(self, local: Path, key: str) -> None:
        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(dest.name + ".tony-part")

        def copy() -> None:
            try:
                shutil.copyfile(local, part)
                os.replace(part, dest)  # atomic: readers see the old file or the whole new one
            except BaseException:
                with contextlib.suppress(OSError):
                    part.unlink()  # a full disk or a refused write leaves no partial file behind
                raise

        retry(copy)

    def get(self, key: str, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        retry(lambda: shutil.copyfile(self._path(key), local))

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink()
        except FileNotFoundError:
            pass


class _Transient(ConnectionError):
    """A failure worth retrying: the server was unreachable, overloaded or failing over."""


# Exceptions a NameNode throws while it cannot serve yet (failing over, in safe mode after a start).
_RETRIABLE_REMOTE = ("RetriableException", "StandbyException", "SafeModeException")


def _refused(where: str, kerberos: bool, login: Login | None) -> PermissionError:
    """The error for a WebHDFS that turned the caller away as unauthenticated (HTTP 401)."""
    if not kerberos:
        why = (f"{where} asks for a Kerberos login (SPNEGO), but the Hadoop configuration does not say "
               "hadoop.security.authentication=kerberos: point HADOOP_CONF_DIR at the cluster's own configuration")
    else:
        why = str((login or Login()).refused(where))
    return PermissionError(errno.EACCES, why)


class WebHDFSStorage(Storage):
    """A directory in HDFS, reached over WebHDFS with pyhdfs.

    ``hosts`` are the NameNodes' HTTP addresses (``host:port``; several for an HA pair, the active
    one is found by pyhdfs). Keys live under ``root``. Every call is retried with exponential
    backoff when the server cannot be reached or answers 5xx; other failures surface at once, as
    :class:`OSError` (``FileNotFoundError``, ``PermissionError`` ...), which is what the checkpoint
    mirror's callers handle.

    With ``kerberos`` (a Kerberized HDFS) every call proves who makes it, and no ``user.name`` is
    sent (a secure NameNode refuses one that differs from the proof): with the HDFS delegation
    token ``delegation`` (default: the one YARN gave this container, if any; see
    :func:`~tony_workflow.kerberos.hdfs_delegation_token`), else with ``login``'s Kerberos ticket
    over SPNEGO (default: the ticket cache). ``namenode`` (``host:port`` of the NameNode's RPC
    server, or an HA nameservice) picks that NameNode's token when the container has several.
    """

    def __init__(self, hosts: str | Sequence[str], root: str = "/", *, user: str | None = None,
                 https: bool = False, timeout: float = 30.0, attempts: int = 5, base_delay: float = 0.5,
                 uri: str | None = None, kerberos: bool = False, login: Login | None = None,
                 delegation: str | None = None, namenode: str | None = None):
        try:
            import pyhdfs
            import requests
        except ImportError as e:
            raise ConfigError(f"HDFS storage needs pyhdfs ({e}); install tony-workflow[yarn]") from None

        token = (delegation or hdfs_delegation_token(namenode)) if kerberos else None
        where = f"WebHDFS at {hosts if isinstance(hosts, str) else ','.join(hosts)}"

        class _Session(requests.Session):
            def request(self, method, url, *args, **kwargs):  # type: ignore[override]
                # pyhdfs passes no timeout when it follows the NameNode's redirect to a DataNode; a
                # stalled DataNode must not hang the mirror forever.
                kwargs.setdefault("timeout", timeout)
                params = kwargs.get("params")
                if kerberos and isinstance(params, dict):
                    # Calls to the NameNode carry parameters; the DataNode's redirect URL already
                    # holds the token the NameNode put there.
                    params = {k: v for k, v in params.items() if k != "user.name"}
                    if token:
                        params["delegation"] = token
                    kwargs["params"] = params
                response = super().request(method, url, *args, **kwargs)
                if response.status_code == 401:
                    raise _refused(where, kerberos, login)
                return response

        self._pyhdfs = pyhdfs
        self._session = _Session()
        if kerberos and not token:
            self._session.auth = (login or Login()).http_auth()
        self.kerberos, self.delegation = kerberos, token
        self.user = user or user_name()
        self.scheme = "https" if https else "http"
        self.timeout = timeout
        self.attempts = attempts
        self.base_delay = base_delay
        # pyhdfs's own retry sleeps a fixed time; the backoff here replaces it.
        self.client = pyhdfs.HdfsClient(hosts=hosts, user_name=self.user, timeout=timeout, max_tries=1,
                                        retry_delay=0, scheme=self.scheme, requests_session=self._session)
        self.root = posixpath.normpath("/" + root.strip("/"))
        self.uri = uri or f"{'swebhdfs' if https else 'webhdfs'}://{self.client.hosts[0]}{self.root}"

    def _path(self, key: str) -> str:
        if not key:
            return self.root
        p = posixpath.normpath(posixpath.join(self.root, key.lstrip("/")))
        if p != self.root and not p.startswith(self.root.rstrip("/") + "/"):
            raise ValueError(f"storage key escapes the store: {key!r}")
        return p

    # -- error handling ---------------------------------------------------------------------------

    def _transient(self, e: BaseException) -> bool:
        import requests
        import urllib3

        hdfs = self._pyhdfs
        if isinstance(e, hdfs.HdfsHttpException):
            return e.status_code >= 500 or e.exception in _RETRIABLE_REMOTE
        # pyhdfs raises the bare base class when an answer is not WebHDFS's JSON (a proxy's error
        # page, a server shutting down), and HdfsNoServerException when no NameNode answered.
        return (type(e) is hdfs.HdfsException
                or isinstance(e, (hdfs.HdfsNoServerException, requests.ConnectionError, requests.Timeout,
                                  requests.exceptions.ChunkedEncodingError, urllib3.exceptions.HTTPError,
                                  ConnectionError, TimeoutError)))

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Runs one store operation with retries, and turns its failures into OSErrors."""
        hdfs = self._pyhdfs

        def attempt() -> T:
            try:
                return fn()
            except FileNotFoundError:
                raise
            except hdfs.HdfsFileNotFoundException as e:
                raise FileNotFoundError(errno.ENOENT, f"{what}: {e}") from None
            except (hdfs.HdfsAccessControlException, hdfs.HdfsSecurityException) as e:
                raise PermissionError(errno.EACCES, f"{what}: {e}") from None
            except Exception as e:
                if self._transient(e):
                    raise _Transient(f"{what}: WebHDFS at {','.join(self.client.hosts)} failed: {e}") from e
                if isinstance(e, hdfs.HdfsException):
                    raise StoreError(f"{what}: {e}") from e
                raise

        return retry(attempt, self.attempts, self.base_delay, retry_on=lambda e: isinstance(e, _Transient))

    def _rename_over(self, src: str, dest: str) -> None:
        """Renames ``src`` onto ``dest`` atomically, replacing it. (pyhdfs's ``rename`` cannot: it
        expects the JSON answer WebHDFS gives only without rename options.)"""
        import requests

        host = self.client.get_active_namenode(max_staleness=30)
        r = self._session.put(f"{self.scheme}://{host}/webhdfs/v1{quote(src)}",
                              params={"op": "RENAME", "destination": dest, "renameoptions": "OVERWRITE",
                                      "user.name": self.user}, timeout=self.timeout)
        if r.status_code == 200:
            return
        try:
            remote = r.json()["RemoteException"]
            name, message = remote.get("exception", ""), remote.get("message", "")
        except (ValueError, KeyError, TypeError):
            name, message = "", r.text[:200]
        if r.status_code == 404 or name == "FileNotFoundException":
            raise FileNotFoundError(errno.ENOENT, f"rename {src} -> {dest}: {message}")
        if r.status_code >= 500 or name in _RETRIABLE_REMOTE:
            raise requests.ConnectionError(f"rename {src} -> {dest}: HTTP {r.status_code} {name} {message}")
        raise StoreError(f"rename {src} -> {dest}: HTTP {r.status_code} {name} {message}")

    # -- the Storage interface --------------------------------------------------------------------

    def list(self, prefix: str) -> dict[str, Entry]:
        base = self._path(prefix)
        out: dict[str, Entry] = {}

        def walk(directory: str, rel: str) -> None:
            try:
                listing = self._call(f"list {directory}", lambda: self.client.list_status(directory))
            except FileNotFoundError:  # removed while we walk
                return
            for st in listing:
                if st.type == "DIRECTORY":
                    walk(posixpath.join(directory, st.pathSuffix), f"{rel}{st.pathSuffix}/")
                elif st.type == "FILE" and not _is_temp(st.pathSuffix):
                    out[f"{rel}{st.pathSuffix}"] = Entry(st.length, st.modificationTime / 1000.0)

        try:
            status = self._call(f"stat {base}", lambda: self.client.get_file_status(base))
        except FileNotFoundError:
            return out
        if status.type == "DIRECTORY":
            walk(base, "")
        return out

    def put(self, local: Path, key: str) -> None:
        dest = self._path(key)
        # A name of its own per upload: concurrent writers of one key never share a partial file,
        # and readers skip it (see _is_temp) until the rename publishes it whole.
        part = f"{dest}.{uuid.uuid4().hex[:12]}.tony-part"

        def upload() -> None:
            with open(local, "rb") as f:
                self.client.create(part, f, overwrite=True)
            self._rename_over(part, dest)

        try:
            self._call(f"put {dest}", upload)
        except Exception:
            with contextlib.suppress(Exception):  # the upload's error is the one to report
                self.client.delete(part)
            raise

    def get(self, key: str, local: Path) -> None:
        src = self._path(key)
        local.parent.mkdir(parents=True, exist_ok=True)
        part = local.with_name(local.name + ".tony-part")

        def download() -> None:
            with self.client.open(src) as stream, open(part, "wb") as f:
                shutil.copyfileobj(stream, f, 1 << 20)
            os.replace(part, local)

        try:
            self._call(f"get {src}", download)
        finally:
            part.unlink(missing_ok=True)

    def delete(self, key: str) -> None:
        path = self._path(key)
        self._call(f"delete {path}", lambda: self.client.delete(path))  # False when already gone


# -- locations ----------------------------------------------------------------------------------

def _hadoop_conf(conf_dir: str | os.PathLike[str] | None) -> dict[str, str]:
    """The properties of core-site.xml and hdfs-site.xml in ``conf_dir`` (hdfs-site wins)."""
    return read_conf(conf_dir, ("core-site.xml", "hdfs-site.xml"))


def _namenode_web_addresses(authority: str, conf: dict[str, str], https: bool = False) -> list[str]:
    """WebHDFS addresses of the NameNode(s) of ``hdfs://authority``, where Hadoop's configuration
    puts them: an HA nameservice's ``dfs.namenode.http-address.<ns>.<nn>``, else
    ``dfs.namenode.http-address``, else the NameNode's host on Hadoop's default port (9870).
    With ``https`` the ``https-address`` keys and port 9871."""
    key, default_port = ("dfs.namenode.https-address", 9871) if https else ("dfs.namenode.http-address", 9870)
    nn_ids = conf.get(f"dfs.ha.namenodes.{authority}")
    if nn_ids:
        keys = [f"{key}.{authority}.{nn.strip()}" for nn in nn_ids.split(",") if nn.strip()]
        missing = [k for k in keys if not conf.get(k)]
        if missing:
            raise ConfigError(f"nameservice {authority!r} is missing {', '.join(missing)} in hdfs-site.xml")
        return [conf[k] for k in keys]
    host = urlsplit(f"//{authority}").hostname or ""
    address = conf.get(f"{key}.{authority}") or conf.get(key)
    if address:
        bind_host, _, port = address.rpartition(":")
        # A wildcard bind address names no host to connect to: use the NameNode's.
        if bind_host in ("", "0.0.0.0", "[::]", "::") and host:
            address = f"{host}:{port}"
        return [address]
    if not host:
        raise ConfigError(f"cannot tell where WebHDFS listens: set {key} in $HADOOP_CONF_DIR/hdfs-site.xml, "
                         "or use a webhdfs://host:port/path location")
    return [f"{host}:{default_port}"]


def open_storage(location: str, *, hadoop_conf_dir: str | os.PathLike[str] | None = None,
                 login: Login | None = None) -> Storage:
    """A store for ``location``: a local path or ``file://`` URI, ``webhdfs://host:port/path``
    (``swebhdfs://`` for HTTPS), or ``hdfs://namenode[:port]/path`` (``hdfs:///path`` means
    ``fs.defaultFS``). For ``hdfs://`` the WebHDFS address comes from the Hadoop configuration in
    ``hadoop_conf_dir`` (default ``$HADOOP_CONF_DIR``). When that configuration says
    ``hadoop.security.authentication=kerberos``, HDFS is reached as ``login`` (default: the
    ticket cache), or with the container's delegation token (see :class:`WebHDFSStorage`); a
    missing login is a :class:`~tony_workflow.kerberos.LoginError`."""
    location = location.removeprefix("file://")
    if "://" not in location:
        return LocalStorage(location)
    parts = urlsplit(location)
    scheme = parts.scheme.lower()
    conf = _hadoop_conf(hadoop_conf_dir or os.environ.get("HADOOP_CONF_DIR"))
    secure = {"kerberos": is_secure(conf), "login": login}
    if scheme in ("webhdfs", "swebhdfs"):
        if not parts.netloc:
            raise ConfigError(f"{location!r}: a webhdfs:// location needs host:port of the NameNode's HTTP server")
        return WebHDFSStorage(parts.netloc, parts.path or "/", https=scheme == "swebhdfs", uri=location, **secure)
    if scheme == "hdfs":
        authority = parts.netloc
        if not authority:
            default = urlsplit(conf.get("fs.defaultFS", ""))
            if default.scheme != "hdfs" or not default.netloc:
                raise ConfigError(f"{location!r} names no NameNode and fs.defaultFS in HADOOP_CONF_DIR is not "
                                 "an hdfs:// URI")
            authority = default.netloc
        https = conf.get("dfs.http.policy", "HTTP_ONLY").upper() == "HTTPS_ONLY"
        return WebHDFSStorage(_namenode_web_addresses(authority, conf, https), parts.path or "/", https=https,
                              uri=location, namenode=authority, **secure)
    raise ConfigError(f"unsupported storage location {location!r}: use a local path, file://, hdfs:// or "
                     "webhdfs:// URI")


class CheckpointMirror:
    """Keeps ``prefix`` in a store equal to a local checkpoint directory."""

    def __init__(self, store: Storage, prefix: str, local_dir: str | os.PathLike[str]):
        self.store = store
        self.prefix = prefix.strip("/")
        self.local = Path(local_dir)
        self._sent: dict[str, tuple[int, float]] = {}
        self._sent_state: dict[str, bytes] = {}  # state file -> the content last uploaded
        self._lock = threading.Lock()  # the periodic sync and a sync at stop may overlap

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _local_files(self) -> dict[str, tuple[int, float]]:
        out = {}
        if self.local.is_dir():
            for p in self.local.rglob("*"):
                if p.is_file() and not _is_temp(p.relative_to(self.local).as_posix()):
                    try:
                        st = p.stat()
                    except FileNotFoundError:  # deleted by the trainer while we walk
                        continue
                    out[p.relative_to(self.local).as_posix()] = (st.st_size, st.st_mtime)
        return out

    def restore(self) -> int:
        """Copies the stored checkpoint into the local directory; returns the number of files."""
        self.local.mkdir(parents=True, exist_ok=True)
        remote = self.store.list(self.prefix)
        for rel in sorted(remote, key=lambda r: (upload_order(r), r)):
            self.store.get(self._key(rel), self.local / rel)
        self._sent = self._local_files()
        self._sent_state = {r: (self.local / r).read_bytes() for r in self._sent
                            if r.rsplit("/", 1)[-1] == "checkpoint"}
        return len(remote)

    def sync(self) -> int:
        """Uploads new or changed files, then removes stored files that are gone locally.

        A TensorFlow ``checkpoint`` state file is uploaded only as the snapshot read before its
        checkpoint's files were sent, and only once every checkpoint it names has its index and data
        in the store: the trainer may rotate to a newer checkpoint while a sync runs, and a state
        file naming files that never arrived would make the next restore fail. Stored state files,
        and the files they name, are not deleted. Returns the number of files uploaded."""
        with self._lock:
            return self._sync()

    def _sync(self) -> int:
        files = self._local_files()
        states: dict[str, bytes] = {}
        for rel in files:
            if rel.rsplit("/", 1)[-1] == "checkpoint":
                try:
                    states[rel] = (self.local / rel).read_bytes()
                except FileNotFoundError:
                    continue
        changed = [r for r, sig in files.items() if self._sent.get(r) != sig and r not in states]
        uploaded = 0
        for rel in sorted(changed, key=lambda r: (upload_order(r), r)):
            try:
                self.store.put(self.local / rel, self._key(rel))
            except FileNotFoundError:
                continue  # rotated away by the trainer between the walk and the copy
            self._sent[rel] = files[rel]
            uploaded += 1
        for rel, content in states.items():
            if self._sent_state.get(rel) == content or not self._complete(rel, content):
                continue
            self._put_bytes(content, rel)
            self._sent_state[rel] = content
            self._sent[rel] = files[rel]
            uploaded += 1
        # A state file gone locally stays in the store, and so does what it names: a trainer that
        # removes its checkpoint once done (Keras' BackupAndRestore) may still be killed before it
        # exits, and its relaunch must find the checkpoint, not start over.
        keep = {f for rel, content in self._sent_state.items() for f in self._named_files(rel, content)}
        keep |= set(self._sent_state)
        for rel in [r for r in self._sent if r not in files and r not in keep]:
            self.store.delete(self._key(rel))
            del self._sent[rel]
        return uploaded

    @staticmethod
    def _prefixes(state_rel: str, content: bytes) -> set[str]:
        """The checkpoint prefixes a TensorFlow state file names, relative to the mirrored dir."""
        base = state_rel.rsplit("/", 1)[0] + "/" if "/" in state_rel else ""
        out = set()
        for name in re.findall(r'(?:model_checkpoint_path|all_model_checkpoint_paths):\s*"([^"]+)"',
                               content.decode("utf-8", "replace")):
            out.add(base + name.rsplit("/", 1)[-1])  # absolute paths point into this same directory
        return out

    def _named_files(self, state_rel: str, content: bytes) -> set[str]:
        prefixes = self._prefixes(state_rel, content)
        return {r for r in self._sent if any(r == p + ".index" or r.startswith(p + ".data-") for p in prefixes)}

    def _complete(self, state_rel: str, content: bytes) -> bool:
        for prefix in self._prefixes(state_rel, content):
            if prefix + ".index" not in self._sent or not any(r.startswith(prefix + ".data-") for r in self._sent):
                return False
        return True

    def _put_bytes(self, content: bytes, rel: str) -> None:
        with tempfile.NamedTemporaryFile(delete=False) as fh:
            fh.write(content)
        try:
            self.store.put(Path(fh.name), self._key(rel))
        finally:
            os.unlink(fh.name)

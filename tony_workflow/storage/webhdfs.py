"""A store in HDFS, over WebHDFS (HDFS's HTTP API), so that no Hadoop client or JVM is needed
where tasks run.

Where the NameNodes' web servers are comes from a location and Hadoop's configuration
(:func:`namenode_web_addresses`: an HA nameservice's NameNodes, a single NameNode, or its host on
the default port); pyhdfs finds the active one of an HA pair. On a Kerberized cluster WebHDFS
wants proof of who calls: a YARN container shows the HDFS delegation token YARN gave it
(``delegation=``), anyone else a Kerberos ticket through SPNEGO (see :mod:`tony_workflow.kerberos`).
"""
from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import shutil
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

from ..errors import ConfigError, StoreError
from ..kerberos import Login, hdfs_delegation_token
from ..process import user_name
from .base import Entry, Storage, is_temp, retry

__all__ = ["WebHDFSStorage", "namenode_web_addresses"]

T = TypeVar("T")


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


class _Counted:
    """A file being uploaded, telling ``progress`` how many bytes were read from it so far."""

    def __init__(self, f: Any, size: int, progress: Callable[[int], None]):
        self.f, self.size, self.progress, self.done = f, size, progress, 0

    def read(self, n: int = -1) -> bytes:
        data: bytes = self.f.read(n)
        self.done += len(data)
        self.progress(self.done)
        return data

    def __len__(self) -> int:
        return self.size


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

    ``doas`` acts as that user (a job's proxy user) rather than as the login, which the NameNode
    allows only where ``hadoop.proxyuser.<login>.*`` lets the login impersonate them: what is
    written belongs to ``doas``.
    """

    def __init__(self, hosts: str | Sequence[str], root: str = "/", *, user: str | None = None,
                 https: bool = False, timeout: float = 30.0, attempts: int = 5, base_delay: float = 0.5,
                 uri: str | None = None, kerberos: bool = False, login: Login | None = None,
                 delegation: str | None = None, namenode: str | None = None, doas: str | None = None):
        try:
            import pyhdfs
            import requests
        except ImportError as e:
            raise ConfigError(f"HDFS storage needs pyhdfs ({e}); install tony-workflow[yarn]") from None

        token = (delegation or hdfs_delegation_token(namenode)) if kerberos else None
        where = f"WebHDFS at {hosts if isinstance(hosts, str) else ','.join(hosts)}"

        class _Session(requests.Session):
            def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
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
                if doas and isinstance(params, dict) and not token:
                    kwargs["params"] = {**kwargs["params"], "doas": doas}
                response = super().request(method, url, *args, **kwargs)
                if response.status_code == 401:
                    raise _refused(where, kerberos, login)
                return response

        self._pyhdfs = pyhdfs
        self._session = _Session()
        if kerberos and not token:
            self._session.auth = (login or Login()).http_auth()
        self.kerberos, self.delegation, self.doas = kerberos, token, doas
        self.user = user or user_name()
        self.scheme = "https" if https else "http"
        self.timeout = timeout
        # A requests session serves threads at once; a SPNEGO handshake in flight does not.
        self.concurrent = self._session.auth is None
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
                elif st.type == "FILE" and not is_temp(st.pathSuffix):
                    out[f"{rel}{st.pathSuffix}"] = Entry(st.length, st.modificationTime / 1000.0)

        try:
            status = self._call(f"stat {base}", lambda: self.client.get_file_status(base))
        except FileNotFoundError:
            return out
        if status.type == "DIRECTORY":
            walk(base, "")
        return out

    def _upload(self, local: Path, key: str, verb: str, overwrite: bool,
                progress: Callable[[int], None] | None = None) -> bool:
        """Uploads ``local`` under a name of its own, then renames it to ``key``'s path: over what
        is there (``overwrite``), or only where nothing is (False when something was). Concurrent
        writers of one key never share a partial file, and readers skip one (see _is_temp) until
        the rename publishes it whole; the part is deleted whenever it was not renamed."""
        dest = self._path(key)
        part = f"{dest}.{uuid.uuid4().hex[:12]}.tony-part"

        def upload() -> bool:
            with open(local, "rb") as f:
                body: Any = f if progress is None else _Counted(f, local.stat().st_size, progress)
                self.client.create(part, body, overwrite=True)
            if overwrite:
                self._rename_over(part, dest)
                return True
            # Without OVERWRITE, a rename onto a file that is there fails and leaves it be.
            return bool(self.client.rename(part, dest))

        renamed = False
        try:
            renamed = self._call(f"{verb} {dest}", upload)
            return renamed
        finally:
            if not renamed:
                with contextlib.suppress(Exception):  # the copy that lost, or a failed upload's part
                    self.client.delete(part)

    def put(self, local: Path, key: str) -> None:
        self._upload(local, key, "put", overwrite=True)

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

    def exists(self, key: str) -> bool:
        return self._exists(self._path(key))

    def located(self) -> bool:
        return self._exists(self.root)

    def publish(self, local: Path, key: str, progress: Callable[[int], None] | None = None) -> bool:
        return self._upload(local, key, "publish", overwrite=False, progress=progress)

    def touch(self, key: str) -> None:
        path = self._path(key)
        # An empty file has no block for the NameNode to wait on as it is closed: one quick round.
        self._call(f"create {path}", lambda: self.client.create(path, b"", overwrite=True))

    def stamp(self, key: str, mtime: float) -> None:
        path = self._path(key)
        self._call(f"settimes {path}",
                   lambda: self.client.set_times(path, modificationtime=int(mtime * 1000), accesstime=-1))

    def private_dir(self, key: str) -> None:
        path = self._path(key)
        self._call(f"mkdirs {path}", lambda: self.client.mkdirs(path))
        self._call(f"chmod {path}", lambda: self.client.set_permission(path, permission="700"))

    def shared_dir(self, key: str) -> None:
        path = self._path(key)
        missing = []
        parent = path
        while parent != "/" and not self._exists(parent):
            missing.append(parent)
            parent = posixpath.dirname(parent)
        if not missing:
            return
        self._call(f"mkdirs {path}", lambda: self.client.mkdirs(path))
        # MKDIRS applies the NameNode's umask; a permission set afterwards does not. Another
        # user who made one of them at the same moment owns it, and keeps it as they made it.
        for d in reversed(missing):
            def chmod(d: str = d) -> None:
                self.client.set_permission(d, permission="1777")
            with contextlib.suppress(PermissionError, StoreError):
                self._call(f"chmod {d}", chmod)

    def _exists(self, path: str) -> bool:
        try:
            self._call(f"stat {path}", lambda: self.client.get_file_status(path))
            return True
        except FileNotFoundError:
            return False


def namenode_web_addresses(authority: str, conf: dict[str, str], https: bool = False) -> list[str]:
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

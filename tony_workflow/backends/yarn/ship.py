"""What a YARN job ships to its containers, and how: the job's spec in their environment, and
files uploaded once, in HDFS under names that say their content.

The spec (a few kilobytes) travels in the containers' environment, compressed, and each
container's script writes it to ``spec.json`` before anything starts
(:func:`.app.prelude`): no file to upload for it. skein uploads every local file of an application at each submission, and closing a file in HDFS
waits for its block to be reported (a few hundred milliseconds each). A file that is the same from
one job to the next (the Hadoop configuration, the runtime, an environment) is instead put once
under the user's cache directory, ``/user/<user>/.tony/cache/<digest>/<name>``, and every later job
names that copy, which skein localizes without uploading anything. NodeManagers keep it too: it
is localized with the user's (private) visibility, so a node downloads it once per user, not once
per job.

A copy is never replaced once published: it is uploaded under a name of its own and renamed into
place only if no copy is there yet, since a NodeManager refuses a resource whose modification time
differs from the one the job was submitted with. Two clients uploading the same content at once
both succeed; one copy stays.

An archive is built so that its bytes depend on its files' names and content alone
(:func:`deterministic_zip`): the same directory gives the same digest on every machine.
"""
from __future__ import annotations

import base64
import gzip
import hashlib
import json
import logging
import os
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ...errors import ConfigError
from ...kerberos import Login
from ...process import user_name
from ...storage import Storage, open_storage, qualified

__all__ = ["CACHE_ROOT", "SPEC_ENV", "Cache", "UploadProgress", "deterministic_zip", "digest_of", "open_cache", "ship_resources",
           "ship_venv", "shipped", "skein_security", "spec_env"]

log = logging.getLogger("tony.yarn")

#: The user's cache directory in HDFS (``hdfs:///user/<user>/.tony/cache``).
CACHE_ROOT = "/user/{user}/.tony/cache"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry
#: The containers' variable holding the job's spec (gzip, then base64: only letters, digits, +/=,
#: which YARN's launch script writes inside double quotes as they are).
SPEC_ENV = "TONY_SPEC"
#: A spec larger than this once encoded goes as a file instead (one variable may hold 128 KiB).
_SPEC_ENV_MAX = 64 * 1024
_SKIPPED_DIRS = ("__pycache__", ".git", ".venv")


def _walk(src: Path) -> Iterable[Path]:
    from ...spec.site import is_tony_home

    for root, dirs, files in os.walk(src, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not is_tony_home(Path(root) / d))
        for name in sorted(files):
            yield Path(root) / name


def deterministic_zip(src: Path, dest: Path) -> Path:
    """Zips directory ``src`` into ``dest``, entries in name order with a fixed time, and each
    file's permission bits kept (an executable stays one): the same files give the same bytes."""
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in _walk(src):
            info = zipfile.ZipInfo(path.relative_to(src).as_posix(), _EPOCH)
            info.external_attr = (path.stat().st_mode & 0o777) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes())
    return dest


def digest_of(path: Path) -> str:
    """The first 32 hex digits of the file's SHA-256."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:32]


#: How many requests about a cache's copies are made at once.
_ASKED_AT_ONCE = 8


class Cache:
    """The user's cache directory in ``store`` (rooted at HDFS's ``/``), whose copies are named by
    the URI prefix ``uri`` (``hdfs://namenode:8020``)."""

    def __init__(self, store: Storage, uri: str, user: str | None = None):
        self.store = store
        self.uri = uri.rstrip("/")
        self.root = CACHE_ROOT.format(user=user or user_name()).lstrip("/")
        self._private = False
        #: keys this cache was seen to hold: a published copy is never replaced, so a submission
        #: that asked once (which parts are new) does not ask again as it names them
        self._held: set[str] = set()

    def key(self, path: Path, name: str, digest: str | None = None) -> str:
        return f"{self.root}/{digest or digest_of(path)}/{name}"

    def stale(self, older_than_s: float, keep: set[str], now: float | None = None) -> list[tuple[str, int]]:
        """The cached copies uploaded more than ``older_than_s`` ago, but those whose digest is
        in ``keep`` (what today's jobs name): (key, size) pairs."""
        import time
        now = time.time() if now is None else now
        listed = self.store.list(self.root)
        return [(f"{self.root}/{name}", e.size) for name, e in sorted(listed.items())
                if now - e.mtime > older_than_s and name.split("/", 1)[0] not in keep]

    def ship(self, path: Path, name: str, digest: str | None = None,
             progress: Callable[[int], None] | None = None) -> str:
        """The URI of the cached copy of local file ``path`` (``name`` in the cache), uploading it
        only when no copy of that content is there yet (``digest`` names the content when the
        caller knows it: a large archive is not read again to hash it; ``progress`` is told the
        bytes uploaded so far). Raises OSError when the store fails. The cache is the user's alone
        (mode 700): it holds skein's key too."""
        key = self.key(path, name, digest)
        if key not in self._held and not self.store.exists(key):
            if not self._private:
                self.store.private_dir(self.root)
                self._private = True
            self.store.publish(path, key, progress)
        self._held.add(key)
        return f"{self.uri}/{key}"

    def has(self, path: Path, name: str, digest: str | None = None) -> bool:
        """Whether the cache holds a copy of ``path``'s content already."""
        return self.has_each([(path, name, digest)])[0]

    def has_each(self, copies: list[tuple[Path, str, str | None]]) -> list[bool]:
        """Whether the cache holds each of ``copies`` ((path, name, digest) as :meth:`ship` takes
        them): the store is asked about several at once, where it can be (a job's environment
        is tens of parts, each a round trip to the NameNode)."""
        keys = [self.key(*copy) for copy in copies]
        unknown = [k for k in dict.fromkeys(keys) if k not in self._held]
        if len(unknown) > 1 and getattr(self.store, "concurrent", False):
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(max_workers=min(_ASKED_AT_ONCE, len(unknown)),
                                    thread_name_prefix="tony-cache") as pool:
                found = list(pool.map(self.store.exists, unknown))
        else:
            found = [self.store.exists(k) for k in unknown]
        self._held.update(k for k, there in zip(unknown, found) if there)
        return [k in self._held for k in keys]


class UploadProgress:
    """Says how far the upload of ``total`` bytes of ``what`` has got, every ``every`` seconds
    (and once at its end), through ``say``."""

    def __init__(self, what: str, total: int, say: Callable[[str], None], every: float = 3.0):
        import time
        self.what, self.total, self.say, self.every = what, total, say, every
        self.clock = time.monotonic
        self.started = self.last = self.clock()
        self.ended = False

    def __call__(self, done: int) -> None:
        now = self.clock()
        if self.ended or (now - self.last < self.every and done < self.total):
            return
        self.last, self.ended = now, done >= self.total
        rate = done / max(now - self.started, 1e-6) / 1e6
        self.say(f"uploading {self.what}: {100 * done / max(self.total, 1):.0f} % ({done / 1e6:.0f} of "
                 f"{self.total / 1e6:.0f} MB, {rate:.0f} MB/s)")


def spec_env(spec: dict[str, Any]) -> dict[str, str] | None:
    """The environment that carries ``spec`` (a JobSpec's dict) to a container; None when it is too
    large for one variable (ship it as a file)."""
    encoded = base64.b64encode(gzip.compress(json.dumps(spec, separators=(",", ":")).encode(), mtime=0)).decode()
    return {SPEC_ENV: encoded} if len(encoded) <= _SPEC_ENV_MAX else None


def open_cache(conf_dir: str | os.PathLike[str], login: Login | None, user: str | None = None) -> Cache | None:
    """The user's cache in the HDFS of the Hadoop configuration in ``conf_dir`` (as ``login`` on a
    secure cluster); ``user``: that of the user a job runs as, impersonated by the login (its
    files are its own, which its containers read). None when HDFS cannot be reached (every file
    is then uploaded with the application, as skein does)."""
    try:
        return Cache(open_storage("hdfs:///", hadoop_conf_dir=str(conf_dir), login=login, doas=user),
                     qualified("hdfs:///", conf_dir), user=user)
    except (ConfigError, OSError) as e:
        log.info("no cache of shipped files (%s): they are uploaded with each job", e)
        return None


def shipped(cache: Cache | None, path: Path, kind: str, digest: str | None = None,
            progress: Callable[[int], None] | None = None) -> object:
    """skein's File for local ``path`` (``kind``: file or archive): its copy in the cache,
    uploaded once (``digest``: what names its content, when known; ``progress``: told the bytes
    uploaded so far), else the local file (which skein uploads with the application)."""
    import skein
    if cache is not None:
        try:
            return skein.File(cache.ship(path, path.name, digest, progress), type=kind, visibility="private")
        except OSError as e:
            log.info("%s not cached (%s): it is uploaded with the job", path.name, e)
    return skein.File(str(path), type=kind)


def skein_security(cache: Cache | None) -> object:
    """skein's credentials for an application, from the user's cache (skein would upload both
    files with every application); None (skein uploads them) when they cannot be cached."""
    import skein
    if cache is None:
        return None
    try:
        default = skein.Security.from_default()
        files = [Path(f.source[len("file://"):]) for f in (default.cert_file, default.key_file)]
    except (OSError, ValueError, AttributeError, TypeError) as e:
        log.info("skein's credentials not cached (%s): they are uploaded with the job", e)
        return None
    return skein.Security(cert_file=shipped(cache, files[0], "file"), key_file=shipped(cache, files[1], "file"))


def ship_resources(conf: dict[str, str], staging: Path, cache: Cache | None,
                   open_remote: Callable[[str], Storage],
                   qualify: Callable[[str], str] = str) -> dict[str | None, dict[str, object]]:
    """skein's Files for TonY's resources (:mod:`tony_workflow.spec.resources`), by owner (None:
    every container) and name: a local file as it is (``#archive``: unpacked by YARN), a local
    directory zipped and unpacked by YARN under its name, an ``hdfs://`` file as it is, and an
    ``hdfs://`` directory's first-level files each under its own name (``open_remote(uri)`` lists
    it). ``qualify(uri)`` names the NameNode where a URI leaves it out (``hdfs:///data``), which
    a NodeManager cannot resolve. Local files go through the user's cache, uploaded once. Raises
    SpecError naming the key and entry of one that cannot be shipped."""
    import skein

    from ...spec import SpecError, SpecIssue
    from ...spec.resources import resources_by_type

    out: dict[str | None, dict[str, object]] = {}
    for owner, entries in resources_by_type(conf).items():
        files = out.setdefault(owner, {})
        for n, r in enumerate(entries):
            kind = "archive" if r.archive else "file"
            try:
                if r.remote:
                    source = qualify(r.source)
                    listed = [key for key in open_remote(source).list("") if "/" not in key]
                    if listed:  # a directory: its own files, by their names (not its subdirectories)
                        files.update({key: skein.File(f"{source.rstrip('/')}/{key}", type="file") for key in listed})
                    else:
                        files[r.name] = skein.File(source, type=kind)
                elif r.local_path.is_dir():
                    zipped = staging / "resources" / str(owner) / str(n)
                    zipped.mkdir(parents=True, exist_ok=True)
                    files[r.name] = shipped(cache, deterministic_zip(r.local_path, zipped / f"{r.name}.zip"), "archive")
                else:
                    files[r.name] = shipped(cache, r.local_path, kind)
            except OSError as e:
                raise SpecError([SpecIssue(r.key, conf[r.key], f"{r.source} could not be given to the containers: "
                                           f"{e}")]) from None
    return out


def ship_venv(location: str, staging: Path, open_remote: Callable[[str], Storage] | None = None,
              qualify: Callable[[str], str] = str) -> object:
    """TonY's ``python_venv``: an ``hdfs://`` archive as it is (named with its NameNode; SpecError
    when it is not there, which ``open_remote`` tells), a zip as it is, a directory zipped."""
    import skein

    from ...spec import SpecError, SpecIssue
    if "://" in location:
        uri = qualify(location)
        parent, _, name = uri.rstrip("/").rpartition("/")
        try:
            there = open_remote is None or open_remote(parent).exists(name)
        except OSError as e:
            raise SpecError([SpecIssue("python_venv", location, f"could not be read: {e}")]) from None
        if not there:
            raise SpecError([SpecIssue("python_venv", location, "is not a file of the cluster's file system")])
        return skein.File(uri, type="archive")
    venv = Path(location)
    return skein.File(str(venv if venv.is_file() else deterministic_zip(venv, staging / "venv.zip")), type="archive")

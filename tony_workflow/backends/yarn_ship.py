"""What a YARN job ships to its containers, and how: the job's spec in their environment, and
files uploaded once, in HDFS under names that say their content.

The spec (a few kilobytes) travels in the containers' environment, compressed, and each
container's script writes it to ``spec.json`` before anything starts (:func:`script_prelude`): no
file to upload for it. skein uploads every local file of an application at each submission, and closing a file in HDFS
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
import os
import zipfile
from collections.abc import Iterable
from pathlib import Path

from ..process import user_name
from ..storage import Storage

__all__ = ["CACHE_ROOT", "SPEC_ENV", "Cache", "deterministic_zip", "digest_of", "script_prelude", "spec_env"]

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
    for root, dirs, files in os.walk(src, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
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


class Cache:
    """The user's cache directory in ``store`` (rooted at HDFS's ``/``), whose copies are named by
    the URI prefix ``uri`` (``hdfs://namenode:8020``)."""

    def __init__(self, store: Storage, uri: str, user: str | None = None):
        self.store = store
        self.uri = uri.rstrip("/")
        self.root = CACHE_ROOT.format(user=user or user_name()).lstrip("/")

    def key(self, path: Path, name: str) -> str:
        return f"{self.root}/{digest_of(path)}/{name}"

    def ship(self, path: Path, name: str) -> str:
        """The URI of the cached copy of local file ``path`` (``name`` in the cache), uploading it
        only when no copy of that content is there yet. Raises OSError when the store fails."""
        key = self.key(path, name)
        if not self.store.exists(key):
            self.store.publish(path, key)
        return f"{self.uri}/{key}"


def spec_env(spec: dict) -> dict[str, str] | None:
    """The environment that carries ``spec`` (a JobSpec's dict) to a container; None when it is too
    large for one variable (ship it as a file)."""
    encoded = base64.b64encode(gzip.compress(json.dumps(spec, separators=(",", ":")).encode(), mtime=0)).decode()
    return {SPEC_ENV: encoded} if len(encoded) <= _SPEC_ENV_MAX else None


def script_prelude(conf_dir: str, spec_in_env: bool) -> str:
    """The start of every container's script: the Hadoop configuration shipped as ``conf_dir``,
    and the spec written out of the environment (then dropped from it, so that no task's process
    inherits it)."""
    prelude = f'export HADOOP_CONF_DIR="$PWD/{conf_dir}"; '
    if spec_in_env:
        prelude += f'printf %s "${SPEC_ENV}" | base64 -d | gzip -dc > spec.json && unset {SPEC_ENV} && '
    return prelude

"""Hadoop client configuration: reading a conf directory's site XML, and writing a small one.

Hadoop clients find a cluster through a directory of ``*-site.xml`` files (``HADOOP_CONF_DIR``):
skein's Java driver reads it from its classpath, and this package reads the same files for the
addresses it needs itself (the ResourceManager's REST API, WebHDFS). :func:`read_conf` is the one
reader of those files. When the cluster's addresses are given directly (an Airflow connection's
fields) there may be no such directory on the machine: :func:`address_conf` turns the addresses
into the properties Hadoop's clients look for, and :func:`write_conf_dir` writes them out, on top of
a base directory if there is one, into a private cache directory named by its content, so every
process using the same settings shares one copy.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit
from xml.sax.saxutils import escape

from .errors import ConfigError
from .spec import load_tony_xml

__all__ = ["SITE_FILES", "address_conf", "namenode_rpc_port", "read_conf", "read_site", "rm_web_url", "site_xml", "write_conf_dir"]

#: The files a client's configuration is made of, in the order Hadoop layers them.
SITE_FILES = ("core-site.xml", "hdfs-site.xml", "yarn-site.xml")

# Hadoop 3's default ports: ResourceManager RPC and web (HTTP, HTTPS), NameNode RPC and web.
RM_PORT, RM_WEB_PORT, RM_WEB_HTTPS_PORT = 8032, 8088, 8090
NAMENODE_PORT, NAMENODE_WEB_PORT, NAMENODE_WEB_HTTPS_PORT = 8020, 9870, 9871
_WILDCARDS = ("", "0.0.0.0", "[::]", "::")

_VAR = re.compile(r"\$\{([^}$\s]+)\}")


def read_site(path: str | os.PathLike[str]) -> dict[str, str]:
    """The properties of one site file, values as written; {} when the file does not exist. The
    same reader as TonY's own XML files; raises ValueError naming the file (and the line) when it is
    not a well-formed ``<configuration>``."""
    path = Path(path)
    if not path.is_file():
        return {}
    return load_tony_xml(path)


def read_conf(conf_dir: str | os.PathLike[str] | None, files: Sequence[str] = SITE_FILES) -> dict[str, str]:
    """The properties of ``files`` in ``conf_dir``, later files winning, with ``${name}``
    references to other properties expanded as Hadoop does (real site files write, e.g., the web
    address as ``${yarn.resourcemanager.hostname}:8088``). {} when ``conf_dir`` is None."""
    props: dict[str, str] = {}
    if not conf_dir:
        return props
    for name in files:
        props.update(read_site(Path(conf_dir) / name))
    for key, value in props.items():
        for _ in range(20):  # Hadoop's own bound on nested substitutions
            expanded = _VAR.sub(lambda m: props.get(m.group(1), m.group(0)), value)
            if expanded == value:
                break
            value = expanded
        props[key] = value
    return props


def site_xml(props: Mapping[str, object], *, comment: str | None = None) -> str:
    """A site file holding ``props`` in their order; booleans written as Hadoop reads them."""
    lines = ['<?xml version="1.0"?>', *([f"<!-- {comment} -->"] if comment else []), "<configuration>"]
    for key, value in props.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        lines.append(f"  <property><name>{escape(key)}</name><value>{escape(text)}</value></property>")
    return "\n".join(lines + ["</configuration>", ""])


def _cache_root() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return cache / "tony-workflow" / "hadoop-conf"


def write_conf_dir(overrides: Mapping[str, Mapping[str, str]], base: str | os.PathLike[str] | None = None,
                   root: str | os.PathLike[str] | None = None) -> Path:
    """A Hadoop conf directory: the files of ``base`` (if any) with ``overrides`` (site file name
    -> properties) set on top. It lives under ``root`` (default
    ``~/.cache/tony-workflow/hadoop-conf``, under ``$XDG_CACHE_HOME`` when set; the system's
    temporary directory when that cannot be written), named by a hash of its content: written once,
    atomically, and never changed, so concurrent writers and readers are safe."""
    files: dict[str, bytes] = {}
    if base:
        for path in sorted(Path(base).iterdir()):
            if path.is_file():
                files[path.name] = path.read_bytes()
    for name, props in overrides.items():
        merged = {**(read_site(Path(base) / name) if base else {}), **props}
        files[name] = site_xml(dict(sorted(merged.items()))).encode()
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name] + b"\0")
    roots = [Path(root)] if root else [_cache_root(), Path(tempfile.gettempdir()) / f"tony-workflow-{os.getuid()}"]
    error: OSError | None = None
    for parent in roots:
        dest = parent / digest.hexdigest()[:20]
        if dest.is_dir():
            return dest
        try:
            parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=parent))
            for name, data in files.items():
                (tmp / name).write_bytes(data)
            try:
                os.rename(tmp, dest)
            except OSError:
                shutil.rmtree(tmp, ignore_errors=True)
                if not dest.is_dir():  # not another writer having got there first
                    raise
            return dest
        except OSError as e:
            error = e
    raise OSError(f"cannot write a Hadoop configuration directory under {', '.join(map(str, roots))}: {error}")


def _web_address(value: str, what: str, http_port: int, https_port: int) -> tuple[bool, str, str]:
    """(https, host, host:port) of a web address given as ``http(s)://host[:port]`` or ``host[:port]``."""
    value = value.strip()
    try:
        parts = urlsplit(value if "://" in value else f"http://{value}")
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/"):
        raise ConfigError(f"{what} {value!r} must be http://host[:port] or https://host[:port]")
    https = parts.scheme == "https"
    return https, parts.hostname, f"{parts.hostname}:{port or (https_port if https else http_port)}"


def _rpc_address(value: str, what: str, default_port: int) -> tuple[str, str]:
    """(host, host:port) of an RPC address ``host[:port]``."""
    value = value.strip()
    try:
        parts = urlsplit(f"//{value}")
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or "://" in value or not parts.hostname or parts.path:
        raise ConfigError(f"{what} {value!r} must be host[:port]")
    return parts.hostname, f"{parts.hostname}:{port or default_port}"


def address_conf(*, rm_address: str | None = None, rm_web_address: str | None = None,
                 webhdfs: str | None = None, base: Mapping[str, str] | None = None,
                 namenode_port: int | None = None) -> dict[str, dict[str, str]]:
    """The site properties (file name -> properties) that point a Hadoop client at a cluster:

    * ``rm_address``: the ResourceManager's RPC address ``host[:port]`` (port 8032 by default),
      where applications are submitted: ``yarn.resourcemanager.address`` and ``.hostname``.
    * ``rm_web_address``: its web address ``http(s)://host[:port]``, where the REST API and the
      application pages are: ``yarn.resourcemanager.webapp(.https).address`` and
      ``yarn.http.policy``. Default: port 8088 on ``rm_address``'s host.
    * ``webhdfs``: the NameNode's WebHDFS address ``http(s)://host[:port]`` (port 9870 / 9871),
      where job data and final statuses go: ``dfs.namenode.http(s)-address`` (also for the
      NameNode of ``fs.defaultFS``) and ``dfs.http.policy``; and ``fs.defaultFS`` itself,
      ``hdfs://host:port``, when ``base`` (the properties these go on top of) has none: the port
      is ``namenode_port`` (what the NameNode says of itself, :func:`namenode_rpc_port`), else 8020.

    Empty when none is given."""
    base = base or {}
    yarn: dict[str, str] = {}
    core: dict[str, str] = {}
    hdfs: dict[str, str] = {}
    web = rm_web_address
    if rm_address:
        host, address = _rpc_address(rm_address, "rm_address (the ResourceManager's RPC address; the web "
                                     "address goes in rm_web_address)", RM_PORT)
        yarn["yarn.resourcemanager.hostname"] = host
        yarn["yarn.resourcemanager.address"] = address
        web = web or f"http://{host}:{RM_WEB_PORT}"
    if web:
        https, _, address = _web_address(web, "rm_web_address", RM_WEB_PORT, RM_WEB_HTTPS_PORT)
        yarn["yarn.http.policy"] = "HTTPS_ONLY" if https else "HTTP_ONLY"
        yarn["yarn.resourcemanager.webapp.https.address" if https else "yarn.resourcemanager.webapp.address"] = address
    if webhdfs:
        https, host, address = _web_address(webhdfs, "webhdfs", NAMENODE_WEB_PORT, NAMENODE_WEB_HTTPS_PORT)
        key = "dfs.namenode.https-address" if https else "dfs.namenode.http-address"
        hdfs["dfs.http.policy"] = "HTTPS_ONLY" if https else "HTTP_ONLY"
        hdfs[key] = address
        default_fs = urlsplit(base.get("fs.defaultFS", ""))
        if default_fs.scheme == "hdfs" and default_fs.netloc:
            # a NameNode-specific address in the base would otherwise win over the generic one
            hdfs[f"{key}.{default_fs.netloc}"] = address
        else:
            core["fs.defaultFS"] = f"hdfs://{host}:{namenode_port or NAMENODE_PORT}"
    sites = {"yarn-site.xml": yarn, "core-site.xml": core, "hdfs-site.xml": hdfs}
    return {name: props for name, props in sites.items() if props}


def namenode_rpc_port(webhdfs: str, timeout: float = 5.0) -> int | None:
    """The RPC port of the NameNode at the web address ``webhdfs``, as the NameNode reports it
    (JMX bean ``NameNodeStatus``, ``HostAndPort``): where its clients, skein's driver and the
    NodeManagers localizing a job's files, reach it. None when it cannot be asked (a web UI behind
    SPNEGO, an old NameNode) or gives no port."""
    import requests

    https, _, address = _web_address(webhdfs, "webhdfs", NAMENODE_WEB_PORT, NAMENODE_WEB_HTTPS_PORT)
    url = f"{'https' if https else 'http'}://{address}/jmx"
    try:
        r = requests.get(url, params={"qry": "Hadoop:service=NameNode,name=NameNodeStatus"}, timeout=timeout)
        r.raise_for_status()
        beans = r.json().get("beans") or [{}]
        port = urlsplit(f"//{beans[0].get('HostAndPort') or ''}").port
    except (requests.RequestException, ValueError, AttributeError):
        return None
    return port or None


def rm_web_url(conf: Mapping[str, str]) -> str | None:
    """The ResourceManager's web address as a URL, from client properties, with Hadoop's defaults
    (``yarn.resourcemanager.hostname`` on port 8088, or 8090 under ``HTTPS_ONLY``); None when
    not even the ResourceManager's host is known."""
    https = conf.get("yarn.http.policy", "HTTP_ONLY").upper() == "HTTPS_ONLY"
    key, port = (("yarn.resourcemanager.webapp.https.address", RM_WEB_HTTPS_PORT) if https
                 else ("yarn.resourcemanager.webapp.address", RM_WEB_PORT))
    host = conf.get("yarn.resourcemanager.hostname") or \
        urlsplit(f"//{conf.get('yarn.resourcemanager.address', '')}").hostname or ""
    if host in _WILDCARDS:
        host = ""
    address = conf.get(key) or (f"{host}:{port}" if host else "")
    if not address:
        return None
    if "://" in address:
        return address.rstrip("/")
    bind, _, bind_port = address.rpartition(":")
    if bind in _WILDCARDS and host:  # a bind-all address names no host to connect to
        address = f"{host}:{bind_port}"
    return f"{'https' if https else 'http'}://{address}"

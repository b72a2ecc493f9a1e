"""Stores of whole files: staging, history, and the checkpoint mirror's store.

A :class:`Storage` (:mod:`.base`) stores whole files under slash-separated keys: a local or mounted
directory (:class:`LocalStorage`, :mod:`.local`) or a directory in HDFS over its HTTP API
(:class:`WebHDFSStorage`, :mod:`.webhdfs`). :func:`open_storage` picks one from a location: a path,
``file://``, ``hdfs://`` or ``webhdfs://``. What is kept in them and in what order (the checkpoint
mirror) is :mod:`tony_workflow.task.checkpoint_mirror`'s.
"""
from __future__ import annotations

import os
from urllib.parse import urlsplit

from ..errors import ConfigError
from ..hadoop import read_conf
from ..kerberos import Login, is_secure
from .base import Entry, Storage, is_temp, retry
from .local import LocalStorage
from .webhdfs import WebHDFSStorage, namenode_web_addresses

__all__ = ["Entry", "LocalStorage", "Storage", "WebHDFSStorage", "is_temp", "open_storage", "qualified", "retry"]


def qualified(location: str, hadoop_conf_dir: str | os.PathLike[str] | None = None) -> str:
    """``location`` as a URI that names it from anywhere: a local path (or ``file:`` URI) becomes
    ``file:///absolute/path``, ``hdfs:///path`` gets ``fs.defaultFS``'s NameNode from the Hadoop
    configuration in ``hadoop_conf_dir`` (default ``$HADOOP_CONF_DIR``; left as it is without
    one); any other URI stays as it is."""
    if location.startswith("file:") or "://" not in location:
        path = location.removeprefix("file://").removeprefix("file:")
        return "file://" + os.path.abspath(path)
    parts = urlsplit(location)
    if parts.scheme.lower() == "hdfs" and not parts.netloc:
        conf = read_conf(hadoop_conf_dir or os.environ.get("HADOOP_CONF_DIR"), ("core-site.xml",))
        default = urlsplit(conf.get("fs.defaultFS", ""))
        if default.scheme == "hdfs" and default.netloc:
            return f"hdfs://{default.netloc}{parts.path}"
    return location


def open_storage(location: str, *, hadoop_conf_dir: str | os.PathLike[str] | None = None,
                 login: Login | None = None, doas: str | None = None) -> Storage:
    """A store for ``location``: a local path or ``file://`` URI, ``webhdfs://host:port/path``
    (``swebhdfs://`` for HTTPS), or ``hdfs://namenode[:port]/path`` (``hdfs:///path`` means
    ``fs.defaultFS``). For ``hdfs://`` the WebHDFS address comes from the Hadoop configuration in
    ``hadoop_conf_dir`` (default ``$HADOOP_CONF_DIR``). When that configuration says
    ``hadoop.security.authentication=kerberos``, HDFS is reached as ``login`` (default: the
    ticket cache), or with the container's delegation token (see :class:`WebHDFSStorage`); a
    missing login is a :class:`~tony_workflow.kerberos.LoginError`. ``doas``: HDFS is reached as
    that user, impersonated by the login (a job's proxy user; :class:`WebHDFSStorage`)."""
    location = location.removeprefix("file://")
    if "://" not in location:
        return LocalStorage(location)
    parts = urlsplit(location)
    scheme = parts.scheme.lower()
    conf = read_conf(hadoop_conf_dir or os.environ.get("HADOOP_CONF_DIR"), ("core-site.xml", "hdfs-site.xml"))
    kerberos = is_secure(conf)
    if scheme in ("webhdfs", "swebhdfs"):
        if not parts.netloc:
            raise ConfigError(f"{location!r}: a webhdfs:// location needs host:port of the NameNode's HTTP server")
        return WebHDFSStorage(parts.netloc, parts.path or "/", https=scheme == "swebhdfs", uri=location,
                              kerberos=kerberos, login=login, doas=doas)
    if scheme == "hdfs":
        authority = parts.netloc
        if not authority:
            default = urlsplit(conf.get("fs.defaultFS", ""))
            if default.scheme != "hdfs" or not default.netloc:
                raise ConfigError(f"{location!r} names no NameNode and fs.defaultFS in HADOOP_CONF_DIR is not "
                                 "an hdfs:// URI")
            authority = default.netloc
        https = conf.get("dfs.http.policy", "HTTP_ONLY").upper() == "HTTPS_ONLY"
        return WebHDFSStorage(namenode_web_addresses(authority, conf, https), parts.path or "/", https=https,
                              uri=location, namenode=authority, kerberos=kerberos, login=login, doas=doas)
    raise ConfigError(f"unsupported storage location {location!r}: use a local path, file://, hdfs:// or "
                     "webhdfs:// URI")

"""Kerberos for the clients of a secure Hadoop cluster: who the client is, how it proves it over
HTTP, and the delegation tokens that containers get instead of tickets.

A cluster is secure when its configuration says ``hadoop.security.authentication=kerberos``. Then:

* A client logs in as a :class:`Login`: a principal with its keytab (TonY's
  ``tony.keytab.user`` and ``tony.keytab.location``, or an Airflow connection's ``principal`` and
  ``keytab``), or whatever ticket ``kinit`` left in the ticket cache (``KRB5CCNAME``, else MIT's
  default). Python speaks Kerberos through GSSAPI (``gssapi``); a keytab login keeps its tickets in
  a private in-memory cache, so the user's own cache is left alone and the tickets are fetched
  again from the keytab when they run out.
* The web servers (the ResourceManager's REST API, WebHDFS) ask for SPNEGO:
  :meth:`Login.http_auth` is what a ``requests`` session needs for that.
* Containers have no ticket and no keytab: YARN hands them the delegation tokens obtained at
  submission in a token file (``HADOOP_TOKEN_FILE_LOCATION``). :func:`hdfs_delegation_token` reads
  the HDFS one from there in the form WebHDFS takes as ``delegation=``. The ResourceManager renews
  those tokens for as long as the application runs, and cancels them when it ends, so nothing here
  has to renew anything, and no secret outlives the job.

Java clients (skein's driver) read neither ``KRB5_CONFIG`` nor GSSAPI's caches the same way:
:meth:`Login.java_options` names the Kerberos configuration for them, and they read the ticket
cache from ``KRB5CCNAME`` themselves.
"""
from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import logging
import os
import socket
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import LoginError

__all__ = [
    "KEYTAB_LOCATION",
    "KEYTAB_USER",
    "DelegationToken",
    "Login",
    "LoginError",
    "cache_principal",
    "hdfs_delegation_token",
    "is_secure",
    "principal_user",
    "read_token_file",
]

#: TonY's keys naming the principal a job is submitted as, and its keytab.
KEYTAB_USER, KEYTAB_LOCATION = "tony.keytab.user", "tony.keytab.location"

HDFS_TOKEN_KIND = "HDFS_DELEGATION_TOKEN"

# requests-gssapi logs every failed negotiation with its traceback, at ERROR; the failure reaches
# the caller as a refusal, which this package explains itself (LoginError), so the log stays quiet
# unless an application has set its own handlers up.
logging.getLogger("requests_gssapi").addHandler(logging.NullHandler())


def is_secure(conf: Mapping[str, str]) -> bool:
    """Whether Hadoop client properties ``conf`` describe a Kerberized cluster."""
    return str(conf.get("hadoop.security.authentication", "simple")).strip().lower() == "kerberos"


def _how_to_log_in() -> str:
    return (f"run kinit (with KRB5CCNAME naming its ticket cache when that is not the default one), or name a "
            f"principal and its keytab with {KEYTAB_USER} and {KEYTAB_LOCATION}")


def _gss_reason(error: Exception) -> str:
    """The useful part of a GSSAPI error: its minor (mechanism) message, e.g. "No Kerberos
    credentials available (default cache: /tmp/krb5cc_0)"."""
    text = error.gen_message() if hasattr(error, "gen_message") else str(error)
    _, sep, minor = text.partition("Minor (")
    if sep and "): " in minor:
        return minor.split("): ", 1)[1].strip()
    return text.strip()


def _gssapi() -> Any:
    """The ``gssapi`` module, or a LoginError saying what to install: a secure cluster cannot be
    reached without it."""
    try:
        import gssapi
        import requests_gssapi  # noqa: F401  (SPNEGO for every HTTP call to the cluster)
    except ImportError as e:
        raise LoginError(f"the cluster is secure (hadoop.security.authentication=kerberos) and its clients need "
                         f"requests-gssapi ({e}): install tony-workflow[yarn], after MIT Kerberos's headers "
                         "(make kerberos)") from None
    return gssapi


def principal_user(principal: str) -> str:
    """The user Hadoop names a principal by, by its default rule: its first component
    (``alice`` of ``alice@EXAMPLE.COM``, ``tony`` of ``tony/host@EXAMPLE.COM``)."""
    return principal.split("@", 1)[0].split("/", 1)[0]


def cache_principal() -> str | None:
    """The principal of the ticket in the ticket cache (``KRB5CCNAME``, else the default one);
    None without a ticket or without GSSAPI."""
    try:
        import gssapi
        return str(gssapi.Credentials(usage="initiate").name)
    except Exception:  # noqa: BLE001 - no ticket, no library: nobody known
        return None


_CREDENTIALS: dict[tuple[str, str], Any] = {}
_CREDENTIALS_LOCK = threading.Lock()


@dataclass(frozen=True)
class Login:
    """Who a client of a secure cluster is: ``principal`` with ``keytab``, or, with neither, the
    ticket in the ticket cache. ``keys`` names the settings they came from, for messages (TonY's
    keys by default; an Airflow connection's fields when they came from there)."""

    principal: str | None = None
    keytab: str | None = None
    keys: tuple[str, str] = field(default=(KEYTAB_USER, KEYTAB_LOCATION), compare=False)

    def __post_init__(self):
        if bool(self.principal) != bool(self.keytab):
            given, missing = ((self.keys[0], self.keys[1]) if self.principal else (self.keys[1], self.keys[0]))
            value = self.principal or self.keytab
            raise LoginError(f"{given}={value!r} needs {missing} too: a keytab login names the principal and "
                             f"its keytab file; leave both unset to use the ticket from kinit")
        if self.keytab:
            object.__setattr__(self, "keytab", os.path.abspath(os.path.expanduser(self.keytab)))

    def describe(self) -> str:
        if self.keytab:
            return f"{self.principal} with the keytab {self.keytab} ({self.keys[0]}, {self.keys[1]})"
        cache = os.environ.get("KRB5CCNAME")
        return f"the ticket in {'the ticket cache ' + cache if cache else 'the default ticket cache'}"

    def check_keytab(self) -> None:
        """LoginError when the keytab cannot be read here: the login would fail anyway, and the
        Java driver would say so far less clearly."""
        if not self.keytab:
            return
        path = Path(self.keytab)
        if not path.is_file() or not os.access(path, os.R_OK):
            why = "does not exist" if not path.exists() else "is not a readable file"
            raise LoginError(f"{self.keys[1]}={self.keytab!r} {why}: it must be the keytab file of "
                             f"{self.keys[0]}={self.principal!r} on this machine")

    def credentials(self) -> Any:
        """GSSAPI credentials for this login, with a ticket in them; LoginError saying why not.
        A keytab login's credentials are made once per process and refresh themselves from the
        keytab; the ticket cache is read again on every call, so a new ``kinit`` is seen."""
        gssapi = _gssapi()
        self.check_keytab()
        try:
            if not self.keytab:
                creds = gssapi.Credentials(usage="initiate")
                _ = creds.lifetime  # read for its effect: an expired ticket fails here, not halfway through a request
                return creds
            key = (str(self.principal), str(self.keytab))
            with _CREDENTIALS_LOCK:
                creds = _CREDENTIALS.get(key)
                if creds is None:
                    # A private in-memory cache: the user's own tickets stay as they are.
                    cache = "MEMORY:tony-" + hashlib.sha256("\0".join(key).encode()).hexdigest()[:16]
                    name = gssapi.Name(self.principal, gssapi.NameType.kerberos_principal)
                    creds = gssapi.Credentials(name=name, usage="initiate",
                                               store={"client_keytab": self.keytab, "ccache": cache})
                _ = creds.lifetime  # read for its effect: asks the KDC now, so a wrong principal or key fails here
                _CREDENTIALS[key] = creds
                return creds
        except gssapi.exceptions.GSSError as e:
            raise LoginError(self._failure(_gss_reason(e))) from None

    def _failure(self, reason: str) -> str:
        if self.keytab:
            return (f"cannot log in to the secure cluster as {self.keys[0]}={self.principal!r} with "
                    f"{self.keys[1]}={self.keytab!r}: {reason}. The principal must be one the keytab holds "
                    f"(klist -k -t {self.keytab} lists them) and the KDC in KRB5_CONFIG must know it; or leave "
                    f"both unset and log in with kinit")
        return (f"the cluster is secure (hadoop.security.authentication=kerberos) and there is no Kerberos "
                f"ticket to log in with ({reason}): {_how_to_log_in()}")

    def refused(self, what: str) -> LoginError:
        """The error for a server that refused this login (HTTP 401) although it has credentials:
        the ticket ran out meanwhile, or is from another realm than the server's."""
        try:
            self.credentials()
        except LoginError as e:
            return e
        return LoginError(f"{what} refused the Kerberos login of {self.describe()} (HTTP 401): is the ticket from "
                          f"the cluster's realm? To log in as someone else, {_how_to_log_in()}")

    def http_auth(self) -> Any:
        """SPNEGO for a ``requests`` session, as this login. Checks the login first (LoginError)."""
        creds = self.credentials()
        from requests_gssapi import HTTPSPNEGOAuth  # present: _gssapi() found it
        # The ticket cache's credentials are left for GSSAPI to find on each negotiation, so a
        # later kinit into the same cache is picked up; a keytab's are this login's own.
        return HTTPSPNEGOAuth(creds=creds if self.keytab else None)

    @contextlib.contextmanager
    def java_environment(self) -> Iterator[dict[str, str]]:
        """The environment a Hadoop command (a JVM) needs to act as this login, for as long as the
        ``with`` lasts: nothing more for a ``kinit`` login (the JVM reads the same ``KRB5CCNAME``);
        for a keytab login, a ticket cache of its own holding this login's ticket, in a private
        folder removed afterwards (a JVM cannot read GSSAPI's in-memory cache)."""
        if not self.keytab:
            yield {}
            return
        creds = self.credentials()
        with tempfile.TemporaryDirectory(prefix="tony-krb5-") as folder:
            cache = f"FILE:{folder}/krb5cc"
            try:
                creds.store(store={"ccache": cache}, usage="initiate", overwrite=True)
            except Exception as e:  # noqa: BLE001 - said as the login's failure, with GSSAPI's reason
                raise LoginError(self._failure(f"its ticket cannot be handed to Hadoop's command ({e})")) from None
            yield {"KRB5CCNAME": cache}

    @staticmethod
    def java_options() -> list[str]:
        """What a Java client needs to find the KDC: Java reads ``java.security.krb5.conf``, not
        ``KRB5_CONFIG``."""
        conf = os.environ.get("KRB5_CONFIG")
        return [f"-Djava.security.krb5.conf={conf}"] if conf else []


# -- delegation tokens ----------------------------------------------------------------------------

@dataclass(frozen=True)
class DelegationToken:
    """One token of a Hadoop token file: Hadoop's ``Token`` (identifier, password, kind, service)."""

    alias: str
    identifier: bytes
    password: bytes
    kind: str
    service: str

    def url_string(self) -> str:
        """The token as WebHDFS's ``delegation`` parameter takes it: the URL-safe, unpadded base64 of
        its Writable form (Hadoop's ``Token.encodeToUrlString``)."""
        out = io.BytesIO()
        for part in (self.identifier, self.password, self.kind.encode(), self.service.encode()):
            _write_vint(out, len(part))
            out.write(part)
        return base64.urlsafe_b64encode(out.getvalue()).rstrip(b"=").decode()


def _write_vint(out: io.BytesIO, value: int) -> None:
    """Hadoop's ``WritableUtils.writeVInt`` of a non-negative int: one byte up to 127, else a
    length byte (-113 for one byte, -114 for two, ...) and the value big-endian."""
    if value <= 127:
        out.write(bytes([value]))
        return
    data = value.to_bytes((value.bit_length() + 7) // 8, "big")
    out.write(bytes([(-112 - len(data)) & 0xFF]))
    out.write(data)


def _read_vint(buf: io.BytesIO) -> int:
    """Hadoop's ``WritableUtils.readVInt``."""
    first = _read(buf, 1)[0]
    first = first - 256 if first > 127 else first
    if first >= -112:
        return first
    negative = first < -120
    length = (-120 - first) if negative else (-112 - first)
    value = int.from_bytes(_read(buf, length), "big")
    return ~value if negative else value


def _read(buf: io.BytesIO, n: int) -> bytes:
    data = buf.read(n)
    if len(data) != n or n < 0:
        raise ValueError("the token file ends in the middle of a record")
    return data


def _read_bytes(buf: io.BytesIO) -> bytes:
    return _read(buf, _read_vint(buf))


def _read_writable(buf: io.BytesIO) -> list[DelegationToken]:
    """Credentials in Hadoop's Writable form: a count, then (alias, token) pairs; the secret keys
    that follow are of no use here."""
    tokens = []
    for _ in range(_read_vint(buf)):
        alias = _read_bytes(buf).decode()
        identifier, password = _read_bytes(buf), _read_bytes(buf)
        kind, service = _read_bytes(buf).decode(), _read_bytes(buf).decode()
        tokens.append(DelegationToken(alias, identifier, password, kind, service))
    return tokens


def _proto_fields(data: bytes) -> list[tuple[int, Any]]:
    """The (field number, value) pairs of one protobuf message: varints as ints, length-delimited
    fields as bytes (the only wire types Hadoop's credential messages use)."""
    buf, fields = io.BytesIO(data), []
    while buf.tell() < len(data):
        key = _read_varint(buf)
        number, wire = key >> 3, key & 7
        if wire == 0:
            fields.append((number, _read_varint(buf)))
        elif wire == 2:
            fields.append((number, _read(buf, _read_varint(buf))))
        else:
            raise ValueError(f"unexpected protobuf wire type {wire} in the token file")
    return fields


def _read_varint(buf: io.BytesIO) -> int:
    value = shift = 0
    while True:
        byte = _read(buf, 1)[0]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
        shift += 7


def _read_protobuf(buf: io.BytesIO) -> list[DelegationToken]:
    """Credentials in Hadoop's protobuf form: one length-prefixed ``CredentialsProto`` whose field 1
    holds (alias, ``TokenProto``) entries."""
    tokens = []
    for number, entry in _proto_fields(_read(buf, _read_varint(buf))):
        if number != 1:
            continue
        kv = dict(_proto_fields(entry))
        token = dict(_proto_fields(kv.get(2, b"")))
        tokens.append(DelegationToken(kv.get(1, b"").decode(), token.get(1, b""), token.get(2, b""),
                                      token.get(3, b"").decode(), token.get(4, b"").decode()))
    return tokens


def read_token_file(path: str | os.PathLike[str]) -> list[DelegationToken]:
    """The tokens of a Hadoop token file (``Credentials``: ``HDTS``, a format byte, then the
    Writable or the protobuf form); ValueError naming the file when it is neither."""
    data = Path(path).read_bytes()
    if data[:4] != b"HDTS" or len(data) < 5:
        raise ValueError(f"{path} is not a Hadoop token file (it does not start with HDTS)")
    buf = io.BytesIO(data[5:])
    try:
        if data[4] == 0:
            return _read_writable(buf)
        if data[4] == 1:
            return _read_protobuf(buf)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: {e}") from None
    raise ValueError(f"{path} is a Hadoop token file of an unknown format ({data[4]})")


def _same_address(service: str, authority: str) -> bool:
    """Whether a token's service (``ip:port``, as Hadoop names services by default) is the
    NameNode at ``authority`` (``host:port``)."""
    s_host, _, s_port = service.rpartition(":")
    a_host, _, a_port = authority.rpartition(":")
    if not s_port or s_port != a_port:
        return False
    try:
        return s_host == a_host or s_host in {i[4][0] for i in socket.getaddrinfo(a_host, None)}
    except OSError:
        return False


def hdfs_delegation_token(authority: str | None = None,
                          token_file: str | os.PathLike[str] | None = None) -> str | None:
    """The HDFS delegation token this process was given (in a YARN container), encoded for
    WebHDFS's ``delegation`` parameter; None when there is none. ``token_file`` defaults to
    ``HADOOP_TOKEN_FILE_LOCATION``. With ``authority`` (the NameNode's RPC ``host:port``, or an HA
    nameservice) the token for that NameNode is preferred; a file with a single HDFS token gives
    that one whatever its service."""
    path = token_file or os.environ.get("HADOOP_TOKEN_FILE_LOCATION")
    if not path or not Path(path).is_file():
        return None
    tokens = [t for t in read_token_file(path) if t.kind == HDFS_TOKEN_KIND]
    if not tokens:
        return None
    if authority:
        for token in tokens:
            if token.service in (authority, f"ha-hdfs:{authority}") or _same_address(token.service, authority):
                return token.url_string()
    return tokens[0].url_string()

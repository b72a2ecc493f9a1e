"""Who is asking, and what they may see: the history server's authentication and its reading of
the jobs' access control lists.

A standalone server authenticates with tokens. Each user has one, given to them by whoever runs
the server: a file of ``user token`` lines (``tony history serve --tokens FILE``, read again when
it changes), and the token the server makes for the user who starts it, printed with its address
as a link that logs in. A request carries it as ``Authorization: Bearer TOKEN``, or in the cookie
the login sets (``?token=TOKEN`` on any page, or the login form). Tokens are compared in constant
time; the file must not be readable by others, as a keytab must not.

Where the cluster is Kerberized, the server can take its users' Kerberos logins instead, as the
ResourceManager's and the NameNode's web UIs do (SPNEGO, :class:`Spnego`: ``--spnego-keytab``); the
tokens still work beside them.

A viewer may see a job when it is theirs (its user, or the submitter of a job run as another
user), when its ``tony.application.view-acls`` names them or one of their groups (``*``: anyone),
or when they administer the server (its owner and ``--admins``), as YARN's administrators see
every application. Groups are the viewer's on this machine, as Hadoop's default group mapping
reads them.
"""
from __future__ import annotations

import grp
import hmac
import os
import pwd
import secrets
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Spnego", "SpnegoError", "TokenBook", "TokenFileError", "Viewer", "groups_of", "may_view"]


class TokenFileError(ValueError):
    """A tokens file that cannot be used, and why."""


@dataclass(frozen=True)
class Viewer:
    """The user behind a request, their groups, and whether they administer the server (None:
    anyone, for a server mounted in an application that decides access itself)."""

    name: str
    groups: frozenset[str] = field(default_factory=frozenset)
    admin: bool = False


def groups_of(user: str) -> frozenset[str]:
    """``user``'s groups on this machine (none for a user it does not know)."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return frozenset()
    names = set()
    for gid in os.getgrouplist(user, entry.pw_gid):
        try:
            names.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return frozenset(names)


def may_view(viewer: Viewer | None, summary: Mapping[str, Any],
             acls_of: Callable[[], tuple[tuple[str, ...], tuple[str, ...]]] | None = None) -> bool:
    """Whether ``viewer`` may see the job ``summary`` describes (see the module). ``acls_of``
    reads the job's view ACL when the summary does not hold it."""
    if viewer is None or viewer.admin:
        return True
    if viewer.name in (summary.get("user"), summary.get("submitter")):
        return True
    acls = summary.get("view_acls")
    if acls is None:
        acls = acls_of() if acls_of else ((), ())
    users, groups = acls
    return "*" in users or viewer.name in users or bool(viewer.groups & set(groups))


class SpnegoError(ValueError):
    """A keytab or principal the server cannot accept logins with, and why."""


class Spnego:
    """Kerberos logins over HTTP (SPNEGO: ``Authorization: Negotiate ...``), as the cluster's own
    web UIs take them: accepted with the service's key from ``keytab`` (``principal``, e.g.
    ``HTTP/host@REALM``; None: any principal the keytab holds). The viewer is the client
    principal's short name (``alice@REALM`` and ``alice/host@REALM`` are ``alice``)."""

    def __init__(self, keytab: Path, principal: str | None = None):
        import gssapi
        from gssapi.raw.misc import GSSError

        self.keytab, self.principal = Path(keytab), principal
        if not self.keytab.is_file():
            raise SpnegoError(f"the keytab {self.keytab} is not there")
        try:
            name = gssapi.Name(principal, gssapi.NameType.kerberos_principal) if principal else None
            self._creds = gssapi.Credentials(name=name, usage="accept", store={"keytab": str(self.keytab)})
        except GSSError as e:
            raise SpnegoError(f"no key of {principal or 'any principal'} can be read from {self.keytab}: "
                              f"{e.gen_message()}") from None

    def accept(self, token: str) -> tuple[str, str | None] | None:
        """The user a ``Negotiate`` token logs in, and the token to send back (None: none); None
        when the token logs nobody in (a bad, replayed or foreign ticket)."""
        import base64
        import binascii

        import gssapi
        from gssapi.raw.misc import GSSError

        try:
            ctx = gssapi.SecurityContext(creds=self._creds, usage="accept")
            out = ctx.step(base64.b64decode(token, validate=True))
        except (GSSError, binascii.Error, ValueError):
            return None
        if not ctx.complete or ctx.initiator_name is None:
            return None
        user = str(ctx.initiator_name).split("@", 1)[0].split("/", 1)[0]
        return user, base64.b64encode(out).decode() if out else None


class TokenBook:
    """Tokens by user: the owner's, made here, and those of a tokens file (``path``), read again
    when it changes."""

    def __init__(self, owner: str, path: Path | None = None, admins: Iterable[str] = (),
                 owner_token: str | None = None):
        self.owner = owner
        self.owner_token = owner_token or secrets.token_urlsafe(24)
        self.path = Path(path) if path else None
        self.admins = frozenset([owner, *admins])
        self._read_at: tuple[float, int] | None = None
        self._tokens: dict[str, str] = {}
        if self.path is not None:
            self._load()

    def _load(self) -> None:
        assert self.path is not None
        try:
            st = self.path.stat()
            text = self.path.read_text()
        except OSError as e:
            raise TokenFileError(f"the tokens file {self.path} cannot be read: {e.strerror or e}") from None
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise TokenFileError(f"the tokens file {self.path} is readable by others (mode "
                                 f"{stat.S_IMODE(st.st_mode):o}): chmod 600 it")
        tokens: dict[str, str] = {}
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 2 or len(parts[1]) < 16:
                raise TokenFileError(f"{self.path}, line {n}: expected 'user token' with a token of at least 16 "
                                     "characters")
            user, token = parts
            if token in tokens or token == self.owner_token:
                raise TokenFileError(f"{self.path}, line {n}: the token of {user} is another user's too")
            tokens[token] = user
        self._tokens = tokens
        self._read_at = (st.st_mtime, st.st_size)

    def _fresh(self) -> None:
        if self.path is None:
            return
        try:
            st = self.path.stat()
        except OSError:
            return  # gone for a moment (replaced by an editor): keep what was read
        if (st.st_mtime, st.st_size) != self._read_at:
            try:
                self._load()
            except TokenFileError:
                return  # keep the last good tokens; a bad edit does not lock everyone out

    def user_of(self, token: str | None) -> str | None:
        """The user ``token`` belongs to (None: nobody's)."""
        if not token:
            return None
        if hmac.compare_digest(token.encode(), self.owner_token.encode()):
            return self.owner
        self._fresh()
        for known, user in self._tokens.items():
            if hmac.compare_digest(token.encode(), known.encode()):
                return user
        return None

    def viewer(self, token: str | None) -> Viewer | None:
        user = self.user_of(token)
        return None if user is None else self.viewer_named(user)

    def viewer_named(self, user: str) -> Viewer:
        """``user`` as a viewer (however they logged in): their groups, whether they administer."""
        return Viewer(user, groups_of(user), user in self.admins)

"""Who a YARN job belongs to and who may touch it, as the client decides it before it acts.

* :func:`submitting_user`: the user the ResourceManager names as a job's owner when this client
  submits it: its proxy user (tony.application.proxy-user), else the Kerberos login's short name,
  else (no Kerberos) ``HADOOP_USER_NAME`` or the login name, as skein submits.
* :func:`view_refused`: over SPNEGO the ResourceManager withholds an application's details from a
  user its view ACL leaves out; the client says so before it reads anything of the job.
* :func:`kill_refused`: the words for a kill the ResourceManager refused (its modify ACL).
* :func:`check_proxy`: whether the cluster lets the login act as a job's proxy user, asked of HDFS
  before anything is submitted; :func:`act_as` then names the submitter in the job and marks its
  history to find the job's record in the proxy user's.
"""
from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, Any

from ...errors import AccessDenied, ConfigError
from ...history import site_history
from ...kerberos import Login, LoginError, cache_principal, principal_user
from ...process import user_name
from ...storage import open_storage
from .rm import AppReport

if TYPE_CHECKING:
    from ...spec import JobSpec

__all__ = ["act_as", "check_proxy", "kill_refused", "proxied_by", "refused_by_yarn", "submitting_user", "view_refused"]

#: YARN's states before it has accepted an application (and given it a start time).
_NOT_YET_ACCEPTED = ("NEW", "NEW_SAVING", "SUBMITTED")


def submitting_user(proxy: str | None, login: Login | None, secure: bool) -> str | None:
    """The owner the ResourceManager names for a job submitted as ``login`` (None: no Kerberos
    login) on a cluster that is ``secure`` or not, run as ``proxy`` when given. None when a
    Kerberos login's principal cannot be known (no ticket)."""
    if proxy:
        return proxy
    if login is None and not secure:
        return user_name()
    principal = (login.principal if login else None) or cache_principal()
    return principal_user(principal) if principal else None


def view_refused(report: AppReport, secure: bool, me: str | None) -> AccessDenied | None:
    """The refusal for a user YARN does not let see the application ``report`` describes, or None.
    YARN then reports only what anyone may see: no start time for an application it has
    accepted, which always has one. Without Kerberos the REST API does not know who asks (YARN's
    RPC alone can tell): None."""
    if not secure or report.started_at is not None or report.state in _NOT_YET_ACCEPTED:
        return None
    who = me or "this client's user"
    return AccessDenied(f"YARN does not let {who} see application {report.id} of {report.user}: its view ACL "
                        f"(tony.application.view-acls) does not name {who}")


def kill_refused(app_id: str, me: str | None) -> AccessDenied:
    who = me or "this client's user"
    return AccessDenied(f"YARN does not let {who} kill application {app_id}: its modify ACL "
                        f"(tony.application.modify-acls) does not name {who}")


def refused_by_yarn(error: Exception) -> bool:
    """Whether skein's driver failed because YARN refused this user the operation (its ACLs)."""
    return "MODIFY_APP" in str(error) or "AccessControlException" in str(error)


def check_proxy(proxy: str, me: str | None, hadoop_conf_dir: str, login: Login | None) -> None:
    """LoginError, before anything is submitted, when the cluster does not let the login (``me``)
    act as ``proxy`` (tony.application.proxy-user): HDFS is asked, as the job's files will be
    written there as that user."""
    who = me or "this client's login"
    try:
        open_storage("hdfs:///", hadoop_conf_dir=hadoop_conf_dir, login=login, doas=proxy).exists("")
    except (OSError, ConfigError) as e:
        if isinstance(e, PermissionError) or "impersonate" in str(e):
            why = (f"the cluster does not let {who} act as {proxy} (its hadoop.proxyuser.{who}.hosts and .users "
                   f"or .groups must allow it; HDFS said: {str(e).splitlines()[0][:300]})")
        else:
            why = f"HDFS could not be asked whether {who} may act as {proxy} ({e})"
        raise LoginError(f"tony.application.proxy-user={proxy}: {why}; nothing was submitted") from None


def act_as(spec: JobSpec, me: str | None, hadoop_conf_dir: str, login: Login | None) -> JobSpec:
    """``spec``, run as its proxy user, once the cluster is known to let the login (``me``) act as
    them (:func:`check_proxy`): it names its submitter, and the submitter's job history is marked
    to read the job's record in the proxy user's, where the job writes it."""
    proxy = spec.proxy_user
    assert proxy is not None, "act_as is for a job with a proxy user"
    check_proxy(proxy, me, hadoop_conf_dir, login)
    if not spec.history_location and me:
        try:
            site_history("yarn", hadoop_conf_dir=hadoop_conf_dir, login=login).note_proxied(proxy)
        except OSError as e:
            print(f"tony: the job's record will be in the history of {spec.proxy_user} alone: {e}", file=sys.stderr)
    return dataclasses.replace(spec, submitter=me)


def proxied_by(me: str, owner: str, store_options: dict[str, Any]) -> bool:
    """Whether ``me`` has submitted jobs to run as ``owner`` (:func:`act_as` marked its history)."""
    try:
        return owner in site_history("yarn", **store_options).proxied_users()
    except (OSError, ConfigError, LoginError):
        return False

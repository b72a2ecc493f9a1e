"""Who a YARN job belongs to and who may touch it (:mod:`tony_workflow.backends.yarn.access`), from
the ResourceManager's reports; the ACLs and proxy users at work on a secure cluster are tested in
tests/tony_workflow/jobs/test_yarn_kerberos.py."""
from __future__ import annotations

import pytest

from tony_workflow.backends.yarn.access import kill_refused, refused_by_yarn, submitting_user, view_refused
from tony_workflow.backends.yarn.rm import AppReport
from tony_workflow.errors import AccessDenied
from tony_workflow.kerberos import Login


def report(started_at: float | None, state: str = "RUNNING") -> AppReport:
    return AppReport(id="application_1_0001", name="j", user="alice", queue="root.default", state=state,
                     final_status="UNDEFINED", diagnostics="", started_at=started_at, finished_at=None,
                     am_rpc_address=None, priority=0, tags=frozenset({"tony"}))


def test_a_report_without_its_start_time_is_yarn_withholding_it():
    assert view_refused(report(1000.0), True, "bob") is None
    refused = view_refused(report(None), True, "bob")
    assert isinstance(refused, AccessDenied) and isinstance(refused, PermissionError)
    assert "YARN does not let bob see application application_1_0001 of alice" in str(refused)
    assert "tony.application.view-acls" in str(refused)
    # Not yet accepted (no start time for anyone), or no Kerberos (nobody known to the REST API).
    assert view_refused(report(None, "SUBMITTED"), True, "bob") is None
    assert view_refused(report(None), False, "bob") is None


def test_the_owner_is_the_proxy_user_else_the_logins_short_name(monkeypatch):
    assert submitting_user("colleague", Login("tony/host@EXAMPLE.COM", "/k"), True) == "colleague"
    assert submitting_user(None, Login("tony/host@EXAMPLE.COM", "/k"), True) == "tony"
    monkeypatch.setenv("HADOOP_USER_NAME", "hdfs-user")
    assert submitting_user(None, None, False) == "hdfs-user"


@pytest.mark.parametrize("text, refused", [
    ("org.apache.hadoop.security.AccessControlException: User bob cannot perform operation MODIFY_APP", True),
    ("Connection refused", False)])
def test_a_kill_refused_by_yarn_says_who_and_which_key(text, refused):
    assert refused_by_yarn(RuntimeError(text)) is refused
    assert "YARN does not let bob kill application a_1: its modify ACL (tony.application.modify-acls)" in str(
        kill_refused("a_1", "bob"))

"""Who may see and stop a job (tony.application.view-acls, tony.application.modify-acls), and whom it
runs as (tony.application.proxy-user): the keys as YARN's ACLs, what skein is given, and what
cannot be done where the job runs. The ACLs at work,
with several users of a secure cluster, are tested in tests/tony_workflow/jobs/test_yarn_kerberos.py."""
from __future__ import annotations

import pytest

from tony_workflow.am.state import acl_warnings
from tony_workflow.backends.yarn.app import acls
from tony_workflow.client import load_job
from tony_workflow.errors import SpecError
from tony_workflow.spec.values import parse_acl


def spec(**conf: str):
    return load_job({"name": "a", "command": "true", "tasks": {"worker": {"instances": 1}}},
                    conf={f"tony.application.{k.replace('_', '-')}": v for k, v in conf.items()})


def test_an_acl_is_users_then_groups_or_everyone():
    assert parse_acl("") == ((), ()) and parse_acl("  ") == ((), ())
    assert parse_acl("alice,bob") == (("alice", "bob"), ())
    assert parse_acl("alice ml-team,ops") == (("alice",), ("ml-team", "ops"))
    assert parse_acl(" ml-team") == ((), ("ml-team",))  # as YARN reads it: no users, a group
    assert parse_acl("*") == (("*",), ())


@pytest.mark.parametrize("value, words", [("a b c", "at most two parts"), ("alice,*", "* stands alone"),
                                          ("al ice;x", "is not a user or group name")])
def test_a_bad_acl_is_refused_naming_the_key(value, words):
    with pytest.raises(SpecError) as e:
        spec(view_acls=value).validate()
    assert "tony.application.view-acls" in str(e.value) and words in str(e.value)


def test_skein_is_given_the_acls_enforced_and_who_may_kill_may_see():
    a = acls(spec(view_acls="viewer analysts", modify_acls="colleague ops"))
    assert a.enable and a.view_users == ["viewer", "colleague"] and a.view_groups == ["analysts", "ops"]
    assert a.modify_users == ["colleague"] and a.modify_groups == ["ops"]
    assert a.ui_users == ["viewer", "colleague"]  # the pages: users only
    # By default only the owner (and the cluster's administrators), enforced all the same.
    alone = acls(spec())
    assert alone.enable and alone.view_users == alone.modify_users == alone.ui_users == []
    # Without Kerberos nobody can be told apart at the pages: they stay open, the ACLs still given to YARN.
    open_pages = acls(spec(view_acls="viewer"), secure=False)
    assert open_pages.ui_users == ["*"] and open_pages.view_users == ["viewer"] and open_pages.enable
    everyone = acls(spec(view_acls="*", modify_acls="colleague"))
    assert everyone.view_users == ["*"] and everyone.ui_users == ["*"] and everyone.modify_users == ["colleague"]


def test_what_acls_cannot_do_where_the_job_runs_is_said():
    [local] = acl_warnings(spec(modify_acls="colleague"), "local")
    assert "tony.application.modify-acls" in local and "embedded cluster has no access control lists" in local
    [groups] = acl_warnings(spec(view_acls="viewer analysts"), "yarn")
    assert "analysts" in groups and "not its pages" in groups
    assert acl_warnings(spec(view_acls="viewer"), "yarn") == [] and acl_warnings(spec(), "local") == []


def test_a_job_run_as_its_proxy_user_lets_its_submitter_follow_and_stop_it():
    a = acls(spec(proxy_user="alice", view_acls="viewer"), submitter="airflow")
    assert a.modify_users == ["airflow"] and a.view_users == ["viewer", "airflow"]
    # Submitted as oneself: nobody added.
    assert acls(spec(proxy_user="airflow"), submitter="airflow").modify_users == []
    assert acls(spec(), submitter="airflow").modify_users == []
    [local] = acl_warnings(spec(proxy_user="alice"), "local")
    assert "tony.application.proxy-user=alice" in local and "runs every job as the user who submits it" in local
    assert acl_warnings(spec(proxy_user="alice"), "yarn") == []
    with pytest.raises(SpecError, match="tony.application.proxy-user"):
        spec(proxy_user="al ice").validate()

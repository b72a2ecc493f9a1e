"""The project's one error tree, and how each front end reports it (the command line here; the
Airflow operator and the Azkaban runner in their own test packages)."""
from __future__ import annotations

import pytest

from tony_workflow import errors
from tony_workflow.backends.base import NeverFits
from tony_workflow.backends.yarn.rm import RMError
from tony_workflow.client import SubmissionRefused, TonyClient
from tony_workflow.client.cli import ERROR_REPORTS, error_report, main
from tony_workflow.kerberos import LoginError
from tony_workflow.minicluster import MiniClusterError
from tony_workflow.rpc import AMError, AMUnreachable
from tony_workflow.spec import SpecError, SpecIssue
from tony_workflow.status import check_application_id


def test_every_kind_hangs_from_the_root_and_keeps_its_python_base():
    kinds = {errors.SpecError: ValueError, errors.UnknownApplication: LookupError,
             errors.NotAnApplicationId: ValueError, errors.AMUnreachable: ConnectionError,
             errors.StoreError: OSError, errors.LoginError: ValueError, errors.ClusterError: RuntimeError,
             errors.ConfigError: ValueError, errors.UsageError: ValueError, errors.SubmissionRefused: Exception,
             errors.AMError: Exception, errors.AccessDenied: PermissionError, errors.DataError: ValueError}
    for kind, base in kinds.items():
        assert issubclass(kind, errors.TonyError) and issubclass(kind, base), kind
    assert set(errors.__all__) == {k.__name__ for k in kinds} | {"TonyError"}


def test_the_modules_raise_the_trees_kinds_under_their_old_names():
    assert SpecError is errors.SpecError and SubmissionRefused is errors.SubmissionRefused
    assert AMError is errors.AMError and AMUnreachable is errors.AMUnreachable and LoginError is errors.LoginError
    assert issubclass(NeverFits, errors.SubmissionRefused) and NeverFits("tony.worker.memory", "x").key == "tony.worker.memory"
    assert issubclass(RMError, errors.ClusterError) and issubclass(MiniClusterError, errors.ClusterError)


def test_an_unknown_application_is_its_own_kind_not_a_key_error(tony_home):
    with pytest.raises(errors.UnknownApplication) as e:
        TonyClient("local").attach("application_1_0042")
    assert not isinstance(e.value, KeyError) and e.value.app_id == "application_1_0042"
    assert str(e.value) == "unknown application application_1_0042 (not on the embedded cluster)"
    with pytest.raises(errors.NotAnApplicationId, match="not an application id: '../etc'; expected application_"):
        check_application_id("../etc")


@pytest.mark.parametrize("error, line, status", [
    (errors.SpecError([SpecIssue("tony.worker.memory", "lots", "must be a size")]),
     "invalid job spec, nothing was submitted:\ntony.worker.memory: must be a size (got 'lots')", 2),
    (NeverFits("tony.worker.gpus", "asks for 9 GPUs"),
     "the job cannot run on this cluster, nothing was submitted:\ntony.worker.gpus: asks for 9 GPUs", 2),
    (errors.UnknownApplication("application_1_0001"), "unknown application application_1_0001", 3),  # not found
    (errors.LoginError("no ticket"), "cannot log in to the cluster: no ticket", 2),
    (errors.ConfigError("unknown backend 'mesos'"), "unknown backend 'mesos'", 2),
    (errors.AMUnreachable("connection refused"), "the job's ApplicationMaster does not answer: connection refused", 1),
    (errors.StoreError("HDFS is in safe mode"), "the store failed: HDFS is in safe mode", 1),
    (RMError("HTTP 503"), "HTTP 503", 1),
])
def test_the_command_line_reports_each_kind_in_one_table(error, line, status):
    assert error_report(error) == (line, status)
    assert ERROR_REPORTS[-1][0] is errors.TonyError   # every kind has a row, the root last


def test_the_command_line_says_unknown_application_without_a_traceback(tony_home, capsys):
    assert main(["status", "application_1_0007"]) == 3
    err = capsys.readouterr().err
    assert err.strip() == ("tony: unknown application application_1_0007 (not on the embedded cluster) "
                           "(a YARN application? add --backend yarn, or set TONY_BACKEND=yarn)")
    assert main(["history", "--limit", "0"]) == 2
    assert capsys.readouterr().err.strip() == "tony: --limit must be at least 1, got 0"

"""skein's driver and master built with TonY's changes (:mod:`tony_workflow.backends.yarn.skein_jar`).

The real build (skein's sources from the package index, javac against the mini cluster's Hadoop)
and what YARN then says of a job are tests/tony_workflow/jobs/test_yarn_citizen.py's; here, what
the changes refuse to touch, what names the jar, and that a build that cannot be made leaves
skein's own jar in use, saying why, and is tried again once its tools are there."""
from __future__ import annotations

import pytest

from tony_workflow.backends.yarn import skein_jar
from tony_workflow.client import load_job
from tony_workflow.errors import SpecError


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """No decision kept from an earlier test, and a cache of this test's own."""
    monkeypatch.setattr(skein_jar, "_CHOSEN", None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("TONY_SKEIN_JAR", raising=False)
    return tmp_path


def test_sources_other_than_those_the_changes_were_written_for_are_refused_not_half_changed():
    with pytest.raises(skein_jar.PatchError, match="Driver.java"):
        skein_jar.patch_driver("public class Driver {\n}\n")
    with pytest.raises(skein_jar.PatchError, match="ApplicationMaster.java"):
        skein_jar.patch_master("class ApplicationMaster {}")


def test_the_libraries_skeins_jar_carries_are_imported_under_its_own_package():
    src = "import com.google.common.base.Strings;\nimport static io.grpc.Status.OK;\nimport org.apache.hadoop.X;\n"
    assert skein_jar._shaded(src) == ("import com.anaconda.skein.shaded.com.google.common.base.Strings;\n"
                                      "import static com.anaconda.skein.shaded.io.grpc.Status.OK;\n"
                                      "import org.apache.hadoop.X;\n")


def test_tony_skein_jar_names_the_jar_or_skeins_own(fresh, monkeypatch):
    import skein
    monkeypatch.setenv("TONY_SKEIN_JAR", "skein")
    assert skein_jar.driver_jar() == (str(skein.core._SKEIN_JAR), "TONY_SKEIN_JAR=skein")
    monkeypatch.setattr(skein_jar, "_CHOSEN", None)
    monkeypatch.setenv("TONY_SKEIN_JAR", str(fresh / "absent.jar"))
    jar, why = skein_jar.driver_jar()
    assert jar == str(skein.core._SKEIN_JAR) and "absent.jar is no file" in why
    built = fresh / "built.jar"
    built.write_bytes(b"PK")
    monkeypatch.setattr(skein_jar, "_CHOSEN", None)
    monkeypatch.setenv("TONY_SKEIN_JAR", str(built))
    assert skein_jar.driver_jar() == (str(built), None)


def test_without_the_tools_skeins_own_jar_serves_and_the_build_is_tried_again_once_they_are_there(fresh, monkeypatch):
    import skein
    monkeypatch.setenv("PATH", str(fresh / "empty"))  # no JDK, no `yarn` command
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("TONY_SKEIN_SDIST", str(fresh / "skein.tar.gz"))
    (fresh / "skein.tar.gz").write_bytes(b"")
    calls = []
    monkeypatch.setattr(skein_jar, "_sources", lambda sdist: calls.append(sdist) or {
        "Driver": "x", "ApplicationMaster": "y"})
    monkeypatch.setattr(skein_jar, "patch_driver", lambda text: text)
    monkeypatch.setattr(skein_jar, "patch_master", lambda text: text)
    jar, why = skein_jar.driver_jar()
    assert jar == str(skein.core._SKEIN_JAR) and "no javac (a JDK) on PATH" in why and "type skein" in why
    assert skein_jar._CHOSEN is None  # not kept: the next driver's start tries again
    skein_jar.driver_jar()
    assert len(calls) == 2


@pytest.mark.parametrize("value", ["A-TYPE-LONGER-THAN-20-CHARS", "TONY,SPARK", "TÖNY"])
def test_an_application_type_yarn_would_cut_or_split_is_refused_naming_the_key(value):
    with pytest.raises(SpecError) as e:
        load_job({"name": "t", "command": "true", "tasks": {"worker": {"instances": 1}}},
                 conf={"tony.application.type": value}).validate()
    assert "tony.application.type" in str(e.value) and "20 printable ASCII" in str(e.value)
    load_job({"name": "t", "command": "true", "tasks": {"worker": {"instances": 1}}},
             conf={"tony.application.type": "RESEARCH"}).validate()

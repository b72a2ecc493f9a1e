"""skein's driver and master built with TonY's changes (:mod:`tony_workflow.backends.yarn.skein_jar`).

The real build (skein's sources from the package index, javac against the mini cluster's Hadoop)
and what YARN then says of a job are tests/tony_workflow/jobs/test_yarn_citizen.py's; here, what
the changes refuse to touch, what names the jar, and that a build that cannot be made leaves
skein's own jar in use, saying why, and is tried again once its tools are there."""
from __future__ import annotations

from pathlib import Path

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
    monkeypatch.setenv("TONY_SKEIN_JAR", "skein")
    assert skein_jar.driver_jar() == (skein_jar.stock_jar(), "TONY_SKEIN_JAR=skein")
    monkeypatch.setattr(skein_jar, "_CHOSEN", None)
    monkeypatch.setenv("TONY_SKEIN_JAR", str(fresh / "absent.jar"))
    jar, why = skein_jar.driver_jar()
    assert jar == skein_jar.stock_jar() and "absent.jar is no file" in why
    built = fresh / "built.jar"
    built.write_bytes(b"PK")
    monkeypatch.setattr(skein_jar, "_CHOSEN", None)
    monkeypatch.setenv("TONY_SKEIN_JAR", str(built))
    assert skein_jar.driver_jar() == (str(built), None)


def test_without_the_tools_skeins_own_jar_serves_and_the_build_is_tried_again_once_they_are_there(fresh, monkeypatch):
    monkeypatch.setenv("PATH", str(fresh / "empty"))  # no JDK, no `yarn` command
    monkeypatch.delenv("JAVA_HOME", raising=False)
    fetched = []
    monkeypatch.setattr(skein_jar, "_sdist", lambda version: fetched.append(version) or b"")
    jar, why = skein_jar.driver_jar()
    assert jar == skein_jar.stock_jar() and "no javac (a JDK) on PATH" in why and "type skein" in why
    assert skein_jar._CHOSEN is None and fetched == []  # not kept, and nothing fetched without the tools
    # The tools are there now; the package index is not: that is said, and kept for the process.
    monkeypatch.setattr(skein_jar, "_javac", lambda: "javac")
    monkeypatch.setattr(skein_jar, "_hadoop_classpath", lambda: "hadoop.jar")

    def unreachable(version):
        raise OSError("the package index cannot be reached")
    monkeypatch.setattr(skein_jar, "_sdist", unreachable)
    jar, why = skein_jar.driver_jar()
    assert jar == skein_jar.stock_jar() and "the package index cannot be reached" in why
    assert skein_jar._CHOSEN == (jar, why)


def test_skeins_own_jar_is_where_skein_is_whichever_jar_drivers_start_from_and_a_jar_gone_is_chosen_again(
        fresh, monkeypatch):
    import skein
    monkeypatch.setattr(skein.core, "_SKEIN_JAR", str(fresh / "patched.jar"))
    assert skein_jar.stock_jar() == str(Path(skein.__file__).parent / "java" / "skein.jar")
    built = fresh / "built.jar"
    built.write_bytes(b"PK")
    monkeypatch.setenv("TONY_SKEIN_JAR", str(built))
    assert skein_jar.driver_jar() == (str(built), None)
    built.unlink()  # a cache emptied since
    jar, why = skein_jar.driver_jar()
    assert jar == skein_jar.stock_jar() and "is no file" in why


@pytest.mark.parametrize("value", ["A-TYPE-LONGER-THAN-20-CHARS", "TONY,SPARK", "TÖNY"])
def test_an_application_type_yarn_would_cut_or_split_is_refused_naming_the_key(value):
    with pytest.raises(SpecError) as e:
        load_job({"name": "t", "command": "true", "tasks": {"worker": {"instances": 1}}},
                 conf={"tony.application.type": value}).validate()
    assert "tony.application.type" in str(e.value) and "20 printable ASCII" in str(e.value)
    load_job({"name": "t", "command": "true", "tasks": {"worker": {"instances": 1}}},
             conf={"tony.application.type": "RESEARCH"}).validate()


def test_a_known_versions_archive_must_be_the_one_known_whatever_the_index_vouches_for(monkeypatch):
    import hashlib

    import requests

    forged = b"not skein"

    class Answer:
        def __init__(self, url, text="", content=b""):
            self.url, self.text, self.content = url, text, content

        def raise_for_status(self):
            pass

    def get(url, timeout):
        if url.endswith("/skein/"):  # the index's page, vouching for the forged archive
            return Answer(url, "".join(f'<a href="../files/skein-{v}.tar.gz#sha256={hashlib.sha256(forged).hexdigest()}">'
                                       "x</a>" for v in ("0.8.2", "9.9.9")))
        return Answer(url, content=forged)

    monkeypatch.delenv("TONY_SKEIN_SDIST", raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", "https://index.example/simple")
    monkeypatch.setattr(requests, "get", get)
    with pytest.raises(OSError, match="not the archive expected"):
        skein_jar._sdist("0.8.2")
    assert skein_jar._sdist("9.9.9") == forged  # unknown here: the index's word

"""Zips shipped with a job (:mod:`tony_workflow.archive`): only those that unpack inside their
directory are unpacked."""
from __future__ import annotations

import zipfile

import pytest

from tony_workflow.archive import unsafe_entry


def make_zip(path, names, link: str | None = None):
    with zipfile.ZipFile(path, "w") as z:
        for name in names:
            z.writestr(name, "x")
        if link:
            info = zipfile.ZipInfo(link)
            info.external_attr = (0o120777 << 16)
            z.writestr(info, "/etc/passwd")
    return path


def test_a_venv_that_stays_inside_is_safe(tmp_path):
    assert unsafe_entry(make_zip(tmp_path / "v.zip", ["bin/python", "lib/python3.11/site.py"])) is None


@pytest.mark.parametrize("names, link, says", [
    (["/etc/cron.d/x"], None, "has an absolute path"),
    (["bin/../../escape"], None, "climbs out of the archive with '..'"),
    (["C:/Windows/x"], None, "has an absolute path"),
    (["bin/python"], "bin/evil", "is a symbolic link"),
])
def test_an_entry_that_could_land_outside_is_named(tmp_path, names, link, says):
    why = unsafe_entry(make_zip(tmp_path / "v.zip", names, link))
    assert why is not None and says in why


def test_a_file_that_is_no_zip_is_an_error(tmp_path):
    (tmp_path / "v.zip").write_text("not a zip")
    with pytest.raises(ValueError, match="is not a zip file"):
        unsafe_entry(tmp_path / "v.zip")


def test_unpack_takes_the_kinds_yarn_unpacks_by_their_names(tmp_path):
    import tarfile

    from tony_workflow.archive import unpack
    src = tmp_path / "files"
    (src / "d").mkdir(parents=True)
    (src / "d" / "x.txt").write_text("x")
    tar = tmp_path / "a.tar.gz"
    with tarfile.open(tar, "w:gz") as t:
        t.add(src / "d", arcname="d")
    unpack(tar, tmp_path / "out-tar")
    assert (tmp_path / "out-tar" / "d" / "x.txt").read_text() == "x"
    zipped = make_zip(tmp_path / "a.jar", ["META-INF/MANIFEST.MF", "run.sh"])
    unpack(zipped, tmp_path / "out-jar")
    assert sorted(p.name for p in (tmp_path / "out-jar").iterdir()) == ["META-INF", "run.sh"]
    with pytest.raises(ValueError, match=r"is not an archive YARN unpacks \(.zip, .jar, .tar, .tar.gz, .tgz\)"):
        unpack(tmp_path / "files" / "d" / "x.txt", tmp_path / "out-txt")


def test_unpack_refuses_an_entry_that_would_land_outside(tmp_path):
    import io
    import tarfile

    from tony_workflow.archive import unpack
    with pytest.raises(ValueError, match="entry '../escape' climbs out"):
        unpack(make_zip(tmp_path / "bad.zip", ["../escape"]), tmp_path / "out")
    tar = tmp_path / "bad.tar"
    with tarfile.open(tar, "w") as t:
        info = tarfile.TarInfo("../escape")
        info.size = 1
        t.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(ValueError, match="cannot be unpacked safely"):
        unpack(tar, tmp_path / "out2")
    assert not (tmp_path / "escape").exists()

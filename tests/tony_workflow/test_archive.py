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

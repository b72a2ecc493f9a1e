"""``tony-azkaban validate``: whole projects, good and bad, through the real command line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.azkaban_jobtype.conftest import zip_project

from .conftest import EXAMPLE, run_cli

BAD_JOBS = {
    # each: the .job text, and what its error must say (file:line: key: ...)
    "undefined": ("type=TonyJob\nexecutes=train.py\ntony.worker.instances=1\ninput=${data.root}/in\n",
                  "undefined.job:4: input: ${data.root} is not defined"),
    "cycle": ("type=TensorFlowJob\nexecutes=train.py\ntony.worker.instances=1\na=${b}\nb=${a}\n",
              "cycle.job:4: a: circular substitution: a -> b -> a"),
    "instances": ("type=TonyJob\nexecutes=train.py\ntony.worker.instances=-2\n",
                  "instances.job: tony.worker.instances (line 3): must be an integer >= 0 (got '-2')"),
    "noexec": ("type=TonyJob\ntony.worker.instances=2\n",
               "noexec.job: executes: is required: the script every task runs"),
    "misspelled": ("type=TonyJob\nexecutes=train.py\ntony.worker.instances=1\ntony.worker.memroy=8g\n",
                   "misspelled.job: tony.worker.memroy (line 4): unknown key (did you mean tony.worker.memory?)"),
    "unterminated": ("type=TonyJob\nexecutes=train.py\ntony.worker.instances=1\ninput=${data.root/in\n",
                     "unterminated.job:4: input: has a '${' that no '}' closes"),
    "outside": ("type=TonyJob\nexecutes=train.py\ntony.worker.instances=1\nsrc_dir=../../elsewhere\n",
                "outside.job: src_dir (line 4): must stay inside the project directory"),
    "venvelsewhere": ("type=TonyJob\nexecutes=train.py\ntony.worker.instances=1\npython_venv=/usr/lib\n",
                      "venvelsewhere.job: python_venv (line 4): must stay inside the project directory"),
    "machine": ("type=TonyJob\nexecutes=train.py\ntony.worker.instances=1\ntony.local.gpus=8\n",
                "machine.job: tony.local.gpus (line 4): a job may not set this key"),
    "script": ("type=TonyJob\nexecutes=trian.py\ntony.worker.instances=1\n",
               "script.job: executes (line 2): is not a file in src_dir"),
    # no task: TonY's single-node job runs the script in its ApplicationMaster
    "singlescript": ("type=TonyJob\nexecutes=trian.py\n", "singlescript.job: executes (line 2): is not a file in src_dir"),
    "huge": ("type=TonyJob\nexecutes=train.py\ntony.worker.instances=1\ntony.worker.memory=900g\n",
             "huge.job: tony.worker.memory: worker:0 asks for "),
    "typo": ("type=TonyJob\nexecutes=train.py\ntony.worker.instances=1\ntony.wroker.instances=1\n",
             "typo.job: tony.wroker.instances (line 4): 'wroker' is one letter away from the task type 'worker'"),
}


def project_with(tmp_path: Path, jobs: dict[str, str]) -> Path:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "train.py").write_text("")
    for name, text in jobs.items():
        (root / f"{name}.job").write_text(text)
    return root


def test_the_example_project_validates():
    r = run_cli("validate", str(EXAMPLE))
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    out = r.stdout
    assert "project mnist (Flow 1.0)" in out
    assert "mnist:mnist_train  (type TensorFlowJob, mnist_train.job)" in out
    assert "  worker: 2 x (2048 MB, 1 vcore, 0 GPUs)" in out
    assert "  am: 512 MB, 1 vcore, 0 GPUs" in out
    assert f"  src_dir: {EXAMPLE / 'src'}" in out
    # A reader that goes away early (`tony-azkaban validate ... | head`) gets no traceback.
    import subprocess
    import sys
    proc = subprocess.Popen([sys.executable, "-m", "azkaban_jobtype.cli", "validate", str(EXAMPLE)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    assert proc.wait(timeout=60) == 141 and "Error" not in proc.stderr.read()
    assert "mnist:mnist  (" not in out  # the command job is not a TonY job


def test_json_report_carries_the_full_spec():
    r = run_cli("validate", str(EXAMPLE), "--json", "--param", "azkaban.webserverhost=az.example.com")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["flow_version"] == "1.0" and report["errors"] == []
    [job] = report["jobs"]
    assert job["job"] == "mnist:mnist_train" and job["file"] == "mnist_train.job"
    assert job["spec"]["conf"]["tony.worker.instances"] == "2"
    assert job["spec"]["conf"]["tony.context.host"] == "az.example.com"


def test_a_zipped_project_validates(tmp_path):
    archive = tmp_path / "mnist.zip"
    zip_project(EXAMPLE, archive)
    r = run_cli("validate", str(archive))
    assert r.returncode == 0, r.stderr
    assert "mnist:mnist_train  (type TensorFlowJob, mnist_train.job)" in r.stdout


@pytest.mark.parametrize("name", sorted(BAD_JOBS))
def test_bad_job_files_give_clear_errors_with_file_and_key(tmp_path, name):
    text, expected = BAD_JOBS[name]
    r = run_cli("validate", str(project_with(tmp_path, {name: text})))
    assert r.returncode == 2
    errors = r.stderr.splitlines()
    assert any(line.startswith(f"error: {expected}") for line in errors), r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_every_problem_of_a_project_is_reported_at_once(tmp_path):
    r = run_cli("validate", str(project_with(tmp_path, {name: text for name, (text, _) in BAD_JOBS.items()})))
    assert r.returncode == 2
    for _, expected in BAD_JOBS.values():
        assert f"error: {expected}" in r.stderr
    assert r.stdout.count("cannot be submitted") == len(BAD_JOBS)


def test_flow_parameters_can_supply_variables(tmp_path):
    project = project_with(tmp_path, {"undefined": BAD_JOBS["undefined"][0]})
    r = run_cli("validate", str(project), "--param", "data.root=/data")
    assert r.returncode == 0, r.stderr


def test_inherited_properties_and_subdirectories(tmp_path):
    root = project_with(tmp_path, {})
    (root / "common.properties").write_text("tony.worker.memory=3g\nexecutes=train.py\n")
    (root / "team").mkdir()
    (root / "team" / "team.properties").write_text("tony.worker.instances=${workers}\nworkers=3\n")
    (root / "team" / "train.job").write_text("type=TonyJob\ntony.ps.instances=1\n")
    (root / "team" / "src").mkdir()
    (root / "team" / "src" / "train.py").write_text("")
    r = run_cli("validate", str(root), "--json")
    assert r.returncode == 0, r.stderr
    [job] = json.loads(r.stdout)["jobs"]
    assert job["file"] == "team/train.job"
    conf = job["spec"]["conf"]
    assert (conf["tony.worker.instances"], conf["tony.worker.memory"], conf["tony.ps.instances"]) == ("3", "3g", "1")
    # src_dir starts at the job's working directory: Azkaban runs a job where its file is
    assert job["spec"]["src_dir"] == str(root / "team" / "src")


def test_a_flow20_project(tmp_path):
    root = tmp_path / "p"
    (root / "code").mkdir(parents=True)
    (root / "code" / "train.py").write_text("")
    (root / "p.project").write_text("azkaban-flow-version: 2.0\n")
    (root / "train.flow").write_text("""\
config:
  tony.am.memory: 1g
nodes:
  - name: report
    type: command
    dependsOn: [train]
    config: {command: echo done}
  - name: train
    type: TonyJob
    config:
      executes: train.py
      src_dir: code
      tony.worker.instances: 2
      worker_env.MODE: flow20
""")
    r = run_cli("validate", str(root))
    assert r.returncode == 0, r.stderr
    assert "train:train  (type TonyJob, train.flow)" in r.stdout
    assert "  am: 1024 MB, 1 vcore, 0 GPUs" in r.stdout and "  env: MODE=flow20" in r.stdout


def test_a_job_that_sets_command_is_warned_about(tmp_path):
    root = project_with(tmp_path, {"j": "type=TonyJob\nexecutes=train.py\ntony.worker.instances=1\ncommand=echo hi\n"})
    r = run_cli("validate", str(root))
    assert r.returncode == 0
    assert r.stderr.startswith("warning: j.job:4: command: set for j:j, it replaces the TonyJob job type's own "
                               "command")


def test_fixture_projects_report_azkabans_upload_errors_and_still_show_specs(fixtures_dir):
    r = run_cli("validate", str(fixtures_dir / "hadoop-dsl-expected" / "jobs1"))
    assert r.returncode == 2
    assert "error: jobs1_job2.job: type: is required" in r.stderr
    assert "jobs1:jobs1_job24  (type TonyJob, jobs1_job24.job)" in r.stdout
    assert "  worker: 4 x (8192 MB, 1 vcore, 2 GPUs)" in r.stdout
    r = run_cli("validate", str(fixtures_dir / "azkaban-flow20"))
    assert r.returncode == 0 and "no job of type TonyJob or TensorFlowJob" in r.stdout


def test_unreadable_inputs(tmp_path):
    r = run_cli("validate", str(tmp_path / "missing"))
    assert r.returncode == 2 and r.stderr.strip() == f"error: project: no such file or directory (got " \
                                                     f"'{tmp_path / 'missing'}')"
    (tmp_path / "p.project").write_text("azkaban-flow-version: 3.0\n")
    r = run_cli("validate", str(tmp_path))
    assert r.returncode == 2 and "error: p.project: azkaban-flow-version: must be the number 2.0" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("entry, why", [("../../escape.py", "climbs out of the archive with '..'"),
                                        ("/etc/cron.d/job", "has an absolute path"),
                                        ("bin/python", "is a symbolic link")])
def test_a_venv_archive_that_would_unpack_outside_is_refused_naming_the_entry(tmp_path, entry, why):
    import stat
    import zipfile

    root = project_with(tmp_path, {"train": "type=TonyJob\nexecutes=train.py\ntony.worker.instances=1\n"
                                             "python_venv=venv.zip\n"})
    with zipfile.ZipFile(root / "venv.zip", "w") as archive:
        archive.writestr("bin/activate", "# fine\n")
        info = zipfile.ZipInfo(entry)
        if why.startswith("is a symbolic link"):
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, "/usr/bin/python3")
        else:
            archive.writestr(info, "print('out')\n")
    r = run_cli("validate", str(root))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"python_venv (line 4): cannot be unpacked safely: entry {entry!r} {why}" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "escape.py").exists()


def test_validate_shows_each_jobs_inputs_and_refuses_a_bad_one(tmp_path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    project = project_with(tmp_path, {
        "good": ("type=TonyJob\nexecutes=train.py\nsrc_dir=src\ntony.worker.instances=2\n"
                 "tony.data.train.path=data\ntony.data.train.columns=id\n"),
        "bad": ("type=TonyJob\nexecutes=train.py\nsrc_dir=src\ntony.worker.instances=1\n"
                "tony.data.train.path=data\ntony.data.train.columns=idd\n")})
    (project / "data").mkdir()  # relative to the project, as a job's other paths are
    pq.write_table(pa.table({"id": np.arange(10), "x": np.ones(10)}), project / "data" / "a.parquet")
    r = run_cli("validate", str(project), "--json")
    report = json.loads(r.stdout)
    jobs = {j["job"].split(":")[-1]: j for j in report["jobs"]}
    assert jobs["good"]["inputs"]["train"]["rows"] == 10 and jobs["good"]["inputs"]["train"]["format"] == "parquet"
    assert any("has no column idd" in e and "did you mean id" in e for e in jobs["bad"]["errors"]), jobs["bad"]
    assert r.returncode == 2
    assert "input train: parquet, 1 files, 10 rows" in run_cli("validate", str(project)).stdout


def test_a_job_with_three_problems_has_three_errors_said(tmp_path):
    """A misspelled key, a value that does not parse and a missing script, in one job: all three
    are said, and counted as three."""
    root = project_with(tmp_path, {"three": "type=TensorFlowJob\nexecutes=trian.py\ntony.worker.instances=2\n"
                                            "tony.worker.memroy=2g\ntony.worker.vcores=x\n"})
    r = run_cli("validate", str(root))
    assert r.returncode == 2
    assert "cannot be submitted: 3 errors (listed on stderr)" in r.stdout
    for said in ("three.job: tony.worker.memroy (line 4): unknown key (did you mean tony.worker.memory?)",
                 "three.job: tony.worker.vcores (line 5): must be an integer >= 1 (got 'x')",
                 "three.job: executes (line 2): is not a file in src_dir"):
        assert said in r.stderr, r.stderr

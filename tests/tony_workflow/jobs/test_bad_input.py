"""Hostile or huge input through the real ``tony`` command: refused at once, with one clear message.

Each case writes a spec (or flags) built to hurt a reader, an alias bomb, nesting thousands deep, a
billion instances, a command longer than a command line, and runs ``tony submit`` in a process whose
address space is capped, so that a reader that expands the input before checking it fails the case
instead of the machine. Every case must end with exit code 2, name the key or the phrase given, show
no traceback and leave nothing submitted.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.job

MEMORY_CAP = 2 * 1024 ** 3
JOB = {"name": "bad", "command": "true", "tasks": {"worker": {"instances": 1}}}


def _alias_bomb(levels: int, width: int) -> str:
    lines = ['a0: &a0 ["lol"]']
    for i in range(1, levels + 1):
        refs = ", ".join([f"*a{i - 1}"] * width)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(["name: bomb", "command: true", "tasks: {worker: {instances: 1}}",
                      *[f"x-{line}" for line in lines], f"tags: *a{levels}"]) + "\n"


def _yaml(**fields) -> str:
    return yaml.safe_dump({**JOB, **fields})


CASES = {
    # name: (file name, content, extra argv, what the message must contain)
    "yaml alias bomb, nine by nine": ("bomb.yaml", _alias_bomb(9, 9), [], "alias"),
    "yaml aliases three by three, 16 deep": ("chain.yaml", _alias_bomb(16, 3), [], "alias"),
    "yaml nested 10000 deep": ("deep.yaml", "conf: " + "[" * 10000 + "]" * 10000 + "\n", [], "nested more than"),
    "json nested 100000 deep": ("deep.json", '{"conf": ' + "[" * 100000 + "]" * 100000 + "}", [],
                                "nested more than"),
    "json key given twice": ("twice.json", ('{"name": "a", "name": "b", "command": "true", '
                                            '"tasks": {"worker": {}}}'), [], "duplicate key 'name'"),
    "a billion workers": ("many.yaml", _yaml(tasks={"worker": {"instances": 10 ** 9}}), [],
                          "tasks.worker.instances"),
    "a billion workers by --conf": ("conf.yaml", _yaml(), ["--conf", "tony.worker.instances=1000000000"],
                                    "tony.worker.instances"),
    "a spec file of 2 MiB": ("huge.yaml", _yaml() + "#" * (2 * 1024 * 1024) + "\n", [], "at most 1048576"),
    "task_params longer than a command line": ("params.yaml", _yaml(command=None, executes="train.py",
                                                                    task_params="--x " * 50_000), [],
                                               "task_params"),
    "a command longer than a command line": ("cmd.yaml", _yaml(tasks={"worker": {"command": "echo " + "y" * 200_000}}),
                                             [], "tasks.worker.command"),
    "two chiefs": ("chiefs.yaml", _yaml(tasks={"chief": {"instances": 2}, "worker": {"instances": 1}}), [],
                   "at most one chief"),
    "a memory size of 100000 characters": ("mem.yaml", _yaml(tasks={"worker": {"memory": "9" * 100_000 + "q"}}),
                                           [], "tasks.worker.memory"),
    # Templates are rendered in a sandbox: a line of Jinja2 must not make gigabytes either.
    "a template that repeats a string a billion times": ("rep.yaml.j2", ("name: \"{{ 'x' * 10**9 }}\"\n"
                                                                         "command: 'true'\n"
                                                                         "tasks: {worker: {instances: 1}}\n"), [],
                                                         "a repetition of 1000000000 items"),
    "a template loop that writes 10 MB": ("loop.yaml.j2", ("name: big\ncommand: 'true'\n"
                                                           "tasks: {worker: {instances: 1}}\n"
                                                           "{% for i in range(100000) %}# {{ 'y' * 100 }}\n"
                                                           "{% endfor %}"), [],
                                          "the rendered spec is longer than"),
    "a template power of a million bits": ("pow.yaml.j2", ("name: '{{ 7 ** 1000000 }}'\ncommand: 'true'\n"
                                                            "tasks: {worker: {instances: 1}}\n"), [],
                                           "more than 4096 bits"),
    # XML that tries to reach files or multiply itself.
    "an XML external entity": ("xxe.xml", ('<?xml version="1.0"?>'
                                           '<!DOCTYPE c [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
                                           "<configuration><property><name>tony.application.name</name>"
                                           "<value>&e;</value></property></configuration>"), [], "malformed XML"),
    "an XML entity bomb": ("laughs.xml", '<?xml version="1.0"?><!DOCTYPE c [<!ENTITY a "lol">'
                           + "".join(f'<!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">' for i in range(9))
                           + "]><configuration><property><name>tony.application.name</name><value>&j;</value>"
                           "</property></configuration>", [], "malformed XML"),
    # Shapes and spellings.
    "a document that is a list": ("list.yaml", "- name: x\n- tasks: {}\n", [], "the top level must be a mapping"),
    "a misspelled field": ("field.yaml", "name: x\ncommand: 'true'\ntask: {worker: {instances: 1}}\n", [],
                           "did you mean 'tasks'?"),
    "a misspelled framework": ("fw.yaml", _yaml(framework="tensorflw"), [], "unknown framework"),
    "a second chief by --conf": ("chief2.yaml", _yaml(tasks={"chief": {"instances": 1}, "worker": {"instances": 1}}),
                                 ["--conf", "tony.chief.instances=3"], "at most one chief"),
    "a file that is not UTF-8": ("latin.yaml", None, [], "is not UTF-8 text"),
    "more memory than any machine": ("mem2.yaml", _yaml(tasks={"worker": {"instances": 1, "memory": "900000000g"}}),
                                     [], "tony.worker.memory"),
    # A misspelled key would run the job with a default nobody meant.
    "a typo in the conf section": ("typo.yaml", _yaml(conf={"tony.worker.memroy": "8g"}), [],
                                   "tony.worker.memroy: unknown key (did you mean tony.worker.memory?)"),
    "a typo at the top level": ("top.yaml", _yaml(**{"tony.am.retry-cont": 3}), [],
                                "did you mean tony.am.retry-count?"),
    "a typo in a TonY XML file": ("typo.xml", ("<configuration><property><name>tony.worker.instances</name>"
                                               "<value>1</value></property><property>"
                                               "<name>tony.containers.command</name><value>true</value></property>"
                                               "<property><name>tony.worker.gpu</name><value>1</value></property>"
                                               "</configuration>"), [], "did you mean tony.worker.gpus?"),
    "another system's key in a TonY XML file": ("hadoop.xml", ("<configuration><property>"
                                                               "<name>tony.worker.instances</name><value>1</value>"
                                                               "</property><property>"
                                                               "<name>tony.containers.command</name>"
                                                               "<value>true</value></property><property>"
                                                               "<name>mapreduce.map.memory.mb</name>"
                                                               "<value>4096</value></property></configuration>"), [],
                                                "mapreduce.map.memory.mb: unknown key: it is not a TonY key"),
    "a typo by --conf": ("conf2.yaml", _yaml(), ["--conf", "tony.application.timout=1000"],
                         "did you mean tony.application.timeout?"),
    "a type that is never declared": ("type.yaml", _yaml(), ["--conf", "tony.wroker.memory=8g"],
                                      "no tony.wroker.instances declares"),
    # The machine's size and how it starts jobs are the local cluster's to say, never a job's.
    "a job that gives the machine more memory": ("mach.yaml", _yaml(conf={"tony.local.memory": "1t"}), [],
                                                 "tony.local.memory: a job may not set this key"),
    "a job that gives the machine GPUs": ("gpus.yaml", _yaml(**{"tony.local.gpus": 8}), [],
                                          "tony.local.gpus: a job may not set this key"),
    "a job that sizes the machine in TonY XML": ("mach.xml", ("<configuration><property>"
                                                              "<name>tony.worker.instances</name><value>1</value>"
                                                              "</property><property><name>tony.local.vcores</name>"
                                                              "<value>64</value></property></configuration>"), [],
                                                 "tony.local.vcores: a job may not"),
    "a job that widens what it inherits": ("env.yaml", _yaml(), ["--conf", "tony.local.env-whitelist=AIRFLOW_CONN_*"],
                                           "set it in $TONY_CONF_DIR/tony-site.xml"),
    "a job that turns off the fork server": ("fork.yaml", _yaml(), ["--conf", "tony.local.fork-server=false"],
                                             "tony.local.fork-server: a job may not set this key"),
    "a job that sets a local key nobody has": ("other.yaml", _yaml(conf={"tony.local.anything": "x"}), [],
                                               "tony.local.anything: a job may not set this key"),
    "a job that picks the cluster commands mean": ("client.yaml", _yaml(), ["--conf", "tony.client.backend=yarn"],
                                                   "tony.client.backend: a job may not set this key"),
    "a job that names the history server": ("hs.yaml", _yaml(), ["--conf", "tony.history.server-url=http://hs:1"],
                                            "tony.history.server-url: a job may not set this key"),
    "docker without an image": ("docker.yaml", _yaml(conf={"tony.docker.enabled": "true"}), [],
                                "needs an image for the 'am' containers"),
    "a docker mount without a mode": ("mount.yaml", _yaml(conf={"tony.docker.enabled": "true",
                                                                "tony.docker.containers.image": "tf:2"}),
                                      ["--conf", "tony.docker.mounts=/data:/data"], "tony.docker.mounts"),
    "a negative priority": ("priority.yaml", _yaml(conf={"tony.application.priority": "-1"}), [],
                            "tony.application.priority"),
}

#: A site configuration (``$TONY_CONF_DIR/tony-site.xml``) with a bad local-cluster setting: every job
#: is refused, with the key, the value and the file named.
SITE_CASES = {
    "memory that is not a size": ({"tony.local.memory": "lots"}, "tony.local.memory"),
    "a GPU list with a letter": ({"tony.local.gpus": "0,a"}, "a list of GPU indices"),
    "less than one vcore per core": ({"tony.local.vcore-oversubscription": "0.5"}, "a number >= 1"),
    "no cores at all": ({"tony.local.vcores": "0"}, "tony.local.vcores"),
    "a misspelled local key": ({"tony.local.memroy": "8g"}, "did you mean tony.local.memory?"),
    "a whitelist entry with a space": ({"tony.local.env-whitelist": "PATH,MY VAR"}, "tony.local.env-whitelist"),
    "a fork server that is maybe on": ({"tony.local.fork-server": "maybe"}, "tony.local.fork-server"),
    "a negative retention": ({"tony.local.retention-sec": "-1"}, "tony.local.retention-sec"),
}


def _submit(spec: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tony_workflow.client.cli", "submit", str(spec), *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=50, preexec_fn=_capped, env=dict(os.environ),
                          check=False)


def _refused(r: subprocess.CompletedProcess, expected: str, tony_home: Path) -> None:
    assert r.returncode == 2, r.stderr[-2000:]
    assert expected in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "Error:" not in r.stderr.split(":", 1)[0]
    # One clear message: short, whatever the size of the input.
    assert len(r.stderr) < 2000, len(r.stderr)
    assert not list((tony_home / "local" / "apps").glob("application_*"))


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_at_once(case, tony_home, tmp_path):
    name, content, argv, expected = CASES[case]
    spec = tmp_path / name
    if content is None:  # bytes that are not UTF-8
        spec.write_bytes(b"name: caf\xe9\ncommand: 'true'\ntasks: {worker: {instances: 1}}\n")
    else:
        spec.write_text(content.replace("command: null\n", ""))
    _refused(_submit(spec, *argv), expected, tony_home)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", sorted(SITE_CASES))
def test_a_bad_local_cluster_setting_refuses_every_job(case, tony_home, tmp_path, local_site):
    props, expected = SITE_CASES[case]
    conf_dir = local_site(props)
    spec = tmp_path / "good.yaml"
    spec.write_text(_yaml())
    r = _submit(spec)
    _refused(r, expected, tony_home)
    assert str(conf_dir / "tony-site.xml") in r.stderr and next(iter(props)) in r.stderr


def test_a_flow_file_alias_bomb_is_refused_by_the_azkaban_validator(tmp_path):
    project = tmp_path / "bombed"
    project.mkdir()
    (project / "p.project").write_text("azkaban-flow-version: 2.0\n")
    bomb = _alias_bomb(9, 9).replace("tags:", "config:\n  tags:")
    (project / "flow.flow").write_text("nodes:\n  - name: train\n    type: TensorFlowJob\n" +
                                       "\n".join("    " + line for line in bomb.splitlines()) + "\n")
    r = subprocess.run([sys.executable, "-m", "azkaban_jobtype.cli", "validate", str(project)], cwd=REPO,
                       capture_output=True, text=True, timeout=50, preexec_fn=_capped, env=dict(os.environ),
                       check=False)
    assert r.returncode == 2, (r.stdout + r.stderr)[-2000:]
    assert "alias" in r.stdout + r.stderr and "Traceback" not in r.stderr
    assert "flow.flow" in r.stdout + r.stderr


def test_the_limits_leave_real_specs_alone(tmp_path):
    """Anchors shared between task types, and a spec with many types, still load."""
    from tony_workflow.spec import load_spec

    text = ("x-small: &small {memory: 2g, vcores: 1}\n"
            "command: python train.py\n"
            "tasks:\n" + "".join(f"  t{i}: *small\n" for i in range(40)))
    spec = load_spec(text)
    spec.validate()
    assert len(spec.tasks) == 40 and spec.tasks["t7"].resources.memory_mb == 2048
    data = json.loads(json.dumps({**JOB, "conf": {"tony.application.tags": ["a"] * 1000}}))
    path = tmp_path / "tags.json"
    path.write_text(json.dumps(data))
    assert load_spec(path).tags == ["a"] * 1000
    assert Path(path).stat().st_size < 1024 * 1024


def test_a_venv_archive_with_an_entry_outside_is_refused_at_submit(tony_home, tmp_path):
    import zipfile

    with zipfile.ZipFile(tmp_path / "venv.zip", "w") as archive:
        archive.writestr("bin/python", "#!/bin/sh\n")
        archive.writestr("../../../tmp/planted.sh", "echo owned\n")
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({**JOB, "python_venv": "venv.zip"}))
    r = subprocess.run([sys.executable, "-m", "tony_workflow.client.cli", "submit", str(spec)], cwd=REPO,
                       capture_output=True, text=True, timeout=50, env=dict(os.environ), check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "python_venv" in r.stderr and "entry '../../../tmp/planted.sh' climbs out of the archive" in r.stderr
    assert not list((tony_home / "local" / "apps").glob("application_*"))


@pytest.mark.parametrize("conf, key", [
    ({"tony.containers.envs": "LEVEL=1,DB_PASSWORD=hunter2,not an entry"}, "tony.containers.envs"),
    ({"tony.execution.envs": "API_KEY=hunter2,=x"}, "tony.execution.envs"),
    ({"tony.am.retry-count": "hunter2", "tony.https.keystore.password": "hunter2"}, "tony.am.retry-count"),
])
def test_secrets_are_not_repeated_in_messages(conf, key):
    from tony_workflow.spec import JobSpec, SpecError

    with pytest.raises(SpecError) as info:
        JobSpec(conf={**conf, "tony.worker.instances": "1", "tony.containers.command": "true"}).validate()
    message = str(info.value)
    assert key in message
    if key != "tony.am.retry-count":
        assert "hunter2" not in message and "<hidden>" in message
    # A secret-looking key's value is hidden even where it is the bad value itself.
    from tony_workflow.spec import SpecIssue
    assert "hunter2" not in str(SpecIssue("tony.secret.key", "hunter2", "bad"))

"""Tests of tony_workflow.spec.render: strict, sandboxed Jinja2 rendering of spec templates."""
from __future__ import annotations

import os

import pytest

from tony_workflow.spec import SpecError
from tony_workflow.spec.render import render_template


def only_issue(text, variables=None, source="job.yaml"):
    with pytest.raises(SpecError) as info:
        render_template(text, variables, source=source)
    (issue,) = info.value.issues
    return issue


@pytest.mark.parametrize("text", ["name: plain\n", "", "a: {b: c}\n", "comment: {# not jinja here\n", "x: '}}'"])
def test_text_without_template_syntax_is_unchanged(text):
    assert render_template(text) is text


def test_variables_are_rendered_and_trailing_newline_kept():
    text = "workers: {{ n }}\n{% for t in types %}- {{ t }}\n{% endfor %}"
    assert render_template(text, {"n": 2, "types": ["ps", "worker"]}) == "workers: 2\n- ps\n- worker\n"
    assert render_template("a: {{ x | default(3) }}\n") == "a: 3\n"


def test_environment_is_readable_but_not_writable(monkeypatch):
    monkeypatch.setenv("TONY_RENDER_PROBE", "here")
    assert render_template("{{ env.TONY_RENDER_PROBE }}") == "here"
    assert render_template("{{ env.get('TONY_RENDER_UNSET', 'd') }}") == "d"
    assert render_template("{{ env }}", {"env": "mine"}) == "mine"
    issue = only_issue("{{ env.TONY_RENDER_UNSET }}")
    assert "env.TONY_RENDER_UNSET" in str(issue) and "no such environment variable" in str(issue)
    only_issue("{% set _ = env.pop('TONY_RENDER_PROBE') %}")
    assert os.environ["TONY_RENDER_PROBE"] == "here"


def test_undefined_variable_names_it_and_the_line():
    issue = only_issue("name: x\ntasks:\n  worker: {instances: {{ workers }}}\n")
    assert issue.key == "workers" and issue.source == "job.yaml"
    assert "line 3" in issue.message
    assert str(issue).startswith("job.yaml: workers: undefined template variable at line 3")
    assert only_issue("{{ cfg.missing }}", {"cfg": {}}).key == "missing"


def test_syntax_error_names_the_line():
    issue = only_issue("a: 1\nb: {% if %}\n")
    assert issue.key == "line 2" and "syntax" in issue.message


@pytest.mark.parametrize("text", ["{{ ''.__class__ }}", "{{ ''.__class__.__mro__[1].__subclasses__() }}",
                                  "{{ cycler.__init__.__globals__ }}"])
def test_sandbox_blocks_python_internals(text):
    issue = only_issue(text)
    assert "__" in str(issue) and "<class" not in str(issue)


def test_runtime_errors_become_spec_errors():
    issue = only_issue("x: {{ 1 / 0 }}")
    assert issue.key == "template" and "ZeroDivisionError" in issue.message

"""Java properties, Azkaban's layered props, directory inheritance and ${} substitution."""
from __future__ import annotations

import pytest

from azkaban_jobtype.props import (
    Origin,
    Props,
    PropsError,
    directory_chains,
    dump_properties,
    load_properties,
    read_properties,
    resolve,
)

# --------------------------------------------------------------------------------------------------
# Reading, as java.util.Properties.load(InputStream) does


def test_separators_comments_and_whitespace():
    props = read_properties(
        "# a comment\n"
        "! also a comment\n"
        "equals=1\n"
        "colon:2\n"
        "space 3\n"
        "  padded   =   4  \n"
        "tab\t5\n"
        "empty=\n"
        "bare\n"
        "first=x=y:z\n")
    assert props.flatten() == {"equals": "1", "colon": "2", "space": "3", "padded": "4  ", "tab": "5",
                               "empty": "", "bare": "", "first": "x=y:z"}


def test_escapes_unicode_and_continuation_lines():
    props = read_properties(
        "key\\ with\\ spaces = v\n"
        "key\\:colon\\=eq = v2\n"
        "tabs = a\\tb\\nc\\\\d\n"
        "unicode = caf\\u00e9 \\u20ac\n"
        "long = one, \\\n"
        "       two, \\\n"
        "       three\n"
        "after = 1\n"
        "odd = ends with backslash\\\\\n")
    assert props["key with spaces"] == "v"
    assert props["key:colon=eq"] == "v2"
    assert props["tabs"] == "a\tb\nc\\d"
    assert props["unicode"] == "café €"
    assert props["long"] == "one, two, three"
    assert props["odd"] == "ends with backslash\\"
    # Line numbers count the continuation lines.
    assert props.lines["long"] == 5
    assert props.lines["after"] == 8


def test_files_are_iso_8859_1(tmp_path):
    path = tmp_path / "latin.properties"
    path.write_bytes(b"name=Jos\xe9\nescaped=Jos\\u00e9\n")
    props = load_properties(path)
    assert props["name"] == props["escaped"] == "José"


def test_a_key_set_twice_keeps_the_last_value():
    props = read_properties("k=first\nk=second\n")
    assert props["k"] == "second" and props.lines["k"] == 2


def test_line_endings_of_every_kind():
    props = read_properties("a=1\r\nb=2\rc=3\nd=4")
    assert props.flatten() == {"a": "1", "b": "2", "c": "3", "d": "4"}
    assert props.lines == {"a": 1, "b": 2, "c": 3, "d": 4}


def test_a_malformed_unicode_escape_names_the_line():
    with pytest.raises(PropsError) as err:
        read_properties("ok=1\nbad=\\u12g4\n", "x.job")
    assert "x.job: line 2:" in str(err.value) and "\\u" in str(err.value)


def test_dump_writes_what_properties_store_writes(tmp_path):
    values = {"command": '"/opt/my python/bin/python" -m azkaban_jobtype', "unicode": "café €",
              "key with spaces": "a=b:c", "leading": "  spaced", "path": "C:\\dir"}
    path = tmp_path / "out.properties"
    dump_properties(values, path, comment="header")
    data = path.read_bytes()
    assert data.isascii()
    text = data.decode("ascii")
    assert text.startswith("#header\n#")  # the comment, then Properties.store's timestamp line
    assert "caf\\u00e9 \\u20ac" in text
    assert load_properties(path).flatten() == values


# --------------------------------------------------------------------------------------------------
# Layers


def test_layers_look_up_top_down_and_remember_origins():
    bottom = read_properties("a=bottom\nb=bottom\n", "shared.properties")
    top = read_properties("b=top\nc=top\n", "job.job")
    top.parent = bottom
    assert top.flatten() == {"b": "top", "c": "top", "a": "bottom"}
    assert top.origin("a") == Origin("shared.properties", 1)
    assert top.origin("b") == Origin("job.job", 1)
    assert str(top.origin("c")) == "job.job:2"
    assert top.origin("missing") is None
    assert "a" in top and "missing" not in top and len(top) == 3


def test_over_copies_a_chain_onto_a_new_base():
    base = Props({"x": "base"}, source="base")
    chain = Props({"x": "top"}, source="top", parent=Props({"y": "mid"}, source="mid"))
    moved = chain.over(base)
    assert [layer.source for layer in moved.layers()] == ["top", "mid", "base"]
    assert [layer.source for layer in chain.layers()] == ["top", "mid"]  # unchanged


# --------------------------------------------------------------------------------------------------
# Directory inheritance


def test_properties_chain_in_name_order_under_the_parent_directory(tmp_path):
    (tmp_path / "b.properties").write_text("k=b\nonly_b=1\n")
    (tmp_path / "a.properties").write_text("k=a\nonly_a=1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "z.properties").write_text("k=sub\n")
    (tmp_path / "other").mkdir()
    chains = directory_chains(tmp_path)
    root, sub, other = chains[tmp_path.relative_to(tmp_path)], chains[(tmp_path / "sub").relative_to(tmp_path)], \
        chains[(tmp_path / "other").relative_to(tmp_path)]
    # a later file overrides an earlier one
    assert root["k"] == "b" and root.flatten() == {"k": "b", "only_b": "1", "only_a": "1"}
    assert [layer.source for layer in root.layers()] == ["b.properties", "a.properties"]
    # a directory's chain hangs under its parent's
    assert sub["k"] == "sub" and sub["only_a"] == "1"
    assert [layer.source for layer in sub.layers()] == ["sub/z.properties", "b.properties", "a.properties"]
    # a directory without .properties inherits its parent's chain as it is
    assert other is root


def test_execpropstest_inheritance_as_azkaban_resolves_it(fixtures_dir):
    project = fixtures_dir / "azkaban-execpropstest"
    chains = directory_chains(project)
    job2 = load_properties(project / "subdir" / "job2.job", parent=chains[(project / "subdir").relative_to(project)],
                           source="subdir/job2.job")
    seen = resolve(job2)
    assert seen["props1"] == "shared1" and job2.origin("props1").source == "shared.properties"
    assert seen["props3"] == "moo3" and job2.origin("props3").source == "moo.properties"
    assert seen["props4"] == "shared4" and job2.origin("props4").source == "subdir/shared.properties"
    assert seen["props8"] == "shared8" and job2.origin("props8").source == "subdir/shared.properties"
    assert seen["props2"] == "job2" and seen["props7"] == "job7"
    assert job2.origin("props2").source == "subdir/job2.job"
    # root: shared.properties comes after moo.properties, so it overrides it
    root = chains[project.relative_to(project)]
    assert [layer.source for layer in root.layers()] == ["shared.properties", "moo.properties"]


# --------------------------------------------------------------------------------------------------
# Substitution


def test_substitution_is_recursive():
    props = read_properties("HDFSRoot=/tmp\nuser=azkaban\nbase=${HDFSRoot}/${user}\n"
                            "in=${base}/in\nout=${base}/out-${in}\n")
    assert resolve(props) == {"HDFSRoot": "/tmp", "user": "azkaban", "base": "/tmp/azkaban",
                              "in": "/tmp/azkaban/in", "out": "/tmp/azkaban/out-/tmp/azkaban/in"}


def test_substitution_sees_every_layer(fixtures_dir):
    java_wc = fixtures_dir / "azkaban-examples" / "java-wc"
    shared = load_properties(java_wc / "wc.properties", source="wc.properties")
    job = load_properties(java_wc / "wordcount-java.job", parent=shared, source="wordcount-java.job")
    runtime = Props({"hadoop.home": "/opt/hadoop"}, source="plugin", parent=None)
    shared.parent = runtime
    resolved = resolve(job)
    assert resolved["input.path"] == "/tmp/azkaban/wordcountjavain"
    assert resolved["main.args"] == "/tmp/azkaban/wordcountjavain /tmp/azkaban/wordcountjavaout"
    assert resolved["classpath"] == "./lib/*,/opt/hadoop/lib/*"


def test_an_undefined_variable_names_the_variable_the_key_and_the_file():
    props = read_properties("ok=1\ninput.path=${param.inData}/x\n", "wc/wordcount.job")
    with pytest.raises(PropsError) as err:
        resolve(props)
    [issue] = err.value.issues
    assert issue.key == "input.path" and issue.source == "wc/wordcount.job:2"
    assert "${param.inData} is not defined" in str(err.value)
    assert str(err.value).startswith("wc/wordcount.job:2: input.path:")


def test_an_undefined_variable_deeper_down_shows_the_chain():
    props = read_properties("a=${b}\nb=${c}\n", "j.job")
    with pytest.raises(PropsError) as err:
        resolve(props, keys=["a"])
    assert "${c} is not defined (via a -> b -> c)" in str(err.value)


def test_cycles_are_detected_and_every_problem_is_reported():
    props = read_properties("a=${b}\nb=${c}\nc=x${a}\nself=${self}\nfine=${d}\nd=1\nmissing=${nope}\n", "cyc.job")
    with pytest.raises(PropsError) as err:
        resolve(props)
    messages = {issue.key: issue.message for issue in err.value.issues}
    assert messages["a"] == "circular substitution: a -> b -> c -> a"
    assert messages["self"] == "circular substitution: self -> self"
    assert set(messages) == {"a", "b", "c", "self", "missing"}
    assert err.value.issues[0].source == "cyc.job:1"


def test_references_that_are_not_property_names_are_left_alone():
    # Flow conditions use ${job:param}; Azkaban's substitution only matches [a-zA-Z_.0-9]+ names.
    props = read_properties("cond=${uploadJob:param1} == \"foo\"\nexpr=$(1+2)\nempty=${}\n")
    assert resolve(props) == {"cond": '${uploadJob:param1} == "foo"', "expr": "$(1+2)", "empty": "${}"}

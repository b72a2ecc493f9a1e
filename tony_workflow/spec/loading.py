"""Loading a job: files, templates, overrides and the site configuration, ending in one JobSpec.

:func:`load_spec` reads one document (a file or a text, rendered as a Jinja2 template) and
applies ``--conf`` overrides. :func:`load_job` is what every front end calls: a file, a text or an
already parsed mapping, with overrides, the client arguments (``executes``, ``src_dir``, ...), the
site's ``$TONY_CONF_DIR/tony-site.xml`` and relative paths resolved against one base directory.
Neither validates: :meth:`~.model.JobSpec.validate` and the client do.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .document import parse_json, parse_yaml, spec_from_mapping, xml_conf
from .errors import SpecError, SpecIssue, error
from .keys import CLIENT_DEFAULTS, LOCAL_CLUSTER_DEFAULTS
from .model import JobSpec
from .render import render_template
from .resources import absolute
from .table import TONY_DEFAULTS

__all__ = ["is_text", "load_job", "load_spec", "load_tony_xml", "read_text", "site_conf", "site_path"]


#: The largest spec read: a job's description is a few kilobytes; a file of megabytes is a mistake
#: (or an attack on the reader), refused before it is read.
MAX_SPEC_BYTES = 1024 * 1024


def read_text(path: str | os.PathLike[str]) -> str:
    """A spec file's text; SpecError naming the file when it cannot be read as UTF-8 text, or is
    larger than :data:`MAX_SPEC_BYTES`."""
    try:
        size = Path(path).stat().st_size
        if size > MAX_SPEC_BYTES and Path(path).is_file():
            raise error("spec", str(path), f"is {size} bytes; a spec file may have at most {MAX_SPEC_BYTES}")
        return Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise error("spec", str(path), "no such file") from None
    except IsADirectoryError:
        raise error("spec", str(path), "is a directory, not a spec file") from None
    except UnicodeDecodeError as exc:
        raise error("spec", str(path), f"is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise error("spec", str(path), f"cannot be read: {exc.strerror}") from None


def is_text(path_or_text: str | os.PathLike[str]) -> bool:
    """Whether a string argument is a spec's text rather than a path (see :func:`load_spec`)."""
    if isinstance(path_or_text, os.PathLike):
        return False
    return "\n" in path_or_text or path_or_text.lstrip("\ufeff \t\r").startswith(("<", "{"))


def load_tony_xml(path_or_text: str | os.PathLike[str], *, source: str | None = None) -> dict[str, str]:
    """The properties of a Hadoop ``<configuration>`` XML file or text, in file order.

    Like Hadoop's Configuration: a property without a name is skipped, a name without a value reads
    as "", and ``<final>``, ``<source>`` and ``<description>`` are ignored; names and values may also
    be given as attributes. Text (anything starting with ``<``) is parsed as is; anything else is a
    path. ``source`` names the origin in messages (default: the path). Malformed XML raises SpecError.
    """
    if is_text(path_or_text):
        return xml_conf(str(path_or_text), source)
    return xml_conf(read_text(path_or_text), source or str(path_or_text))



_FORMATS = {"yaml": "yaml", "yml": "yaml", "json": "json", "xml": "xml"}


def format_of(fmt: str | None, path: str | None, text: str, source: str | None) -> str:
    """"yaml", "json" or "xml": ``fmt`` when given, else from the file's extension, else from the text."""
    if fmt is not None:
        if fmt.lower() not in _FORMATS:
            raise error("fmt", fmt, "unknown spec format; allowed: yaml, json, xml", source)
        return _FORMATS[fmt.lower()]
    if path:
        name = Path(path).name.lower().removesuffix(".j2")
        suffix = name.rpartition(".")[2] if "." in name else ""
        if suffix in _FORMATS:
            return _FORMATS[suffix]
    return "xml" if text.lstrip("\ufeff \t\r\n").startswith("<") else "yaml"


def load_spec(path_or_text: str | os.PathLike[str], *, overrides: Iterable[str] | Mapping[str, object] = (),
              variables: Mapping[str, object] | None = None, fmt: str | None = None,
              overrides_origin: str = "--conf") -> JobSpec:
    """Load a job spec from a file or a text.

    A PathLike, or a string without a newline that does not start with ``<`` or ``{``, is a path;
    any other string is the spec itself. The text is rendered as a Jinja2 template with
    ``variables`` (see :func:`~tony_workflow.spec.render.render_template`), parsed as ``fmt`` ("yaml",
    "json" or "xml"; by default guessed from the file extension, ``.yaml``, ``.yml``, ``.json`` or
    ``.xml`` with an optional ``.j2``, else from the text: ``<`` means XML, anything else YAML),
    laid over TONY_DEFAULTS, and ``overrides`` are applied as ``--conf`` pairs (an issue with one
    names it with ``overrides_origin``: ``--conf`` on the command line, an operator's ``conf``).

    The result is not validated; call :meth:`JobSpec.validate`. A missing file, a syntax error or a
    document that is not a mapping raises SpecError naming the source (and the line when known).
    """
    if is_text(path_or_text) and len(str(path_or_text)) > MAX_SPEC_BYTES:
        raise error("spec", None, f"the spec text has {len(str(path_or_text))} characters; at most {MAX_SPEC_BYTES}")
    if is_text(path_or_text):
        path, source, text = None, None, str(path_or_text)
    else:
        path = source = str(path_or_text)
        text = read_text(path_or_text)
    text = render_template(text, variables, source=source)
    kind = format_of(fmt, path, text, source)
    if kind == "xml":
        spec = JobSpec(conf={**TONY_DEFAULTS, **xml_conf(text, source, strict=True)}, source=source)
    else:
        data = parse_json(text, source) if kind == "json" else parse_yaml(text, source)
        if data is None:
            raise error("document", None, "the spec is empty; expected a mapping of fields", source)
        try:
            spec = spec_from_mapping(data, source=source)
        except SpecError as exc:
            if exc.spec is None or not overrides:
                raise
            raise SpecError(exc.issues, spec=_overridden(exc.spec, overrides, overrides_origin, exc.issues)) from None
    if overrides:
        spec = spec.with_overrides(overrides, overrides_origin)
    return spec


def _overridden(spec: JobSpec, overrides: Iterable[str] | Mapping[str, object], origin: str,
                issues: list[SpecIssue]) -> JobSpec:
    """``spec`` with ``overrides`` applied where they can be; their own problems join ``issues``."""
    try:
        return spec.with_overrides(overrides, origin)
    except SpecError as exc:
        issues.extend(exc.issues)
        return spec


def site_path(conf_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """``tony-site.xml`` in ``conf_dir`` (default ``$TONY_CONF_DIR``), or None when there is none."""
    conf_dir = conf_dir or os.environ.get("TONY_CONF_DIR")
    path = Path(conf_dir) / "tony-site.xml" if conf_dir else None
    return path if path is not None and path.is_file() else None


def site_conf(conf_dir: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """``$TONY_CONF_DIR/tony-site.xml``'s properties, or nothing when there is none."""
    path = site_path(conf_dir)
    return load_tony_xml(str(path)) if path else {}


def located_paths(key: str) -> bool:
    """Whether ``key`` holds local paths that mean a place relative to the spec (TonY's resources,
    an input's paths)."""
    return key.endswith(".resources") or (key.startswith("tony.data.") and key.endswith(".path"))


def load_job(spec: str | os.PathLike[str] | Mapping[str, object], *,
             conf: Iterable[str] | Mapping[str, object] = (), variables: Mapping[str, object] | None = None,
             base_dir: str | os.PathLike[str] | None = None, conf_origin: str = "--conf", **fields: object) -> JobSpec:
    """The job a front end submits.

    ``spec`` is a file, a text (as :func:`load_spec` tells them apart; either may be a Jinja2
    template rendered with ``variables``) or a mapping in the YAML schema (taken as it is: it is
    data already, not a template). ``conf`` overrides are applied (``key=value`` strings or a
    mapping), then fields such as ``executes`` or ``src_dir`` (None leaves the spec's value), then
    ``$TONY_CONF_DIR/tony-site.xml`` (last, as TonY does). A relative ``src_dir`` or ``python_venv``
    written in a spec file is resolved against the file's directory; any other (a field, or from a
    text or a mapping) against ``base_dir``, by default the working directory. ``conf_origin``
    names the overrides in what is said of them (``--conf``, or an operator's ``conf``).
    Does not validate; :meth:`tony_workflow.client.TonyClient.submit` does.
    """
    problems: list[SpecIssue] = []  # found while loading, where the rest could still be read
    try:
        if isinstance(spec, Mapping):
            loaded = spec_from_mapping(spec)
            if conf:
                loaded = loaded.with_overrides(conf, conf_origin)
        else:
            loaded = load_spec(spec, overrides=conf, variables=variables, overrides_origin=conf_origin)
    except SpecError as exc:
        if exc.spec is None:
            raise
        problems = exc.issues
        loaded = exc.spec if not isinstance(spec, Mapping) or not conf else _overridden(exc.spec, conf, conf_origin,
                                                                                       problems)
    try:
        resolved = _resolved(loaded, conf, base_dir, fields)
    except SpecError as exc:
        if not problems:
            raise
        raise SpecError([*problems, *exc.issues]) from None
    if problems:
        raise SpecError(problems, spec=resolved)
    return resolved


def _resolved(loaded: JobSpec, conf: Iterable[str] | Mapping[str, object], base_dir: str | os.PathLike[str] | None,
              fields: Mapping[str, object]) -> JobSpec:
    """``loaded`` with the site's settings, ``fields`` and its local paths made absolute (see
    :func:`load_job`)."""
    # The site's job settings apply to every job; its tony.local.* keys are the local cluster's
    # own (spec.site reads them) and its client settings (tony.client.*, the history server's
    # address) the tony command's, not the job's.
    site = {k: v for k, v in site_conf().items()
            if k not in LOCAL_CLUSTER_DEFAULTS and k not in CLIENT_DEFAULTS
            and not k.startswith(("tony.local.", "tony.client."))}
    if site:
        loaded = dataclasses.replace(loaded, conf={**loaded.conf, **site})
    # JobSpec's fields by name; dataclasses.replace and JobSpec's own checks judge the values.
    updates: dict[str, Any] = {k: v for k, v in fields.items() if v is not None}
    file_dir = (Path(loaded.source).resolve().parent
                if loaded.source and Path(loaded.source).is_file() else None)
    for key in ("src_dir", "python_venv"):
        given = key in updates
        value = updates.get(key, getattr(loaded, key))
        if not value or "://" in str(value):  # a URI (TonY's hdfs:// python_venv) is the cluster's to find
            continue
        path = Path(str(value))
        if not path.is_absolute():
            # A path written in a spec file means a place beside that file; any other relative path
            # (a field, or a spec given as text or a mapping) is relative to base_dir.
            path = (file_dir if file_dir is not None and not given else Path(base_dir or ".")) / path
        updates[key] = str(path.resolve())
    # TonY's resources and the inputs' paths: local paths written in a spec file start beside it,
    # others at base_dir.
    overridden = set(conf) if isinstance(conf, Mapping) else {str(c).split("=", 1)[0].strip() for c in conf}
    located = {key: absolute(value, file_dir if file_dir is not None and key not in overridden
                             else Path(base_dir or "."))
               for key, value in loaded.conf.items() if located_paths(key) and value}
    if located:
        updates["conf"] = {**loaded.conf, **located}
    return dataclasses.replace(loaded, **updates) if updates else loaded

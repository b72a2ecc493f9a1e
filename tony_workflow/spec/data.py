"""A job's named inputs, as its configuration declares them, and their row filters (no file is
opened here: :mod:`tony_workflow.data.manifest` plans an input).

An input ``train`` is the keys ``tony.data.train.path`` (one or more paths, globs or directories,
comma-separated; ``data.train.path`` in YAML, where a list is fine too), ``.format`` (parquet, orc,
avro or tfrecord; empty: from the files' extension), ``.columns`` (the columns read; empty: all),
``.filter`` (a row filter, :func:`parse_filter`) and ``.remainder`` (what an epoch does with the
rows that do not fill a last step for every rank: ``drop``, ``wrap`` or ``partial``). The client
plans the inputs at submission and hands every task the plan as ``tony-data.json``
(:data:`MANIFEST_NAME`), which ``tony.data.manifest`` names on the submitting machine and
:data:`MANIFEST_ENV` in the task's environment.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DATA_FIELDS", "DATA_KEY", "DATA_NAME", "FORMAT_NAMES", "MANIFEST_ENV", "MANIFEST_KEY", "MANIFEST_NAME", "REMAINDERS",
           "DataInput", "Filter", "inputs_of", "parse_filter"]

#: What a segment does with the rows that do not fill a last step for every rank.
REMAINDERS: tuple[str, ...] = ("drop", "wrap", "partial")
#: The key the client sets to the job's plan of its inputs (a file of the submitting machine).
MANIFEST_KEY = "tony.data.manifest"
#: The plan's name in a container's directory, and the variable that names it to the task.
MANIFEST_NAME = "tony-data.json"
MANIFEST_ENV = "TONY_DATA_MANIFEST"

#: ``tony.data.<input>.<field>``, and an input's name
DATA_KEY = re.compile(r"^tony\.data\.([A-Za-z][A-Za-z0-9_-]*)\.([a-z-]+)$")
DATA_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
#: Each field of an input, and what it means (the key reference's words).
DATA_FIELDS: dict[str, str] = {
    "path": "the input's files: paths, globs or directories (read recursively), comma-separated; on HDFS "
            "(`hdfs://`, `hdfs:///` for fs.defaultFS, `webhdfs://`) or, on the embedded cluster, local",
    "format": "parquet, orc, avro or tfrecord; empty: from the files' extension",
    "columns": "the columns read, comma-separated; empty: every column",
    "filter": "a row filter, as `label < 5 and day == \"2026-11-30\"` (comparisons, in, and, or, not); "
              "rows that do not match are never handed out, and row groups whose statistics rule them out "
              "are not read",
    "remainder": "the rows of an epoch that do not fill a last step for every rank: drop (left unread), wrap "
                 "(taken again from the epoch's start) or partial (a last, smaller step)",
}
#: The formats an input may name.
FORMAT_NAMES = ("parquet", "orc", "avro", "tfrecord")


@dataclass(frozen=True)
class Filter:
    """A row filter: its text as written, and the columns it reads."""

    text: str
    columns: tuple[str, ...]

    def expression(self) -> Any:
        """The filter as a pyarrow compute expression."""
        return _expression(ast.parse(self.text, mode="eval").body)


_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def _literal(node: ast.expr) -> Any:
    value = ast.literal_eval(node)
    if isinstance(value, (list, tuple, set)):
        if not all(isinstance(v, (int, float, str, bool)) for v in value):
            raise ValueError("a list in a filter holds numbers, strings or booleans only")
        return list(value)
    if value is not None and not isinstance(value, (int, float, str, bool)):
        raise ValueError(f"{value!r} is not a number, a string or a boolean")
    return value


def _columns(node: ast.expr, out: list[str]) -> None:
    """Checks that ``node`` is a filter this module can run, gathering the column names."""
    if isinstance(node, ast.BoolOp):
        for value in node.values:
            _columns(value, out)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        _columns(node.operand, out)
    elif isinstance(node, ast.Name):
        out.append(node.id)
    elif isinstance(node, ast.Compare):
        if len(node.ops) != 1:
            raise ValueError("compare one column with one value at a time (a < x and x < b, not a < x < b)")
        left, right = node.left, node.comparators[0]
        if not isinstance(left, ast.Name):
            left, right = right, left
        if not isinstance(left, ast.Name):
            raise ValueError("a comparison names a column on one side")  # noqa: TRY004 - the filter is text a user wrote
        op = type(node.ops[0])
        if op in (ast.In, ast.NotIn):
            if not isinstance(node.left, ast.Name) or not isinstance(_literal(right), list):
                raise ValueError("'in' takes a column and a list: day in ('a', 'b')")
        elif op in (ast.Is, ast.IsNot):
            if _literal(right) is not None:
                raise ValueError("'is' compares with None only")
        elif op not in _OPS:
            raise ValueError(f"{type(node.ops[0]).__name__} is not a comparison a filter can make")
        _literal(right)
        out.append(left.id)
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        pass
    else:
        raise ValueError(f"{ast.unparse(node)!r} is not a column, a comparison, and, or or not")  # noqa: TRY004


def _expression(node: ast.expr) -> Any:
    import pyarrow.compute as pc

    if isinstance(node, ast.BoolOp):
        parts = [_expression(v) for v in node.values]
        result = parts[0]
        for part in parts[1:]:
            result = (result & part) if isinstance(node.op, ast.And) else (result | part)
        return result
    if isinstance(node, ast.UnaryOp):
        return ~_expression(node.operand)
    if isinstance(node, ast.Name):
        return pc.field(node.id)
    if isinstance(node, ast.Constant):
        return pc.scalar(node.value)
    assert isinstance(node, ast.Compare)
    left, right, op = node.left, node.comparators[0], type(node.ops[0])
    flipped = not isinstance(left, ast.Name)
    if flipped:
        left, right = right, left
    assert isinstance(left, ast.Name)
    column, value = pc.field(left.id), _literal(right)
    if op is ast.In:
        return column.isin(value)
    if op is ast.NotIn:
        return ~column.isin(value)
    if op is ast.Is:
        return column.is_null()
    if op is ast.IsNot:
        return ~column.is_null()
    symbol = _OPS[op]
    if flipped:
        symbol = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(symbol, symbol)
    return {"==": column == value, "!=": column != value, "<": column < value, "<=": column <= value,
            ">": column > value, ">=": column >= value}[symbol]


def parse_filter(text: str) -> Filter:
    """A row filter from its text; ValueError saying what is wrong."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"is not a filter ({e.msg} at column {e.offset})") from None
    columns: list[str] = []
    _columns(tree.body, columns)
    return Filter(text.strip(), tuple(dict.fromkeys(columns)))


@dataclass(frozen=True)
class DataInput:
    """One named input of a job."""

    name: str
    paths: tuple[str, ...]
    format: str | None = None
    columns: tuple[str, ...] | None = None
    filter: Filter | None = None
    remainder: str = "drop"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "paths": list(self.paths), "format": self.format,
                "columns": list(self.columns) if self.columns is not None else None,
                "filter": self.filter.text if self.filter else None, "remainder": self.remainder}


def _list(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def key_problem(key: str) -> str | None:
    """Why ``key`` (``tony.data.…``) is not an input's key, or None when it is one."""
    if key == MANIFEST_KEY:
        return None
    match = DATA_KEY.match(key)
    if not match:
        return ("is not an input's key: they are tony.data.<input>.<field>, the input named with letters, digits, "
                "- and _")
    if match.group(2) not in DATA_FIELDS:
        from difflib import get_close_matches
        close = get_close_matches(match.group(2), list(DATA_FIELDS), n=1)
        hint = f" (did you mean tony.data.{match.group(1)}.{close[0]}?)" if close else ""
        return f"is not a field of an input{hint}; an input's fields are {', '.join(DATA_FIELDS)}"
    return None


def _input(name: str, given: dict[str, str], problems: list[tuple[str, str, str]]) -> DataInput | None:
    """One input from its fields, every problem of it added to ``problems``."""
    from difflib import get_close_matches
    found = len(problems)
    paths = _list(given.get("path", ""))
    if not paths:
        problems.append((f"tony.data.{name}.path", given.get("path", ""),
                         f"input {name!r} needs a path (a file, a directory or a glob)"))
    fmt = (given.get("format") or "").strip().lower() or None
    if fmt is not None and fmt not in FORMAT_NAMES:
        close = get_close_matches(fmt, FORMAT_NAMES, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        problems.append((f"tony.data.{name}.format", given["format"],
                         f"is not a format this reader knows: {', '.join(FORMAT_NAMES)}{hint}"))
    columns = _list(given["columns"]) if given.get("columns", "").strip() else None
    flt = None
    if given.get("filter", "").strip():
        try:
            flt = parse_filter(given["filter"])
        except ValueError as e:
            problems.append((f"tony.data.{name}.filter", given["filter"], str(e)))
    remainder = (given.get("remainder") or "drop").strip().lower()
    if remainder not in REMAINDERS:
        close = get_close_matches(remainder, REMAINDERS, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        problems.append((f"tony.data.{name}.remainder", given["remainder"],
                         f"must be one of {', '.join(REMAINDERS)}{hint}"))
    if len(problems) > found:
        return None
    return DataInput(name, paths, fmt, columns, flt, remainder)


def inputs_of(conf: Mapping[str, str]) -> tuple[dict[str, DataInput], list[tuple[str, str, str]]]:
    """The inputs ``conf`` declares, and its problems as (key, value, what is wrong): every one."""
    fields: dict[str, dict[str, str]] = {}
    problems: list[tuple[str, str, str]] = []
    for key, value in conf.items():
        if not key.startswith("tony.data."):
            continue
        if key_problem(key) is not None or key == MANIFEST_KEY:
            continue  # the unknown keys' check names it
        match = DATA_KEY.match(key)
        assert match is not None
        name, field = match.groups()
        fields.setdefault(name, {})[field] = value or ""
    inputs: dict[str, DataInput] = {}
    for name, given in sorted(fields.items()):
        inp = _input(name, given, problems)
        if inp is not None:
            inputs[name] = inp
    return inputs, problems

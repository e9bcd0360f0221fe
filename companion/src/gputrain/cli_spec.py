"""What the command line offers, read from the package's source without importing torch.

``gputrain`` answers a typo in its arguments at once: its parser is built from
the configuration dataclasses (``TrainConfig``, ``LadderConfig``) and the
tables of names (optimizers, schedules, precision recipes, ...), and importing
the modules that define them would import torch first, seconds before any
answer.  This module reads those definitions with :mod:`ast` instead: a
field's name, type, default, the comment after it (its help) and the comment
line that opens its section (its ``--help`` group); a table's keys.  Where a
definition is not a plain literal, it falls back to importing the module, so
the parser is always right and only the answer is slower.
``tests/test_cli.py`` checks that everything here equals the imported
objects.  Nothing in it imports torch.
"""

from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

PACKAGE = Path(__file__).resolve().parent
_KINDS = {"int": int, "float": float, "str": str, "bool": bool}


class NotLiteral(Exception):
    """A definition that is not a plain literal: read it by importing its module."""


@dataclass(frozen=True)
class Field:
    """One configuration field as a command-line flag sees it."""

    name: str
    kind: type  # int, float, str or bool
    default: object
    help: str  # the comment after the field
    section: Optional[str]  # the comment line above the field's group, e.g. 'data'


@lru_cache(maxsize=None)
def _source(module: str) -> tuple[ast.Module, dict[int, str], dict[int, str]]:
    """A module's tree, its trailing comments by line and its comment-only lines by line."""
    path = PACKAGE.joinpath(*module.split(".")[1:])
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")  # a package: its __init__
    text = path.read_text(encoding="utf-8")
    trailing, alone = {}, {}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            line = tok.start[0]
            comment = tok.string.lstrip("#").strip()
            (alone if not tok.line[: tok.start[1]].strip() else trailing)[line] = comment
    return ast.parse(text), trailing, alone


def _home(module: str, name: str) -> str:
    """The module that defines ``name``: ``module`` itself, or the submodule a package re-exports it from.

    ``gputrain.moe`` is a package whose ``__init__`` says ``from .config import ROUTERS``:
    the table is read in ``gputrain.moe.config``, where its source is.
    """
    for node in _source(module)[0].body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            if any((a.asname or a.name) == name for a in node.names):
                return _home(f"{module}.{node.module}", name)
    return module


def _top_level(tree: ast.Module, name: str) -> ast.AST:
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and any(getattr(t, "id", None) == name for t in targets):
            return node.value
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise NotLiteral(name)


def _constant(node: ast.AST) -> object:
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise NotLiteral(ast.dump(node)) from None


def _keys(node: ast.AST) -> list[str]:
    """Names a table offers: a dict's keys, a tuple's items, or ``{r.name: r for r in (Row("x", ...), ...)}``."""
    if isinstance(node, ast.Dict):
        return [_constant(k) for k in node.keys]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [_constant(e) for e in node.elts]
    if (
        isinstance(node, ast.DictComp)
        and isinstance(node.key, ast.Attribute)
        and node.key.attr == "name"
        and isinstance(node.generators[0].iter, (ast.Tuple, ast.List))
    ):
        names = []
        for row in node.generators[0].iter.elts:
            by_keyword = [k.value for k in getattr(row, "keywords", []) if k.arg == "name"]
            if not isinstance(row, ast.Call) or not (row.args or by_keyword):
                raise NotLiteral(ast.dump(row))
            names.append(_constant(by_keyword[0] if by_keyword else row.args[0]))
        return names
    raise NotLiteral(ast.dump(node))


def table_names(module: str, table: str) -> list[str]:
    """The names ``module.table`` offers (its keys), in order; e.g. ``("gputrain.moe", "ROUTERS")``."""
    try:
        return static_names(module, table)
    except NotLiteral:
        return list(getattr(importlib.import_module(module), table))


def static_names(module: str, table: str) -> list[str]:
    """:func:`table_names` from the source alone; ``NotLiteral`` where it would have to import."""
    return _keys(_top_level(_source(_home(module, table))[0], table))


def table_abouts(module: str, table: str) -> dict[str, str]:
    """What each name of ``module.table`` means, where the table says (``{}`` for a bare list of names).

    A table's value is its text, or a row whose last text argument (or ``about=``) is; e.g. ``OPTIMIZERS``.
    """
    try:
        return static_abouts(module, table)
    except NotLiteral:
        rows = getattr(importlib.import_module(module), table)
        if not isinstance(rows, dict):
            return {}
        return {k: v if isinstance(v, str) else getattr(v, "about", "") for k, v in rows.items()}


def static_abouts(module: str, table: str) -> dict[str, str]:
    """:func:`table_abouts` from the source alone; ``NotLiteral`` where it would have to import."""
    node = _top_level(_source(_home(module, table))[0], table)
    if isinstance(node, (ast.Tuple, ast.List)):
        return {}
    if not isinstance(node, ast.Dict):
        raise NotLiteral(ast.dump(node))
    out = {}
    for key, value in zip(node.keys, node.values):
        if isinstance(value, ast.Call):
            texts = [k.value for k in value.keywords if k.arg == "about"] or value.args[-1:]
            value = texts[0] if texts else value
        text = _constant(value)
        if not isinstance(text, str):
            raise NotLiteral(ast.dump(value))
        out[_constant(key)] = text
    return out


def config_fields(module: str, cls: str) -> list[Field]:
    """The fields of the dataclass ``module.cls`` with their types, defaults, help and sections."""
    try:
        return static_fields(module, cls)
    except NotLiteral:
        return _imported_fields(module, cls)


def static_fields(module: str, cls: str) -> list[Field]:
    """:func:`config_fields` from the source alone; ``NotLiteral`` where it would have to import."""
    tree, trailing, alone = _source(_home(module, cls))
    node = _top_level(tree, cls)
    out, section = [], None
    for item in node.body:
        if not isinstance(item, ast.AnnAssign):
            continue
        section = alone.get(item.lineno - 1, section)  # a comment line right above opens a section
        kind = _KINDS.get(getattr(item.annotation, "id", None))
        if kind is None or item.value is None:
            raise NotLiteral(item.target.id)
        out.append(Field(item.target.id, kind, _constant(item.value), trailing.get(item.lineno, ""), section))
    return out


def _imported_fields(module: str, cls: str) -> list[Field]:
    import dataclasses
    import inspect

    obj = getattr(importlib.import_module(module), cls)
    helps = dict(re.findall(r"^\s+(\w+):[^#\n]*#\s*(.+)$", inspect.getsource(obj), re.M))
    return [Field(f.name, type(f.default), f.default, helps.get(f.name, ""), None) for f in dataclasses.fields(obj)]

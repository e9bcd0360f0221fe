"""Sphinx extension: ``$...$`` and ``$$...$$`` math in gputrain's docstrings, rendered on the API page.

The package's docstrings write math the way the chapters do (MyST dollar
math), but autodoc reads docstrings as reStructuredText, where a dollar sign
is just a character.  Before autodoc parses a docstring this hook rewrites
``$$...$$`` (one or more lines) into a ``.. math::`` block and ``$...$`` into
the ``:math:`` role, so the API appendix (``book/api.md``) shows typeset
formulas instead of dollar signs.  Text inside ````literals```` is left alone.
"""

from __future__ import annotations

import re

_DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.S)
# a lone $...$ on one line, not part of $$ and not preceded by a backslash
_INLINE = re.compile(r"(?<![\\$])\$(?!\$)([^$\n]+?)(?<![\\\s])\$(?!\$)")
_LITERAL = re.compile(r"``.+?``")


def _inline(line: str) -> str:
    """``$x$`` -> ``:math:`x``` outside double-backtick literals."""
    out, last = [], 0
    for lit in _LITERAL.finditer(line):
        out.append(_INLINE.sub(lambda m: f":math:`{m.group(1)}`", line[last : lit.start()]))
        out.append(lit.group(0))
        last = lit.end()
    out.append(_INLINE.sub(lambda m: f":math:`{m.group(1)}`", line[last:]))
    return "".join(out)


def convert(lines: list[str]) -> list[str]:
    """The docstring's lines with dollar math turned into reStructuredText math."""
    text = "\n".join(lines)
    if "$" not in text:
        return lines
    pieces, last = [], 0
    for m in _DISPLAY.finditer(text):
        pieces.append(text[last : m.start()])
        before = text[: m.start()].rsplit("\n", 1)[-1]
        indent = " " * (len(before) - len(before.lstrip()))
        body = [b.strip() for b in m.group(1).strip().splitlines() if b.strip()]
        # a display formula is its own block: blank lines around it, body indented under the directive
        pieces.append("\n\n" + indent + ".. math::\n\n" + "\n".join(indent + "   " + b for b in body) + "\n\n")
        last = m.end()
    pieces.append(text[last:])
    out: list[str] = []
    math_indent = None  # indentation of the ".. math::" line whose body we are in
    for line in "".join(pieces).split("\n"):
        indent = len(line) - len(line.lstrip())
        if line.strip() == ".. math::":
            math_indent = indent
        elif math_indent is not None and line.strip() and indent <= math_indent:
            math_indent = None  # the first line back at the directive's level ends the formula
        out.append(line if math_indent is not None else _inline(line))
    return out


def _process(app, what, name, obj, options, lines: list[str]) -> None:
    if name.startswith("gputrain"):
        lines[:] = convert(lines)


def setup(app):
    app.connect("autodoc-process-docstring", _process)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

"""Sphinx extension: a reference to a name where readers import it finds the name where it is documented.

Chapters and docstrings write ``gputrain.optim.AdamW`` and ``gputrain.model.GPT``,
the paths a reader imports.  Once a module becomes a package (``optim/``,
``model/``, ``memory/``, ...), the API pages document each name under the
module that defines it, ``gputrain.optim.adaptive.AdamW``, and the written
reference finds nothing: Sphinx prints it as plain text, without its link.
When a ``gputrain.`` reference is missing, this hook imports the package,
asks the object where it lives (its ``__module__``), and resolves the
reference again under that name.
"""

from __future__ import annotations

import importlib


def documented_name(target: str) -> str | None:
    """``gputrain.optim.AdamW`` -> ``gputrain.optim.adaptive.AdamW`` (a method or attribute after it kept)."""
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):  # the longest prefix that is a module
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        home = getattr(getattr(module, parts[cut], None), "__module__", None)
        if isinstance(home, str) and home.startswith("gputrain.") and home != module.__name__:
            return ".".join([home, *parts[cut:]])
        return None
    return None


def _resolve(app, env, node, contnode):
    target = node.get("reftarget", "")
    if node.get("refdomain") != "py" or not target.startswith("gputrain."):
        return None
    real = documented_name(target)
    if real is None:
        return None
    domain = env.get_domain("py")
    return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], real, node, contnode)


def setup(app):
    app.connect("missing-reference", _resolve)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

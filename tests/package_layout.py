"""The layout rules of a package that was one long module: one mechanism per file, imports one way.

A split package draws its modules in its docstring, after the last line that ends in ``::``, one module
per line at four spaces' indent, in the order imports flow (a module may import the ones drawn
above it, never one below). :func:`check_layout` holds the package to that drawing and to the size
of a module a reader can hold; :func:`check_exports` checks that every public name of a module is
re-exported by the package, so ``from gputrain.bench import run_ladder`` keeps working.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

MAX_LINES = 300  # a module a reader can hold in one sitting
MAX_FUNCTION = 60  # lines of one function or method, its docstring included


def drawn_order(package: str) -> tuple[Path, list[str]]:
    """The package's folder, and its modules in the order its docstring draws them."""
    mod = importlib.import_module(package)
    drawing = (mod.__doc__ or "").rsplit("::\n", 1)  # the last literal block: the drawing
    assert len(drawing) == 2, f"{package}'s docstring draws no module order (a line ending in '::')"
    order = [m.group(1) for m in re.finditer(r"^    (\w+)  ", drawing[1], re.M)]
    return Path(mod.__file__).parent, order


def sibling_imports(path: Path, package: str, siblings: set[str]) -> set[str]:
    """The siblings a module imports, in any spelling; '' stands for the package itself (its __init__)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:  # from .x import ...
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 1:  # from . import x
            found |= {a.name if a.name in siblings else "" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package):
            found.add(node.module.removeprefix(package).lstrip(".").split(".")[0])
        elif isinstance(node, ast.Import):
            prefix = package + "."
            found |= {a.name.removeprefix(prefix).split(".")[0] for a in node.names if a.name.startswith(prefix)}
    return found


def check_layout(package: str) -> None:
    """Every module is drawn once, is under MAX_LINES, has no function over MAX_FUNCTION lines, and only
    imports the siblings drawn above it (never the package's __init__, which would be a circle)."""
    folder, order = drawn_order(package)
    modules = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    assert sorted(order) == modules and len(order) == len(set(order)), f"{package} draws {order}, has {modules}"
    for path in folder.glob("*.py"):
        source = path.read_text(encoding="utf-8")
        assert len(source.splitlines()) < MAX_LINES, f"{path.name} has {len(source.splitlines())} lines"
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno - node.lineno < MAX_FUNCTION, f"{path.name}: {node.name} is too long"
    for i, name in enumerate(order):
        imported = sibling_imports(folder / f"{name}.py", package, set(modules))
        assert "" not in imported, f"{name} imports the package itself (a circle through __init__)"
        below = sorted(imported - set(order[:i]))
        assert below == [], f"{name} imports {below}, drawn below it; move the shared code up or redraw the order"


def check_exports(package: str) -> None:
    """The package's __all__ is exactly the public names its modules define, each the module's own object."""
    pkg = importlib.import_module(package)
    folder, order = drawn_order(package)
    public = set()
    for name in order:
        for node in ast.parse((folder / f"{name}.py").read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", node)]
            public |= {getattr(t, "id", getattr(t, "name", "")) for t in targets}
    public = {n for n in public if n and not n.startswith("_")}
    assert set(pkg.__all__) == public and len(pkg.__all__) == len(public), sorted(set(pkg.__all__) ^ public)
    for name in pkg.__all__:
        obj = getattr(getattr(pkg, name), "fn", getattr(pkg, name))  # a Triton kernel: the function it wraps
        assert getattr(obj, "__module__", f"{package}.").startswith(f"{package}."), name

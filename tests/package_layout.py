"""The layout every split package of gputrain keeps (issue 31): modules a reader can hold, imports one way.

A package's docstring draws its modules in import order after a ``::`` line,
one per line as ``    name  what it holds``.  :func:`check_layout` checks that
the drawing names every module once, that each module is under 300 lines with
no function over 60, and that a module imports only the siblings drawn above
it (never the package's own ``__init__``, which would be a circle).
:func:`check_exports` checks that the package re-exports every public name its
modules define, so ``from gputrain.<package> import <name>`` keeps working.
"""

import ast
import importlib
import inspect
import re
from pathlib import Path

MAX_LINES = 300
MAX_FUNCTION_LINES = 60


def drawn_order(package: str) -> tuple[Path, list[str]]:
    """The package's folder, and its modules in the order its docstring draws (the order imports flow)."""
    mod = importlib.import_module(package)
    assert "::" in (mod.__doc__ or ""), f"{package}'s docstring draws no module order (is it still one module?)"
    drawing = mod.__doc__.split("::", 1)[1]
    order = [m.group(1) for m in re.finditer(r"^    (\w+)  ", drawing, re.M)]
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
            found |= {a.name.removeprefix(package + ".").split(".")[0] for a in node.names
                      if a.name.startswith(package + ".")}  # fmt: skip
    return found


def check_layout(package: str) -> None:
    folder, order = drawn_order(package)
    modules = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    assert sorted(order) == modules and len(order) == len(set(order)), f"{package}'s docstring draws {order}"
    for path in folder.glob("*.py"):
        source = path.read_text(encoding="utf-8")
        assert len(source.splitlines()) < MAX_LINES, f"{path.name} has {len(source.splitlines())} lines"
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno
                assert length < MAX_FUNCTION_LINES, f"{path.name}: {node.name} is {length + 1} lines"
    for i, name in enumerate(order):
        imported = sibling_imports(folder / f"{name}.py", package, set(modules))
        assert "" not in imported, f"{name} imports the package itself (a circle through __init__)"
        below = sorted(imported - set(order[:i]))
        assert below == [], f"{name} imports {below}, drawn below it; move the shared code up or redraw the order"


def check_exports(package: str) -> None:
    """Every public name a module defines is in the package's ``__all__``, and is that module's object."""
    mod = importlib.import_module(package)
    folder, order = drawn_order(package)
    public = set()
    for name in order:
        for node in ast.parse((folder / f"{name}.py").read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", node)]
            public |= {getattr(t, "id", getattr(t, "name", "")) for t in targets}
    public = {n for n in public if n and not n.startswith("_")}
    assert set(mod.__all__) == public and len(mod.__all__) == len(public), sorted(public ^ set(mod.__all__))
    for name in mod.__all__:
        obj = getattr(mod, name)  # the module's own object, not an older copy (typing aliases belong to typing)
        home = getattr(obj, "__module__", None)
        if inspect.isclass(obj) or inspect.isfunction(obj) or (home or "").startswith("gputrain"):
            assert home.startswith(package + "."), name

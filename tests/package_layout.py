"""Checks that a gputrain package stays in modules a reader can hold (issue 31): shared by the packages' tests.

A package's docstring draws its modules after its last ``::`` line, one per
line, indented four spaces, in the order imports flow (a module may import the
ones drawn above it, never one below); a module's line may name the other
gputrain modules it imports, as ``(imports gputrain.model)``.
"""

import ast
import importlib
import inspect
import re
from pathlib import Path

MAX_LINES = 300  # a mechanism a reader can hold in one sitting
MAX_FUNCTION_LINES = 60


def drawn_modules(package: str) -> tuple[Path, list[str], dict[str, str]]:
    """The package's folder, its modules in the order its docstring draws, and each module's line of the drawing."""
    mod = importlib.import_module(package)
    drawing = (mod.__doc__ or "").rsplit("::\n", 1)  # the last literal block: the drawing
    assert len(drawing) == 2, f"{package}'s docstring draws no module order (a line ending in '::')"
    drawing = drawing[1]
    lines = {m.group(1): m.group(0) for m in re.finditer(r"^    (\w+)  .*$", drawing, re.M)}
    order = [m.group(1) for m in re.finditer(r"^    (\w+)  ", drawing, re.M)]
    return Path(mod.__file__).parent, order, lines


def gputrain_imports(path: Path, package: str) -> tuple[set[str], set[str]]:
    """What a module of ``package`` imports: (siblings, other gputrain modules); '' stands for the package itself."""
    short = package.removeprefix("gputrain.")
    siblings, others = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:  # from .x import ... / from . import x
                siblings |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
                continue
            name = "gputrain." + (node.module or "") if node.level == 2 else (node.module or "")
            names = [name]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] != "gputrain" or len(parts) < 2:
                continue
            if parts[1] == short:
                siblings.add(parts[2] if len(parts) > 2 else "")
            else:
                others.add(parts[1])
    return siblings, others


def function_lengths(path: Path) -> dict[str, int]:
    """Each function's length in lines (from its ``def`` to its last line, not counted), by ``name:line``."""
    return {
        f"{node.name}:{node.lineno}": node.end_lineno - node.lineno
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def check_layout(package: str) -> None:
    """Every module is drawn once, is under 300 lines with no function over 60, and imports only the siblings
    drawn above it (never the package itself: a circle through __init__)."""
    folder, order, lines = drawn_modules(package)
    modules = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    assert sorted(order) == modules and len(order) == len(set(order)), f"{package}'s docstring draws {order}"
    for path in folder.glob("*.py"):
        source = path.read_text(encoding="utf-8")
        assert len(source.splitlines()) < MAX_LINES, f"{path.name} has {len(source.splitlines())} lines"
        for fn, length in function_lengths(path).items():
            assert length < MAX_FUNCTION_LINES, f"{path.name}: {fn.split(':')[0]} is {length} lines"
    for i, name in enumerate(order):
        siblings, _ = gputrain_imports(folder / f"{name}.py", package)
        assert "" not in siblings, f"{name} imports the package itself (a circle through __init__)"
        below = sorted(siblings - set(order[:i]))
        assert below == [], f"{name} imports {below}, drawn below it; move the shared code up or redraw the order"


def check_exports(package: str, namespaced: tuple[str, ...] = ()) -> None:
    """Every public name a module defines is importable from the package, as it was before the split; the modules in
    ``namespaced`` keep their names to themselves (reach them as ``package.module.name``) unless the package lists
    them."""
    mod = importlib.import_module(package)
    folder, order, _ = drawn_modules(package)
    public, optional = set(), set()
    for name in order:
        found = optional if name in namespaced else public
        for node in ast.parse((folder / f"{name}.py").read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", node)]
            found |= {getattr(t, "id", getattr(t, "name", "")) for t in targets}
    public = {n for n in public if n and not n.startswith("_")} | set(namespaced)
    exported = set(mod.__all__)
    assert len(mod.__all__) == len(exported), "a name is listed twice in __all__"
    assert public <= exported, f"{package} does not export {sorted(public - exported)}"
    assert exported <= public | optional, f"{package} exports {sorted(exported - public - optional)}, defined nowhere"
    for name in mod.__all__:  # a class or function is the package's own, not a name it happens to import
        obj = getattr(mod, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__module__.startswith(package + "."), f"{package}.{name} is {obj.__module__}'s"


def chapter_reads(notebook: str, alias: str) -> list[str]:
    """The dotted names a chapter's code cells read through ``alias`` (``L.cross_entropy``, ``ag.Tensor.backward``)."""
    import json

    root = Path(__file__).resolve().parents[1]
    cells = json.loads((root / "chapters" / notebook).read_text(encoding="utf-8"))["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return sorted(set(re.findall(rf"(?<![\w.]){alias}\.(\w+(?:\.\w+)*)", code)))


def check_chapter_reads(package: str, notebook: str, alias: str) -> None:
    """Every name the chapter reads from the package (gt.show's private helpers included) still resolves."""
    mod = importlib.import_module(package)
    names = chapter_reads(notebook, alias)
    assert names, f"{notebook} reads nothing through {alias}.: the alias changed?"
    missing = []
    for dotted in names:
        obj = mod
        for part in dotted.split("."):
            if not hasattr(obj, part):
                missing.append(f"{alias}.{dotted}")
                break
            obj = getattr(obj, part)
    assert missing == [], f"{notebook} reads {missing}, which {package} no longer has"

"""The package's layout: imports flow one way through the module map, and every module is one a reader can hold.

The module map (``/work/shared/DESIGN.md`` keeps the prose version) lists the
top-level modules and packages of ``gputrain`` so that each imports only those
before it. A module of more than ``MAX_MODULE_LINES`` lines or a function of
more than ``MAX_FUNCTION_LINES`` is split along its seams.
"""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import import_graph

import gputrain

PACKAGE = Path(gputrain.__file__).resolve().parent
# Each imports only what stands before it. A lazy import inside a function counts too.
MODULE_MAP = [
    "device", "results", "data", "precision", "speed", "flops", "loss", "schedule", "fp8", "kernels",
    "moe", "model", "autograd", "optim", "memory", "roofline", "parallel", "bench", "plots", "bounds",
    "train", "posttrain", "scaling", "cli_spec", "cli", "__main__",
]  # fmt: skip
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def top(module: str) -> str:
    """``gputrain.train.loop`` -> ``train``; the package itself -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def modules() -> dict[str, Path]:
    return {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts): p for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_module_is_on_the_map():
    missing = sorted({top(m) for m in modules()} - set(MODULE_MAP) - {"__init__"})
    assert not missing, f"add {missing} to MODULE_MAP where its imports allow"


def test_imports_flow_down_the_map():
    # the package's own __init__ loads names lazily and is imported by everyone: it is not a layer
    upward = sorted(
        (a, b)
        for a, targets in import_graph(PACKAGE).items()
        for b in targets
        if top(a) != top(b) and "__init__" not in (top(a), top(b))
        and MODULE_MAP.index(top(b)) > MODULE_MAP.index(top(a))
    )  # fmt: skip
    assert not upward, f"imports against the module map (importer, imported): {upward}"


def function_lengths(path: Path) -> dict[str, int]:
    out = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[f"{node.name}:{node.lineno}"] = node.end_lineno - node.lineno + 1
    return out


def test_modules_and_functions_a_reader_can_hold():
    big, long = {}, {}
    for name, path in modules().items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            big[name] = lines
        for fn, n in function_lengths(path).items():
            key = f"{name}.{fn.split(':')[0]}"
            if n > MAX_FUNCTION_LINES:
                long[key] = n
    assert not big, f"modules over {MAX_MODULE_LINES} lines: {big}; split them"
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}; split them"

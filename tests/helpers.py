"""Helpers shared by several test files (tests/ is on sys.path via pytest.ini's pythonpath)."""

import functools
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# a Chinese character (CJK Unified Ideographs and Extension A)
CJK = re.compile(r"[\u3400-\u9fff]")


def toc_docnames() -> list[str]:
    """The book's pages in table-of-contents order: the root, then every file of every part."""
    sys.path.insert(0, str(ROOT / "book" / "tools"))
    from toc import docnames

    return docnames()


@functools.cache
def built_site() -> Path:
    """The website, all three editions, built once per test session with warnings as errors
    (test_site.py checks it in a browser, test_pdf.py prints it)."""
    sys.path.insert(0, str(ROOT / "book" / "tools"))
    from build import build

    return build(execute=False, strict=True)


def snapshot(root: Path) -> dict:
    """Every file under ``root`` with its bytes: to prove nothing was written or overwritten."""
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_cli(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    """``python -m gputrain ARGS`` in a fresh process; ``env`` is added to this process's environment."""
    return subprocess.run(
        [sys.executable, "-m", "gputrain", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


# The smallest GPT the tests train: a step takes milliseconds on a loaded CPU.
SMALL_GPT = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, batch_size=8)
# A one-round speed ladder on a one-layer GPT.
TINY_LADDER = dict(
    n_layer=1,
    n_embd=32,
    block_size=32,
    batch_size=2,
    big_batch_size=4,
    steps=1,
    rounds=1,
    warmup=1,
    measured_peak=False,
)


def cli_flags(**fields) -> list[str]:
    """Config fields as command-line flags: ``n_layer=1`` -> ``--n-layer 1``, ``x=False`` -> ``--no-x``."""
    out: list[str] = []
    for name, value in fields.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + flag[2:])
        else:
            out += [flag, str(value)]
    return out


def as_at_a_terminal() -> None:
    """``preexec_fn`` for a child that a test interrupts with SIGINT: Ctrl-C's default action, as at a terminal.

    A process started in the background by a non-interactive shell (``make test &``)
    inherits SIGINT ignored, and gputrain keeps an ignored SIGINT (as nohup means it);
    the child a test sends Ctrl-C to must not inherit that from how pytest was started.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# --- a package of one-concern modules whose docstring draws the order imports flow in ---------------


def package_modules(package) -> tuple[Path, list[str]]:
    """The package's folder, and its modules in the order its docstring draws (the order imports flow)."""
    drawing = package.__doc__.split("::", 1)[1]
    order = [m.group(1) for m in re.finditer(r"^    (\w+)  ", drawing, re.M)]
    return Path(package.__file__).parent, order


def sibling_imports(path: Path, siblings: set[str], package: str) -> set[str]:
    """The siblings a module imports, in any spelling; '' stands for the package itself (its __init__)."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:  # from .x import ...
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 1:  # from . import x
            found |= {a.name if a.name in siblings else "" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package):
            found.add(node.module.removeprefix(package).lstrip(".").split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names if a.name.startswith(package + ".")}
    return found


def check_package_layout(package) -> None:
    """Each module under 300 lines and each function under 60, all drawn in the package's docstring,
    and a module imports only the ones drawn above it."""
    import ast

    folder, order = package_modules(package)
    modules = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    assert sorted(order) == modules and len(order) == len(set(order)), f"the docstring draws {order}"
    for path in folder.glob("*.py"):
        source = path.read_text(encoding="utf-8")
        assert len(source.splitlines()) < 300, f"{path.name} has {len(source.splitlines())} lines"
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno - node.lineno < 60, f"{path.name}: {node.name} is over 60 lines"
    for i, name in enumerate(order):
        imported = sibling_imports(folder / f"{name}.py", set(modules), package.__name__)
        assert "" not in imported, f"{name} imports the package itself (a circle through __init__)"
        below = sorted(imported - set(order[:i]))
        assert below == [], f"{name} imports {below}, drawn below it; move the shared code up or redraw the order"


def check_package_exports(package) -> None:
    """Every public name the modules define at their top level reaches the package's __all__, and no other."""
    import ast

    folder, order = package_modules(package)
    public = set()
    for name in order:
        for node in ast.parse((folder / f"{name}.py").read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", node)]
            public |= {getattr(t, "id", getattr(t, "name", "")) for t in targets}
    public = {n for n in public if n and not n.startswith("_")}
    assert set(package.__all__) == public and len(package.__all__) == len(public)
    for name in package.__all__:
        obj = getattr(package, name)
        assert getattr(obj, "__module__", package.__name__ + ".").startswith(package.__name__ + "."), name

"""Run notebooks in place so their committed outputs are fresh (``make execute``).

A notebook runs again only when its code cells or the ``gputrain`` sources
changed since its outputs were stored (a hash kept in its metadata), or with
``--force``.  Widget state is stored, so ipywidgets render on the website.
A notebook that fails is left untouched on disk.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "companion" / "src" / "gputrain"
KEY = "gputrain_inputs_sha256"


def inputs_hash(nb) -> str:
    h = hashlib.sha256()
    for cell in nb.cells:
        if cell.cell_type == "code":
            h.update(cell.source.encode())
    for path in sorted(PACKAGE.rglob("*.py")):
        h.update(path.read_bytes())
    h.update(os.environ.get("GPUTRAIN_PRESET", "").encode())
    return h.hexdigest()


def execute(path: Path, force: bool = False, timeout: int = 900) -> bool:
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):  # cells added by scripts may lack the id nbformat 4.5 requires
        if "id" not in cell:
            cell["id"] = hashlib.sha1(f"{path.name}:{i}:{cell.source}".encode()).hexdigest()[:12]
    digest = inputs_hash(nb)
    if not force and nb.metadata.get(KEY) == digest:
        print(f"{path}: unchanged, skipped")
        return False
    t0 = time.perf_counter()
    NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        store_widget_state=True,
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    nb.metadata[KEY] = digest
    tmp = path.with_suffix(".ipynb.tmp")
    nbformat.write(nb, tmp)
    tmp.replace(path)  # atomic: a crash mid-write never leaves a half-written notebook
    print(f"{path}: executed in {time.perf_counter() - t0:.1f} s")
    return True


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--force", action="store_true", help="run even if nothing changed")
    args = parser.parse_args()
    failed = []
    for nb_path in args.notebooks:
        try:
            execute(nb_path, force=args.force)
        except Exception as exc:  # report every failing notebook, then fail
            print(f"{nb_path}: FAILED: {type(exc).__name__}: {str(exc).splitlines()[-1] if str(exc) else ''}")
            failed.append(nb_path)
    sys.exit(1 if failed else 0)

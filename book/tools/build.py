"""Build the website into ``_build/html`` (``make book``).

By default the pages are built from the outputs committed in the notebooks,
which takes about a minute.  ``--execute`` first re-runs the notebooks through
jupyter-cache, so that only those whose code changed since the last cached
run execute again.  Warnings are errors: a broken reference, citation or
glossary term fails the build.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from vendor import ROOT, vendor  # noqa: E402

BUILD = ROOT / "_build"


def config_path(execute: bool) -> Path:
    """The book's ``_config.yml``, or a copy of it that executes through jupyter-cache."""
    path = ROOT / "_config.yml"
    if not execute:
        return path
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    config["execute"]["execute_notebooks"] = "cache"
    config["execute"]["cache"] = str(BUILD / ".jupyter_cache")
    # Jupyter Book resolves local_extensions against the config file's folder,
    # which for this copy is _build/: make them absolute.
    local = config.get("sphinx", {}).get("local_extensions") or {}
    for name, folder in local.items():
        local[name] = str((ROOT / folder).resolve())
    BUILD.mkdir(exist_ok=True)
    out = BUILD / "_config_execute.yml"
    out.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return out


def build(execute: bool = False, strict: bool = True, toc: Path = ROOT / "_toc.yml", output: Path = ROOT) -> Path:
    """Build the pages ``toc`` lists into ``output/_build/html`` and return that folder."""
    vendor()
    cmd = [
        str(Path(sys.executable).with_name("jupyter-book")),
        "build",
        str(ROOT),
        "--path-output",
        str(output),
        "--config",
        str(config_path(execute)),
        "--toc",
        str(toc),
    ]
    if strict:
        cmd += ["-W", "--keep-going"]
    subprocess.run(cmd, check=True, cwd=ROOT)
    return output / "_build" / "html"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--execute", action="store_true", help="re-run changed notebooks (jupyter-cache)")
    parser.add_argument("--no-strict", action="store_true", help="do not turn warnings into errors")
    args = parser.parse_args()
    try:
        html = build(execute=args.execute, strict=not args.no_strict)
    except subprocess.CalledProcessError as exc:
        sys.exit(f"book build failed (exit {exc.returncode}); the warnings above name the file and line")
    print(f"\nThe book is built: open file://{html / 'index.html'}  (or run `make serve`)")

"""Vendor the site's JavaScript from npm packages so pages render with no network.

MathJax (math), require.js and the Jupyter widget manager (ipywidgets) are
fetched with ``npm pack`` (pinned versions, the npm client checks the
tarball's integrity), unpacked into ``book/_static/vendor/`` (not committed)
and served from the built site.  Run by ``make book``; idempotent.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENDOR = ROOT / "book" / "_static" / "vendor"
STAMP = VENDOR / ".complete"

# package spec -> [(path inside the tarball, destination under VENDOR)]
PACKAGES = {
    "mathjax@3.2.2": [("package/es5/", "mathjax/")],
    "requirejs@2.3.7": [("package/require.js", "require.js")],
    "@jupyter-widgets/html-manager@1.0.6": [("package/dist/", "@jupyter-widgets/html-manager/dist/")],
}


def _extract(tgz: Path, src: str, dest: Path) -> int:
    n = 0
    with tarfile.open(tgz) as tar:
        for member in tar.getmembers():
            name = member.name
            if not member.isfile() or not name.startswith(src) or name.endswith(".map"):
                continue
            rel = name[len(src) :] if src.endswith("/") else ""
            target = dest / rel if rel else dest
            target.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(member) as f_in, open(target, "wb") as f_out:
                shutil.copyfileobj(f_in, f_out)
            n += 1
    if n == 0:
        raise RuntimeError(f"{tgz.name}: nothing under {src}; the package layout changed")
    return n


def vendor(force: bool = False) -> Path:
    if STAMP.exists() and not force:
        return VENDOR
    if shutil.which("npm") is None:
        sys.exit("vendor: npm is not installed; install Node.js and npm (Debian: apt-get install npm)")
    tmp_vendor = VENDOR.with_name("vendor.tmp")
    shutil.rmtree(tmp_vendor, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        for spec, items in PACKAGES.items():
            out = subprocess.run(
                ["npm", "pack", "--silent", spec], cwd=tmp, check=True, capture_output=True, text=True
            ).stdout.split()
            tgz = Path(tmp) / out[-1]
            for src, dest in items:
                _extract(tgz, src, tmp_vendor / dest)
    shutil.rmtree(VENDOR, ignore_errors=True)
    tmp_vendor.rename(VENDOR)  # all or nothing: a failed fetch leaves no half-vendored tree
    STAMP.write_text("\n".join(PACKAGES) + "\n")
    return VENDOR


if __name__ == "__main__":
    print(f"vendored into {vendor(force='--force' in sys.argv)}")

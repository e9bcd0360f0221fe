"""Build the website into ``_build/html`` (``make book``): English at the root,
the Traditional and Simplified Chinese editions in ``zh-tw/`` and ``zh-cn/``.

By default the pages are built from the outputs committed in the notebooks.
``--execute`` first re-runs the notebooks through jupyter-cache, so that only
those whose code changed since the last cached run execute again.  Warnings
are errors: a broken reference, citation or glossary term fails the build.

The Chinese editions are the same pages read through the translation
catalogs (``book/tools/translations.py``); the Simplified catalogs are
generated first.  Their copies of the static assets and figures that are
identical to the English site's are removed and their pages pointed at the
English copies, so MathJax, the widget manager and every figure exist once.
Each Chinese edition then gets its own notebooks (``book/tools/notebooks.py``):
the download button of a Chinese page gives that page's translated notebook,
and the edition's zip of all of them lies beside its pages.
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from languages import EDITIONS  # noqa: E402
from notebooks import StaleCatalog  # noqa: E402
from notebooks import install as install_notebooks  # noqa: E402
from translations import BUILD_LOCALES, messages_dir, read_catalog, search_terms, simplified, simplifier  # noqa: E402
from vendor import ROOT, vendor  # noqa: E402

BUILD = ROOT / "_build"
# What the Chinese editions say where Sphinx and myst-nb would print English: the book's
# title, figure numbers ("圖 3.1") and the toggles of folded cells. Written once, in
# Traditional Chinese; the Simplified edition converts them as it converts the catalogs.
ZH_TEXT = {
    "title": "GPU 如何訓練 AI",
    "numfig_format": {"figure": "圖 %s", "table": "表 %s", "code-block": "程式碼 %s", "section": "節"},
    "nb_code_prompt_show": "顯示程式碼儲存格",
    "nb_code_prompt_hide": "隱藏程式碼儲存格",
}


def edition_text(edition: str) -> dict:
    """``ZH_TEXT`` in the edition's script."""
    if edition == "zh_TW":
        return ZH_TEXT
    convert = simplifier()
    return {
        key: convert(v) if isinstance(v, str) else {k: convert(x) for k, x in v.items()} for key, v in ZH_TEXT.items()
    }


def config_path(execute: bool, edition: str = "en") -> Path:
    """The book's ``_config.yml``, or a copy of it for executing or for a Chinese edition."""
    path = ROOT / "_config.yml"
    if not execute and edition == "en":
        return path
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    if execute:
        config["execute"]["execute_notebooks"] = "cache"
        config["execute"]["cache"] = str(BUILD / ".jupyter_cache")
    if edition != "en":
        text = edition_text(edition)
        config["title"] = text["title"]
        config["sphinx"]["config"].update(
            language=EDITIONS[edition][0],
            # Sphinx reads <locale_dir>/<language>/LC_MESSAGES/
            locale_dirs=[str(messages_dir(edition).parents[1])],
            gettext_compact=False,
            numfig_format=text["numfig_format"],
            nb_code_prompt_show=text["nb_code_prompt_show"],
            nb_code_prompt_hide=text["nb_code_prompt_hide"],
            gputrain_edition=edition,
            # Sphinx's Chinese search segments words with jieba, taught the book's terms
            html_search_options={"dict": str(search_terms(edition, BUILD_LOCALES / edition / "search_terms.txt"))},
        )
    # Jupyter Book resolves local_extensions against the config file's folder,
    # which for this copy is _build/: make them absolute.
    local = config.get("sphinx", {}).get("local_extensions") or {}
    for name, folder in local.items():
        local[name] = str((ROOT / folder).resolve())
    BUILD.mkdir(exist_ok=True)
    out = BUILD / f"_config_{'execute_' if execute else ''}{edition}.yml"
    out.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return out


def _command(execute: bool, strict: bool, toc: Path, output: Path, edition: str) -> list[str]:
    cmd = [
        str(Path(sys.executable).with_name("jupyter-book")),
        "build",
        str(ROOT),
        "--path-output",
        str(output),
        "--config",
        str(config_path(execute, edition)),
        "--toc",
        str(toc),
    ]
    return cmd + (["-W", "--keep-going"] if strict else [])


def build(
    execute: bool = False,
    strict: bool = True,
    toc: Path = ROOT / "_toc.yml",
    output: Path = ROOT,
    editions: tuple[str, ...] = tuple(EDITIONS),
) -> Path:
    """Build the pages ``toc`` lists into ``output/_build/html`` and return that folder.

    English first; then the Chinese editions, two builds side by side, each
    into its own folder and then moved under the English site.
    """
    vendor()
    subprocess.run(_command(execute, strict, toc, output, "en"), check=True, cwd=ROOT)
    html = output / "_build" / "html"
    chinese = [edition for edition in editions if edition != "en"]
    if "zh_CN" in chinese:
        simplified()
    running = {}
    for edition in chinese:
        folder = output / "_build" / edition
        command = _command(execute, strict, translated_toc(toc, edition), folder, edition)
        running[edition] = subprocess.Popen(command, cwd=ROOT)
    failed = [edition for edition, process in running.items() if process.wait() != 0]
    if failed:
        raise subprocess.CalledProcessError(1, f"jupyter-book build ({', '.join(failed)})")
    for edition in chinese:
        target = html / EDITIONS[edition][1]
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(output / "_build" / edition / "_build" / "html", target)
        share_assets(html, EDITIONS[edition][1])
        if toc == ROOT / "_toc.yml":  # the whole book: its notebooks in the edition's language
            install_notebooks(html, edition)
    return html


def translated_toc(toc: Path, edition: str) -> Path:
    """A copy of the table of contents whose part captions ("The loop") are in the edition's
    language: sphinx-external-toc adds the captions after Sphinx has translated the page."""
    config = yaml.safe_load(toc.read_text(encoding="utf-8"))
    root = messages_dir(edition) / f"{config['root']}.po"
    translations = read_catalog(root) if root.exists() else {}
    for part in config.get("parts") or []:
        message = translations.get(part.get("caption", ""))
        if message is not None and message.string:
            part["caption"] = message.string
    BUILD.mkdir(exist_ok=True)
    out = BUILD / f"_toc_{edition}.yml"
    out.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return out


_ASSET = re.compile(r'((?:src|href)=")((?:\.\./)*)((?:_static|_images)/[^"#?]+)')


def share_assets(site: Path, folder: str) -> int:
    """Remove the files of ``site/folder``'s ``_static`` and ``_images`` that the English site
    has byte for byte, and point its pages at the English copies.  Returns the bytes saved."""
    edition = site / folder
    shared, saved = set(), 0
    for sub in ("_static", "_images"):
        for path in sorted((edition / sub).rglob("*")):
            twin = site / path.relative_to(edition)
            if path.is_file() and twin.is_file() and filecmp.cmp(path, twin, shallow=False):
                shared.add(path.relative_to(edition).as_posix())
                saved += path.stat().st_size
                path.unlink()
    for sub in ("_static", "_images"):
        for path in sorted((edition / sub).rglob("*"), reverse=True):
            if path.is_dir() and not any(path.iterdir()):
                path.rmdir()
    for page in edition.rglob("*.html"):
        up = "../" * (len(page.relative_to(edition).parts) - 1)

        def point(match: re.Match, up: str = up) -> str:
            attr, dots, path = match.groups()
            return f"{attr}{dots}../{path}" if dots == up and path in shared else match.group(0)

        text = page.read_text(encoding="utf-8")
        new = _ASSET.sub(point, text)
        if new != text:
            page.write_text(new, encoding="utf-8")
    return saved


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--execute", action="store_true", help="re-run changed notebooks (jupyter-cache)")
    parser.add_argument("--no-strict", action="store_true", help="do not turn warnings into errors")
    parser.add_argument("--english-only", action="store_true", help="build only the English edition")
    args = parser.parse_args()
    editions = ("en",) if args.english_only else tuple(EDITIONS)
    try:
        html = build(execute=args.execute, strict=not args.no_strict, editions=editions)
    except subprocess.CalledProcessError as exc:
        sys.exit(f"book build failed (exit {exc.returncode}); the warnings above name the file and line")
    except StaleCatalog as exc:
        sys.exit(f"book build failed: a Chinese notebook cannot be translated: {exc}")
    print(f"\nThe book is built: open file://{html / 'index.html'}  (or run `make serve`)")

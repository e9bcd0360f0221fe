"""The Chinese editions' notebooks: every notebook of the book with its prose read from the catalogs.

A reader of a Chinese page who presses the download button, or who takes the
zip of all notebooks (linked from the introduction), gets notebooks whose
Markdown (headings, paragraphs, lists, admonitions, exercise text) and figure
captions (``mystnb.figure.caption``) are the edition's translation, while every
code cell, output and attachment stays byte for byte the English notebook's.

The Markdown is cut into blocks with MyST's own parser, so a block's text is
the message Sphinx extracted into the catalog (``book/tools/translations.py``).
A prose block whose text the catalog does not translate stops the translation
with the page and the sentence named: a notebook never ships half English
because its catalog fell behind (run ``make translations``).

``python book/tools/notebooks.py [EDITION ...]`` writes the notebooks under
``_build/notebooks/<edition>/`` and one zip per edition, with a README in the
edition's language; ``build.py`` puts them into the built site.
"""

from __future__ import annotations

import argparse
import copy
import functools
import re
import shutil
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).parent))
from languages import EDITIONS, edition_file  # noqa: E402
from toc import docnames  # noqa: E402
from translations import messages_dir, needs_translation, read_catalog  # noqa: E402
from vendor import ROOT  # noqa: E402

OUT = ROOT / "_build" / "notebooks"
# directives whose body is code, math or a file path, not prose
_VERBATIM = {"code", "code-block", "code-cell", "sourcecode", "math", "raw", "literalinclude", "glue", "mermaid"}
# directives whose argument is a title a reader reads
_TITLED = {"admonition", "dropdown", "topic", "sidebar", "card", "tab-item"}
_OPTION = re.compile(r"^\s*:[\w-]+:")
_ATTRIBUTION = re.compile(r"^(--|—|―)\s*")


class StaleCatalog(RuntimeError):
    """A prose block of a notebook that its page's catalog does not translate."""


@functools.lru_cache(maxsize=1)
def _parser():
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    extensions = {"amsmath", "dollarmath", "colon_fence", "deflist", "substitution", "html_image"}
    return create_md_parser(MdParserConfig(enable_extensions=extensions), RendererHTML)


def _text(content: str) -> str:
    """A block's text as Sphinx's gettext builder writes the message: lines joined by spaces."""
    return content.replace("\n", " ").strip()


def translate_markdown(source: str, translate: Callable[[str], str]) -> str:
    """``source`` with the text of every heading, paragraph, list item, table cell and
    admonition title replaced by ``translate(text)``; code, math and directives' options stay."""
    lines: list[str | None] = source.split("\n")
    _translate_lines(lines, 0, len(lines), translate)
    return "\n".join(line for line in lines if line is not None)


def _translate_lines(lines: list[str], start: int, end: int, translate) -> None:
    """Translate ``lines[start:end]`` in place (a cell, or a directive's body)."""
    tokens = _parser().parse("\n".join(lines[start:end]))
    edits: list[tuple[int, int, list[str]]] = []  # (first line, last line + 1, new lines), absolute
    row_edits: dict[int, list[tuple[str, str]]] = {}  # one-line blocks: line -> [(old, new)]
    for token in tokens:
        if token.map is None:
            continue
        first, last = start + token.map[0], start + token.map[1]
        if token.type in ("fence", "colon_fence"):
            _directive(lines, first, last, token, translate)
        elif token.type == "inline" and token.content.strip():
            text = _text(token.content)
            mark = _ATTRIBUTION.match(text)  # an epigraph's "-- after ..." is its attribution
            body = text[mark.end() :] if mark else text
            new = translate(body)
            if new == body:
                continue
            if mark:
                new = mark.group(0) + new
            if last - first == 1:
                row_edits.setdefault(first, []).append((token.content.strip(), new))
            else:
                head = token.content.split("\n", 1)[0].strip()
                at = lines[first].find(head)
                if at < 0:
                    raise StaleCatalog(f"cannot place the translation of {text[:60]!r} in line {lines[first]!r}")
                edits.append((first, last, [lines[first][:at] + new]))
    for line, replacements in row_edits.items():
        text, pos, out = lines[line], 0, []
        for old, new in replacements:
            at = text.find(old, pos)
            if at < 0:
                raise StaleCatalog(f"cannot place the translation of {old[:60]!r} in line {text!r}")
            out.append(text[pos:at] + new)
            pos = at + len(old)
        lines[line] = "".join(out) + text[pos:]
    for first, last, new in sorted(edits, reverse=True):
        # the paragraph's other lines become None (dropped at the end): the line count, and so
        # the line maps of the blocks not yet translated, stay valid
        lines[first:last] = new + [None] * (last - first - len(new))


def _directive(lines: list[str], first: int, last: int, token, translate) -> None:
    """A fenced directive: translate its title (admonitions) and, recursively, its body."""
    match = re.match(r"\{([\w:-]+)\}\s*(.*)", token.info.strip())
    if not match or match.group(1) in _VERBATIM:
        return  # a code block, or a directive whose body is not prose
    name, argument = match.group(1), match.group(2).strip()
    if name in _TITLED and argument:
        new = translate(_text(argument))
        if new != argument:
            lines[first] = lines[first].replace(argument, new, 1)
    body = first + 1
    closing = last - 1 if last - 1 > body and lines[last - 1].strip().startswith(("`", ":")) else last
    if body < closing and lines[body].strip() == "---":  # options as a YAML block
        body = next((i + 1 for i in range(body + 1, closing) if lines[i].strip() == "---"), body)
    while body < closing and _OPTION.match(lines[body]):
        body += 1
    _translate_lines(lines, body, closing, translate)


def catalog_messages(edition: str, docname: str) -> dict[str, str]:
    """msgid -> translation of one page's catalog (translated, not fuzzy)."""
    path = messages_dir(edition) / f"{docname}.po"
    if not path.exists():
        raise StaleCatalog(f"{docname}: no catalog at {path.relative_to(ROOT)}: run `make translations`")
    return {m.id: m.string for m in read_catalog(path) if m.id and m.string and not m.fuzzy}


def translator(messages: dict[str, str], docname: str) -> Callable[[str], str]:
    """text -> its translation; prose the catalog lacks raises ``StaleCatalog`` naming the page."""

    def translate(text: str) -> str:
        if text in messages:
            return messages[text]
        if needs_translation(text):
            raise StaleCatalog(
                f"{docname}: the catalog does not translate {text[:90]!r}; "
                "run `make translations` and translate the page's new messages"
            )
        return text

    return translate


def translate_notebook(path: Path, messages: dict[str, str], docname: str):
    """The notebook at ``path`` with its Markdown cells and figure captions translated."""
    nb = nbformat.read(path, as_version=4)
    translate = translator(messages, docname)
    out = copy.deepcopy(nb)
    for cell in out.cells:
        if cell.cell_type == "markdown":
            cell.source = translate_markdown(cell.source, translate)
        figure = cell.metadata.get("mystnb", {}).get("figure", {})
        # myst-nb captions a cell's rich output; a cell that printed only text shows no caption,
        # and its caption is in no catalog
        shown = any(o.output_type in ("display_data", "execute_result") for o in cell.get("outputs", []))
        if figure.get("caption") and (shown or _text(figure["caption"]) in messages):
            figure["caption"] = translate(_text(figure["caption"]))
    return out


def notebook_docnames() -> list[str]:
    """The pages of the table of contents that are notebooks, in reading order."""
    return [page for page in docnames() if (ROOT / f"{page}.ipynb").exists()]


# The zip's README, written once in Traditional Chinese; the Simplified edition converts it.
README_ZH = """# GPU 如何訓練 AI：{edition}筆記本

這個壓縮檔收有本書每一章的 Jupyter 筆記本：說明文字、標題、圖說與練習都是{edition}，
程式碼儲存格與輸出和英文版一字不差。

## 執行方式

1. 取得本書的原始碼（含 `companion/` 資料夾），在根目錄執行 `make setup`：
   它會建立 `.venv/` 並安裝配套套件 `gputrain`（PyTorch 與 Hugging Face Accelerate）。
2. 把這個壓縮檔解開，放在原始碼根目錄下（`chapters/` 與 `book/` 兩個資料夾會與英文筆記本並存於 `{folder}/`）。
3. 執行 `.venv/bin/jupyter lab {folder}/chapters/`，依序打開各章，從頭執行每個儲存格。

在只有 CPU 的電腦上，每章以預設的 `cpu` 預設組態在兩個核心上三分鐘內跑完；
在有 CUDA 的電腦上，預設組態自動切換為 `gpu`，同一份筆記本以真實規模執行
（先執行 `make setup TORCH=torch` 安裝 CUDA 版 PyTorch；
`GPUTRAIN_PRESET=cpu` 或 `gpu` 可強制指定預設組態）。

網站上的每一頁都有下載按鈕，可以單獨取得該頁的筆記本；整本書的 PDF 也在那個選單裡。
"""


def readme(edition: str) -> str:
    """The zip's README in the edition's language."""
    text = README_ZH.format(edition=EDITIONS[edition][2], folder=zip_folder(edition))
    if edition == "zh_TW":
        return text
    from translations import simplifier

    return simplifier()(text)


def zip_folder(edition: str) -> str:
    return f"notebooks-{EDITIONS[edition][1]}"


def zip_name(edition: str) -> str:
    """The zip's file name (in the edition's folder of the site, beside its PDF)."""
    return Path(edition_file(edition, "notebooks")).name


def write_edition(edition: str, out: Path = OUT) -> list[Path]:
    """Write the edition's translated notebooks under ``out/<edition>/`` (docname paths) and
    its zip ``out/<zip_name>``; return the notebooks' paths."""
    written = []
    for docname in notebook_docnames():
        nb = translate_notebook(ROOT / f"{docname}.ipynb", catalog_messages(edition, docname), docname)
        nb.metadata["gputrain_edition"] = edition
        target = out / edition / f"{docname}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        written.append(target)
    folder = zip_folder(edition)
    with zipfile.ZipFile(out / zip_name(edition), "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{folder}/README.md", readme(edition))
        for path in written:
            z.write(path, f"{folder}/{path.relative_to(out / edition).as_posix()}")
    return written


def install(site: Path, edition: str) -> Path:
    """Put the edition's notebooks where its pages' download buttons point (``<folder>/_sources/``)
    and its zip beside its pages; returns the zip's path in the site."""
    folder = site / EDITIONS[edition][1]
    for path in write_edition(edition):
        target = folder / "_sources" / path.relative_to(OUT / edition)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return Path(shutil.copyfile(OUT / zip_name(edition), site / edition_file(edition, "notebooks")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("editions", nargs="*", default=[e for e in EDITIONS if e != "en"])
    args = parser.parse_args()
    if "zh_CN" in args.editions:
        from translations import simplified

        simplified()
    try:
        for edition in args.editions:
            paths = write_edition(edition)
            size = (OUT / zip_name(edition)).stat().st_size
            print(f"{edition}: {len(paths)} notebooks, {OUT / zip_name(edition)} ({size / 1e6:.1f} MB)")
    except StaleCatalog as exc:
        sys.exit(f"notebook translation failed: {exc}")


if __name__ == "__main__":
    main()

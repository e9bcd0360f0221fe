"""The PDF of the book (``make pdf``, book/tools/pdf.py): one file per edition, read back with poppler.

``make pdf`` prints all three editions; ``make test`` prints the Traditional Chinese one (the edition
with the most to go wrong: CJK fonts, translated titles and captions) and reads its text with
``pdftotext``: every chapter title is there, the prose is Chinese, no raw TeX is left, the pages are
numbered, the fonts are embedded, and the page count and size are those of a book.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from helpers import CJK, built_site, toc_docnames

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "tools"))

EDITION = "zh_TW"
# a book of 19 pages with code and figures: hundreds of pages, tens of MB at most
PAGES = (150, 1500)
MEGABYTES = (1, 80)
# what raw TeX looks like when MathJax did not typeset it; a dollar of prose is followed by a number
RAW_TEX = re.compile(r"\\(?:frac|mathrm|text|sum|partial|left|right|begin|sqrt|cdot|times|log|ln)\b|\\\(|\\\[")
LOOSE_DOLLAR = re.compile(r"\$(?!\s?\d)")


def _poppler(*args: str) -> str:
    if not shutil.which(args[0]):
        pytest.fail(f"{args[0]} is missing: run `make pdf-deps` (Debian package poppler-utils)")
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def english_title(docname: str) -> str:
    """A page's title as its source writes it (the first level-one heading)."""
    path = ROOT / f"{docname}.ipynb"
    if path.exists():
        source = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    else:
        source = (ROOT / f"{docname}.md").read_text(encoding="utf-8")
    return re.search(r"^# (.+)$", source, re.M).group(1).strip()


def titles(edition: str) -> dict[str, str]:
    """Every page's title in the edition: the English, or its catalog's translation."""
    import translations as T

    out = {}
    for docname in toc_docnames():
        title = english_title(docname)
        if edition != "en":
            catalog = {m.id: m.string for m in T.read_catalog(T.messages_dir(edition) / f"{docname}.po") if m.id}
            title = catalog.get(title) or title
        out[docname] = re.sub(r"[`*]", "", title)  # the Markdown of a title (`gputrain`) is not printed
    return out


@pytest.fixture(scope="module")
def printed():
    import pdf

    site = built_site()
    path = pdf.build((EDITION,), site)[EDITION]
    text = _poppler("pdftotext", "-enc", "UTF-8", str(path), "-")
    return path, text, text.split("\f")


def _flat(s: str) -> str:
    return re.sub(r"\s+", "", s)


def test_every_chapter_title_is_in_the_pdf(printed):
    _, text, _ = printed
    flat = _flat(text)
    missing = [t for t in titles(EDITION).values() if _flat(t) not in flat]
    assert not missing, f"chapter titles missing from the PDF: {missing}"


def test_the_prose_is_chinese_and_no_raw_tex_is_left(printed):
    _, text, pages = printed
    cjk = len(CJK.findall(text))
    assert cjk > 100_000, f"only {cjk} Chinese characters in the Chinese PDF"
    body = pages[len(pages) // 10 :]  # past the title page and the contents
    chinese = sum(1 for p in body if len(CJK.findall(p)) >= 20)
    # pages of code listings and the API appendices' docstrings are English by design
    assert chinese >= 0.6 * len(body), f"{chinese} of {len(body)} pages carry Chinese prose"
    # a dollar or backslash inside a code listing or output is code (plt.xlabel("$w_1$")), not math
    import pdf
    from bs4 import BeautifulSoup

    html = BeautifulSoup((pdf.WORK / EDITION / "book.html").read_text(encoding="utf-8"), "html.parser")
    code = "\n".join(block.get_text() for block in html.select("pre"))
    spans = sorted({c.get_text() for c in html.select("code") if re.search(r"[$\\]", c.get_text())}, key=len)[::-1]
    for pattern in (RAW_TEX, LOOSE_DOLLAR):
        leaks = []
        for m in pattern.finditer(text):
            line = text[text.rfind("\n", 0, m.start()) + 1 : text.find("\n", m.end())].strip()
            for span in spans:  # inline code in prose (`$OUT`)
                line = line.replace(span, " ")
            if line not in code and pattern.search(line):
                leaks.append(line[:80])
        assert not leaks, f"untypeset math in the PDF: {leaks[:5]}"
    assert re.search(r"圖\s*4\.1", text), "no numbered figure (圖 4.1) in the PDF"


def test_pages_are_numbered_and_the_contents_give_them(printed):
    path, text, pages = printed
    n = int(re.search(r"Pages:\s+(\d+)", _poppler("pdfinfo", str(path))).group(1))
    assert PAGES[0] <= n <= PAGES[1], f"{n} pages"
    size = path.stat().st_size / 1e6
    assert MEGABYTES[0] <= size <= MEGABYTES[1], f"{size:.1f} MB"
    for i in (2, n // 2, n - 1):
        last = [line.strip() for line in pages[i - 1].splitlines() if line.strip()][-1]
        assert last == str(i), f"page {i} ends with {last!r}, not its number"
    # the contents (page 2 on) name chapter 4 with the page where the PDF's chapter 4 begins
    destinations = _poppler("pdfinfo", "-dests", str(path))
    chapter4 = toc_docnames().index("chapters/04_backprop")
    pages_of = [
        int(m.group(1)) for m in re.finditer(rf"^\s*(\d+)\s+\[.*?\]\s+\"p{chapter4}-[^\"]*\"\s*$", destinations, re.M)
    ]
    assert pages_of, "chapter 4's headings are no link targets of the PDF"
    title = _flat(titles(EDITION)["chapters/04_backprop"])
    contents = _poppler("pdftotext", "-layout", "-enc", "UTF-8", "-f", "2", "-l", "12", str(path), "-")
    lines = [_flat(line) for line in contents.splitlines() if title in _flat(line)]
    assert lines, "the contents do not list chapter 4"
    assert lines[0].endswith(str(min(pages_of))), (
        f"contents give chapter 4 as {lines[0]!r}, it begins on {min(pages_of)}"
    )


def test_bookmarks_name_every_chapter_and_its_sections(printed):
    path, _, _ = printed
    raw = path.read_bytes()
    assert b"/Outlines" in raw, "the PDF has no bookmarks"
    count = len(re.findall(rb"/Parent \d+ 0 R", raw))
    assert count >= 10 * len(toc_docnames()) // 2, f"{count} bookmarks for {len(toc_docnames())} pages"


def test_fonts_are_embedded_and_chinese_is_set_in_a_named_cjk_font(printed):
    path, _, _ = printed
    rows = _poppler("pdffonts", str(path)).splitlines()[2:]
    assert rows
    not_embedded = [row for row in rows if row.split()[-5] != "yes"]
    assert not not_embedded, f"fonts not embedded: {not_embedded[:3]}"
    assert any("UMing" in row for row in rows), "no CJK font in the PDF"


def test_interactive_figures_are_static_images(printed):
    """Every frame scrubber and widget of the edition is a photograph in the PDF, none a blank control."""
    import pdf

    html = (pdf.WORK / EDITION / "book.html").read_text(encoding="utf-8")
    assert 'class="animation"' not in html and "widget-view+json" not in html
    site = built_site()
    expected = 0
    for name in toc_docnames():
        from bs4 import BeautifulSoup

        page = site / pdf.edition_root(EDITION).lstrip("/") / f"{name}.html"
        expected += len(pdf._interactive(BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser").article))
    assert expected >= 5
    assert html.count('class="gt-static"') == expected

"""The Chinese editions' notebooks (book/tools/notebooks.py): the prose from the catalogs, the code untouched.

A reader who downloads a chapter from a Chinese page, or the zip of all of them, must get a notebook
that reads in Chinese and runs exactly as the English one does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
from helpers import CJK

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "tools"))

import notebooks as N  # noqa: E402
import translations as T  # noqa: E402

EDITIONS = ("zh_TW", "zh_CN")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Both editions' notebooks and zips, written into a temporary folder."""
    out = tmp_path_factory.mktemp("notebooks")
    T.simplified()  # the zh_CN catalogs, generated from the zh_TW ones
    return out, {edition: N.write_edition(edition, out) for edition in EDITIONS}


def _blocks(nb) -> list[str]:
    """Every prose block of a notebook (headings, paragraphs, list items, titles) and its captions."""
    found = []

    def record(text):
        found.append(text)
        return text

    for cell in nb.cells:
        if cell.cell_type == "markdown":
            N.translate_markdown(cell.source, record)
        caption = cell.metadata.get("mystnb", {}).get("figure", {}).get("caption")
        if caption:
            found.append(N._text(caption))
    return found


def test_every_notebook_of_the_book_is_written_for_each_edition(written):
    out, paths = written
    names = N.notebook_docnames()
    assert len(names) >= 11 and "book/making_it_fast" in names
    for edition in EDITIONS:
        assert [p.relative_to(out / edition).with_suffix("").as_posix() for p in paths[edition]] == names


def test_code_cells_and_outputs_are_byte_identical_to_the_english(written):
    out, _ = written
    for edition in EDITIONS:
        for name in N.notebook_docnames():
            english = json.loads((ROOT / f"{name}.ipynb").read_text(encoding="utf-8"))
            chinese = json.loads((out / edition / f"{name}.ipynb").read_text(encoding="utf-8"))
            assert len(chinese["cells"]) == len(english["cells"]), f"{edition} {name}: cells added or lost"
            for i, (en, zh) in enumerate(zip(english["cells"], chinese["cells"])):
                assert en["cell_type"] == zh["cell_type"], f"{edition} {name} cell {i}"
                if en["cell_type"] == "code":
                    for key in ("source", "outputs", "execution_count"):
                        assert en[key] == zh[key], f"{edition} {name} cell {i}: {key} differs from the English"
                    assert en["metadata"].get("tags") == zh["metadata"].get("tags")


def test_no_translated_english_message_is_left_in_a_chinese_notebook(written):
    """Every block whose English has a translation reads in Chinese; the figure captions too."""
    out, _ = written
    for edition in EDITIONS:
        for name in N.notebook_docnames():
            messages = N.catalog_messages(edition, name)
            translated = {k for k, v in messages.items() if v != k}
            nb = nbformat.read(out / edition / f"{name}.ipynb", as_version=4)
            blocks = _blocks(nb)
            left = [b for b in blocks if b in translated]
            assert not left, f"{edition} {name}: {len(left)} English blocks left, first {left[0][:80]!r}"
            chinese = sum(1 for b in blocks if CJK.search(b))
            assert chinese >= 0.9 * len([b for b in blocks if T.needs_translation(b)]), f"{edition} {name}"


def test_the_simplified_notebooks_are_simplified(written):
    out, _ = written
    nb = nbformat.read(out / "zh_CN" / "chapters" / "07_memory_precision.ipynb", as_version=4)
    prose = " ".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "显存" in prose or "内存" in prose
    assert "記憶體" not in prose and "資料" not in prose


def test_a_stale_catalog_fails_loudly_naming_the_page():
    """A catalog that lacks a notebook's sentence (the English changed, the catalog did not) stops the
    translation with the page named, instead of shipping a notebook with English in it."""
    name = "chapters/04_backprop"
    messages = N.catalog_messages("zh_TW", name)
    stale = dict(messages)
    dropped = next(k for k in messages if k.startswith("The algorithm this chapter is about"))
    del stale[dropped]
    with pytest.raises(N.StaleCatalog, match=r"chapters/04_backprop.*The algorithm this chapter is about"):
        N.translate_notebook(ROOT / f"{name}.ipynb", stale, name)


def test_each_zip_holds_the_notebooks_and_a_readme_in_its_language(written):
    out, paths = written
    for edition in EDITIONS:
        with zipfile.ZipFile(out / N.zip_name(edition)) as z:
            names = z.namelist()
            folder = N.zip_folder(edition)
            assert f"{folder}/README.md" in names
            readme = z.read(f"{folder}/README.md").decode()
            assert CJK.search(readme) and "make setup" in readme and "jupyter lab" in readme
            assert ("繁體" in readme) == (edition == "zh_TW") and ("简体" in readme) == (edition == "zh_CN")
            for path in paths[edition]:
                rel = path.relative_to(out / edition).as_posix()
                assert z.read(f"{folder}/{rel}") == path.read_bytes()


def test_a_chinese_notebook_runs_under_nbval(written, tmp_path):
    """The Traditional Chinese chapter 4 executes, and its checked outputs match, as the English does."""
    out, _ = written
    target = tmp_path / "chapters" / "04_backprop.ipynb"
    target.parent.mkdir()
    target.write_bytes((out / "zh_TW" / "chapters" / "04_backprop.ipynb").read_bytes())
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--nbval-lax",
            "--nbval-current-env",
            "-c",
            str(tmp_path / "pytest.ini"),
            str(target),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout


def test_the_built_site_serves_each_chinese_page_its_chinese_notebook_and_links_the_zip_and_pdf():
    """On a Chinese page the download menu's .ipynb is the page's translated notebook and the menu
    links the edition's PDF; the introduction links both editions' zips, which the site holds."""
    import re

    from helpers import built_site
    from languages import EDITIONS as SITE_EDITIONS
    from languages import edition_file

    site = built_site()
    for edition in EDITIONS:
        folder = site / SITE_EDITIONS[edition][1]
        for name in N.notebook_docnames():
            page = folder / f"{name}.html"
            html = page.read_text(encoding="utf-8")
            source = re.search(r'<a href="([^"]+)"[^>]*?class="[^"]*btn-download-source-button', html, re.S)
            assert source, f"{page}: no download button"
            notebook = nbformat.read((page.parent / source.group(1)).resolve(), as_version=4)
            title = N.catalog_messages(edition, name)[
                nbformat.read(ROOT / f"{name}.ipynb", as_version=4).cells[0].source.split("\n")[0][2:]
            ]
            assert notebook.cells[0].source.startswith(f"# {title}"), (
                f"{page}: the download is not the {edition} notebook"
            )
            book = re.search(r'<a href="([^"]+)"[^>]*?class="[^"]*btn-download-book-pdf-button', html, re.S)
            assert book and (page.parent / book.group(1)).resolve() == (site / edition_file(edition, "pdf")).resolve()
        for linked in ("zh_TW", "zh_CN"):
            assert (site / edition_file(linked, "notebooks")).is_file()
        intro = folder / "book" / "intro.html"
        hrefs = re.findall(r'href="([^"]+\.zip)"', intro.read_text(encoding="utf-8"))
        assert {(intro.parent / h).resolve() for h in hrefs} == {
            (site / edition_file(e, "notebooks")).resolve() for e in EDITIONS
        }, f"{intro}: {hrefs}"

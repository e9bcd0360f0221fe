"""The Chinese edition's catalogs: in step with the English, translated, faithful to its markup.

English is the source text; ``book/locales/zh_TW/LC_MESSAGES/`` holds one
catalog per page (``make translations`` updates them).  A changed English
sentence becomes an untranslated message, so these tests fail until the
catalog is brought up to date and translated.  The Simplified catalogs are
generated from the Traditional ones (OpenCC plus the committed term table).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from helpers import CJK

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "tools"))

import translations as T  # noqa: E402


@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    """The messages the English pages have now (the gettext builder, about 20 s)."""
    return T.extract(tmp_path_factory.mktemp("gettext"))


@pytest.fixture(scope="module")
def catalogs():
    return T.catalogs()


def test_every_page_has_a_catalog_in_step_with_the_english(extracted, catalogs):
    """Each page's catalog holds exactly the English messages of the page as it is now."""
    assert set(catalogs) == set(extracted), "pages and catalogs differ: run `make translations`"
    for docname, template in extracted.items():
        english = {m.id for m in template if m.id}
        held = {m.id for m in catalogs[docname] if m.id}
        new = sorted(english - held)
        assert not new, (
            f"{docname}: {len(new)} English messages not in the catalog (run `make translations`): {new[:3]}"
        )
        gone = sorted(held - english)
        assert not gone, f"{docname}: {len(gone)} catalog messages no longer in the English: {gone[:3]}"


def test_every_message_is_translated(catalogs):
    """No empty and no fuzzy message in any zh_TW catalog; the first missing ones are listed."""
    missing = {docname: T.untranslated(catalog) for docname, catalog in catalogs.items()}
    missing = {docname: ids for docname, ids in missing.items() if ids}
    assert not missing, "untranslated (or fuzzy) messages; translate them in book/locales/zh_TW/: " + "; ".join(
        f"{docname}: {len(ids)}, first {ids[0][:80]!r}" for docname, ids in missing.items()
    )


def test_translations_keep_math_code_references_and_numbers(catalogs):
    bad = [
        f"{docname}: {problem} in {m.id[:60]!r}"
        for docname, catalog in catalogs.items()
        for m in catalog
        if m.id
        for problem in T.problems(m.id, m.string)
    ]
    assert not bad, f"{len(bad)} translations differ from their English: {bad[:5]}"


def test_the_checker_catches_a_dropped_formula_a_changed_target_and_a_lost_number():
    english = "The loss is $-\\ln p$; see {term}`Loss function` and [chapter 4](04_backprop.ipynb): 2.5%."
    good = "損失是 $-\\ln p$；見{term}`損失函數 <Loss function>`與[第 4 章](04_backprop.ipynb)：2.5%。"
    assert T.problems(english, good) == []
    assert any("math" in p for p in T.problems(english, good.replace("$-\\ln p$", "負對數")))
    assert any("roles" in p for p in T.problems(english, good.replace("<Loss function>", "<Loss>")))
    assert any("links" in p for p in T.problems(english, good.replace("04_backprop", "05_optimizers")))
    assert any("numbers" in p for p in T.problems(english, good.replace("2.5%", "百分之二點五")))
    assert any("no Chinese" in p for p in T.problems(english, "The loss, untranslated, $-\\ln p$"))


def test_only_prose_is_extracted():
    assert T.needs_translation("The loss never scolds.")
    assert not T.needs_translation("\nx = \\frac{a}{b}\n")  # a display-math block
    assert not T.needs_translation("\\begin{Verbatim}[commandchars=\\\\\\{\\}]\n\\PY{k}{def}")  # a listing
    assert not T.needs_translation("1958")
    assert not T.needs_translation("$x_i$, `x`")


def test_the_simplified_edition_uses_mainland_terms():
    import opencc

    convert = opencc.OpenCC("tw2sp")
    table = T.terms()
    text = "在 GPU 記憶體裡，資料平行、管線平行與序列平行都以 8 位元組的浮點數傳遞；預設做正規化。"
    out = T.to_simplified(text, table, convert)
    assert out == "在 GPU 显存里，数据并行、流水线并行与序列并行都以 8 字节的浮点数传递；默认做归一化。"
    # without the table, OpenCC alone gets these wrong: the reason the table exists
    alone = convert.convert(text)
    assert "串行" in alone and "范式" in alone and "预设" in alone


def test_the_simplified_catalogs_are_generated_from_the_traditional(tmp_path, catalogs):
    count = T.simplified(tmp_path)
    translated = sum(1 for c in catalogs.values() for m in c if m.id and m.string and not m.fuzzy)
    assert count == translated
    generated = T.catalogs(tmp_path)
    assert set(generated) == set(catalogs)
    for docname, catalog in generated.items():
        for m in catalog:
            if m.id and m.string:
                text = re.sub("“[^“”]*”", "", m.string)  # a quotation of an article keeps its words (资料平行)
                assert "平行" not in text and "記憶體" not in text, f"{docname}: {m.string[:60]}"


def test_every_override_names_a_message_that_exists(catalogs):
    from babel.messages.pofile import read_po

    with open(T.CN_SOURCES / "overrides.po", "rb") as f:
        overrides = [m for m in read_po(f) if m.id]
    english = {m.id for c in catalogs.values() for m in c if m.id}
    stale = [m.id[:60] for m in overrides if m.id not in english]
    assert not stale, f"overrides for messages that no longer exist: {stale}"
    for m in overrides:
        assert CJK.search(m.string) and not T.problems(m.id, m.string), m.id[:60]

"""The editors' rules of the Chinese editions (book/locales/README.md, "The editors' rules").

Checked in the committed zh_TW catalogs and in the zh_CN catalogs generated from them, so that a new
sentence that brings back 訓練輪, 無限大, a mainland word in the Taiwan edition or 第一手数据 in the
mainland one fails here, with the page and the phrase named.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "tools"))

import translations as T  # noqa: E402

# (pattern, what to write instead)
TAIWAN = [
    (r"訓練輪(?!次)", "訓練輪次"),
    (r"無限大", "無窮大"),
    (r"對數和指數函數", "LogSumExp（對數—求和—指數）"),
    (r"運行", "執行"),
    (r"(?<!論)文本", "文字"),
    (r"實現的", "實作的"),
    (r"最優解", "最佳解"),
    (r"視圖", "畫面 or 檢視"),
    (r"並行", "同時進行 or 平行"),
    (r"循環結構", "遞迴結構"),
]
MAINLAND = [
    (r"第一手数据", "第一手资料"),
    (r"任何数据也没有", "任何资料"),
    (r"(?<![每各这那哪])个位(?![置数])", "8 个比特, 3～4 位精度, 最后一位"),
    (r"图块", "小块（tile）"),
    (r"工作者", "工作进程"),
    (r"递归神经网络", "循环神经网络"),
    (r"训练轮(?!次)", "训练轮次"),
    (r"无限大", "无穷大"),
    (r"一层一层地运行", "一层一层地执行"),
]
_QUOTED = re.compile(r"「[^「」]*」|“[^“”]*”")


@pytest.fixture(scope="module")
def simplified(tmp_path_factory):
    out = tmp_path_factory.mktemp("zh_CN")
    T.simplified(out)
    return T.catalogs(out)


def _breaches(catalogs, rules) -> list[str]:
    found = []
    for docname, catalog in catalogs.items():
        for m in catalog:
            if not (m.id and m.string):
                continue
            text = _QUOTED.sub("", m.string)  # a quotation keeps the article's words
            for pattern, fix in rules:
                for hit in re.finditer(pattern, text):
                    found.append(f"{docname}: {text[max(0, hit.start() - 8) : hit.end() + 8]!r} (write {fix})")
    return found


def test_the_taiwan_edition_keeps_the_editors_terms_and_taiwan_usage():
    found = _breaches(T.catalogs(), TAIWAN)
    assert not found, f"{len(found)} breaches of the translators' guide: {found[:6]}"


def test_the_mainland_edition_has_none_of_the_corrected_conversions(simplified):
    found = _breaches(simplified, MAINLAND)
    assert not found, f"{len(found)} wrong mainland terms (add a row to book/locales/zh_CN/terms.tsv): {found[:6]}"


def test_the_rules_catch_what_they_name():
    import opencc

    convert = opencc.OpenCC("tw2sp")
    sample = "我們找不到第一手資料；遞迴神經網路把它打散成圖塊，交給工作者，最後一個位元被翻轉。"
    assert _breaches({"x": [_Msg(convert.convert(sample))]}, MAINLAND), "OpenCC alone passes the check"
    fixed = T.to_simplified(sample, T.terms(), convert)
    assert not _breaches({"x": [_Msg(fixed)]}, MAINLAND), fixed
    assert fixed == "我们找不到第一手资料；循环神经网络把它打乱成小块，交给工作进程，最后一位被翻转。"
    assert _breaches({"x": [_Msg("跑了三個訓練輪，溢位成無限大")]}, TAIWAN)


class _Msg:
    id = "x"

    def __init__(self, string: str):
        self.string = string


def test_every_term_row_says_why():
    rows = [
        line.split("\t")
        for line in (T.CN_SOURCES / "terms.tsv").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    bare = [row[0] for row in rows if len(row) < 3 or not row[2].strip()]
    assert not bare, f"term rows without a reason: {bare}"


def test_quotations_of_the_articles_keep_their_wording(simplified):
    """Each listed quotation is still quoted in a zh_TW catalog, and the Simplified edition shows it
    converted character by character: 「Batch（批次）」 stays 批次 although batch is 批量 elsewhere."""
    import opencc

    characters = opencc.OpenCC("t2s")
    quotes = T.quotations()
    assert "Batch（批次）" in quotes
    taiwan = " ".join(m.string for c in T.catalogs().values() for m in c if m.id and m.string)
    mainland = " ".join(m.string for c in simplified.values() for m in c if m.id and m.string)
    stale = [q for q in quotes if f"「{q}」" not in taiwan]
    assert not stale, f"quotations no catalog quotes any more (remove them from quotations.tsv): {stale}"
    lost = [q for q in quotes if f"“{characters.convert(q)}”" not in mainland]
    assert not lost, f"quotations the Simplified edition changed: {lost}"
    assert "“Batch（批量）”" not in mainland

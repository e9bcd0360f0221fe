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

# instructions, operations and FLOPs executed, as OpenCC's 运行 writes them
_RUN_OPERATIONS = (
    r"(?:Tensor Core 上?|以 ?(?:FP32|FP8|TF32) ?|BF16` ?|格式|由 CPU ?|顺序|调度器|一个接一个地)运行"
    r"|运行(?:同一条指令|了 \$2MNK|不是矩阵乘积|五个逐元素|前向与反向|一个块的前向)"
)
# a number format's or a kernel's stores, as OpenCC's 保存 (save) writes them
_SAVE_STORES = r"(?:FP8|BF16|E4M3|数字) ?保存|保存(?:空间|区|和计算|与运算)|从未保存|把结果保存"

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
    # issue 30
    (r"數據", "規格數字, 數字 or 資料 (數據 is the mainland's word)"),
    (r"錄存", "記錄下來的"),
    (r"單一一個", "一個 or 只有一個"),
    (r"(?:[每幾些一]|\$ )列(?![出表印舉入])", "橫列 (a bare 列 is the mainland's column)"),
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
    # issue 30
    (r"大小块", "大分块"),
    (r"兆", "万亿 (on the mainland 兆 can mean a million)"),
    (r"抽采样本", "抽取样本"),
    (r"个批量", "个批次 (批量 is the mass noun: 批量大小)"),
    (r"主内存", "显存 (a GPU's HBM)"),
    (_RUN_OPERATIONS, "执行 (instructions, operations and FLOPs are executed; programs run)"),
    (_SAVE_STORES, "存储 or 写回 (a format's or a kernel's stores; 保存 is to save)"),
    (r"矩(?![阵估形])", "矩估计 (Adam's moments)"),
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


def test_the_issue_30_rules_catch_what_they_name():
    """OpenCC alone brings back each fault the mainland editor found; the term table removes it."""
    import opencc

    convert = opencc.OpenCC("tw2sp")
    sample = (
        "要求大圖塊的核心函式；一個擁有一兆參數的模型；啟動運算、抽取樣本；這個批次；"
        "SRAM 的頻寬是主記憶體的十倍；以 FP32 執行；張量以 FP8 儲存；Adam 的兩個動差。"
    )
    before = (  # what the term table made of it before issue 30
        "要求大小块的核函数；一个拥有一兆参数的模型；启动运算、抽采样本；这个批量；"
        "SRAM 的带宽是主内存的十倍；以 FP32 运行；张量以 FP8 保存；Adam 的两个矩。"
    )
    assert len(_breaches({"x": [_Msg(before)]}, MAINLAND)) == 8
    fixed = T.to_simplified(sample, T.terms(), convert)
    assert not _breaches({"x": [_Msg(fixed)]}, MAINLAND), fixed
    assert "大分块" in fixed and "一万亿参数" in fixed and "这个批次" in fixed and "两个矩估计" in fixed, fixed
    taiwan = "公開數據；錄存的結果；單一一個數字；共 $N$ 列、每列 $P$ 個數字；命令列與橫列"
    assert len(_breaches({"x": [_Msg(taiwan)]}, TAIWAN)) == 5


def test_the_mainland_glossary_says_same_characters_only_where_they_are():
    """An entry whose Simplified text says 繁简写法相同 must show the Traditional headword in Simplified
    characters; 打乱 under a note that it is written the same as 打散 contradicts itself."""
    import opencc

    characters = opencc.OpenCC("t2s")
    convert = T.simplifier()
    overrides = {m.id: m.string for m in T.read_catalog(T.CN_SOURCES / "overrides.po") if m.id}
    wrong = []
    for m in T.catalogs()["book/glossary"]:
        if m.id and m.string:
            mainland = overrides.get(m.id) or convert(m.string)
            head = m.string.split("（")[0]
            if "繁简写法相同" in mainland and characters.convert(head) != mainland.split("（")[0]:
                wrong.append(mainland[:40])
    assert not wrong, f"zh_CN glossary entries that contradict themselves (add an override): {wrong}"


def test_the_glossary_index_lists_the_editors_terms():
    """The Chinese -> English index of book/glossary.md (not a catalog message) follows the same rules."""
    index = (ROOT / "book" / "glossary.md").read_text(encoding="utf-8").split("## Chinese → English index")[1]
    rows = [line.split("|")[1].strip() for line in index.splitlines() if line.startswith("| ") and "{term}" in line]
    assert len(rows) > 100, len(rows)
    stale = [row for row in rows if re.search(r"訓練輪(?!次)|训练轮(?!次)|無限大|无限大", row)]
    assert not stale, f"index rows with a retired term: {stale}"

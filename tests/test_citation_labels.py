"""The labels a reader sees where a page cites a work: "[Dao et al., 2022]".

sphinxcontrib-bibtex builds them from book/references.bib with the reference style that
_config.yml names; every page of the three editions shows the same label. Formatting each entry
with that style is cheap (no book build), so every entry's label is checked here: the four source
articles name no author and no date, and an entry that says "Anonymous" gives every citation of it
the useless "[Anonymous, n.d.]"; without an author the style shows the title instead.
"""

from __future__ import annotations

import re
from pathlib import Path

import pybtex.database
import pytest
from sphinxcontrib.bibtex.plugin import find_plugin
from sphinxcontrib.bibtex.style.template import SphinxReferenceInfo

ROOT = Path(__file__).resolve().parents[1]
ARTICLES = {  # the four source articles, by the titles the book gives them
    "zh_gpu_training": "GPU怎麼訓練AI",
    "zh_gradient_descent": "Gradient Descent: A Blindfolded Walk Down the Valley",
    "zh_subtraction": "训练：AI的天价减法课",
    "zh_secret_war": "The Secret War of Model Training",
}


def _plain(text) -> str:
    parts = getattr(text, "parts", None)
    return str(text) if parts is None else "".join(_plain(p) for p in parts)


@pytest.fixture(scope="module")
def labels() -> dict[str, str]:
    """key -> the parenthetical label ({cite}) under the book's configured reference style."""
    config = (ROOT / "_config.yml").read_text(encoding="utf-8")
    name = re.search(r"^\s*bibtex_reference_style:\s*(\S+)", config, re.M).group(1)
    style = find_plugin("sphinxcontrib.bibtex.style.referencing", name)()
    info = SphinxReferenceInfo(None, "", "", "", None, "", "")
    bib = pybtex.database.parse_file(str(ROOT / "book" / "references.bib"))
    return {
        key: _plain(
            style.inner("p").format_data(
                {"entry": entry, "formatted_entry": None, "reference_info": info, "style": style}
            )
        )
        for key, entry in bib.entries.items()
    }


def test_no_citation_label_is_anonymous(labels):
    anonymous = {key: label for key, label in labels.items() if "anonymous" in label.lower()}
    assert not anonymous, f"labels that name no one (drop the author field; the title shows instead): {anonymous}"


def test_the_source_articles_are_cited_by_their_titles(labels):
    for key, title in ARTICLES.items():
        assert labels[key] == f"{title}, n.d.", labels[key]

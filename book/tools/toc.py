"""The book's pages in reading order, from ``_toc.yml``: the one list the build tools and tests walk."""

from __future__ import annotations

import yaml
from vendor import ROOT


def docnames() -> list[str]:
    """The root page, then every file of every part (and its sections), in table-of-contents order."""

    def files(entries):
        for entry in entries or []:
            if "file" in entry:
                yield entry["file"]
            yield from files(entry.get("sections"))
            yield from files(entry.get("chapters"))

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    return [toc["root"], *files(toc.get("parts")), *files(toc.get("chapters"))]

"""Sphinx extension: the language switcher of the three editions (English, 繁體中文, 简体中文).

The site holds English at its root and the Chinese editions in ``zh-tw/`` and
``zh-cn/`` (``book/tools/build.py``).  Every page gets a row of links to the
same page in the other editions, at the top of its article, and
``<link rel="alternate" hreflang=...>`` tags in its head.  The build passes
the edition being built as ``gputrain_edition`` (a key of ``EDITIONS``).

It also names where each edition's PDF and zip of notebooks lie
(``edition_file``), adds the PDF to every page's download menu, and gives
the pages the ``{edition-file}`` role that links them from any edition.
"""

from __future__ import annotations

import re
from html import escape

# edition -> (Sphinx language, folder under the site root, name in its own script, BCP 47 tag)
EDITIONS = {
    "en": ("en", "", "English", "en"),
    "zh_TW": ("zh_TW", "zh-tw", "繁體中文", "zh-Hant-TW"),
    "zh_CN": ("zh_CN", "zh-cn", "简体中文", "zh-Hans-CN"),
}


def edition_file(edition: str, kind: str) -> str:
    """Where an edition's PDF (``kind="pdf"``, ``book/tools/pdf.py``) or its zip of notebooks
    (``kind="notebooks"``, ``book/tools/notebooks.py``) lies, relative to the site's root."""
    _, folder, _, _ = EDITIONS[edition]
    tag = folder or "en"
    name = {"pdf": f"how-a-gpu-trains-ai-{tag}.pdf", "notebooks": f"how-a-gpu-trains-ai-notebooks-{tag}.zip"}[kind]
    return f"{folder}/{name}" if folder else name


def page_url(pagename: str, current: str, target: str) -> str:
    """Relative URL from ``pagename`` in edition ``current`` to the same page in edition ``target``."""
    up = "../" * pagename.count("/")
    if EDITIONS[current][1]:
        up += "../"
    folder = EDITIONS[target][1]
    return f"{up}{folder + '/' if folder else ''}{pagename}.html"


def switcher(pagename: str, current: str) -> str:
    """The switcher's HTML for one page."""
    links = []
    for edition, (_, _, name, tag) in EDITIONS.items():
        if edition == current:
            links.append(f'<span class="gt-lang-current" lang="{tag}">{escape(name)}</span>')
        else:
            url = escape(page_url(pagename, current, edition))
            links.append(f'<a class="gt-lang-link" href="{url}" hreflang="{tag}" lang="{tag}">{escape(name)}</a>')
    return f'<nav class="gt-languages" aria-label="Language / 語言">{" · ".join(links)}</nav>\n'


# the download menu's entry for the whole book, in each edition's language
BOOK_PDF = {"en": "Book (PDF)", "zh_TW": "全書 PDF", "zh_CN": "全书 PDF"}


def _download_book(app, pagename, templatename, context, doctree):
    """Add the edition's PDF of the whole book (``make pdf``) to the theme's download menu."""
    current = app.config.gputrain_edition
    for group in context.get("header_buttons", []):
        if group.get("label") == "download-buttons":
            folder = EDITIONS[current][1]
            name = edition_file(current, "pdf")[len(folder) + 1 if folder else 0 :]
            group["buttons"].append(
                {
                    "type": "link",
                    "url": context["pathto"](name, 1),
                    "text": BOOK_PDF[current],
                    "tooltip": BOOK_PDF[current],
                    "icon": "fas fa-book",
                    "label": "download-book-pdf-button",
                }
            )


def edition_link_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{edition-file}`text <zh_TW:notebooks>``` links an edition's zip of notebooks (or ``:pdf``)
    from any page of any edition: the target is the same in every translation, the URL is computed
    for the edition being built."""
    from docutils import nodes

    match = re.match(r"^(.*?)\s*<(\w+):(\w+)>$", text, re.S)
    if not match or match.group(2) not in EDITIONS or match.group(3) not in ("pdf", "notebooks"):
        message = inliner.reporter.error(f"edition-file wants `text <EDITION:pdf|notebooks>`, got {text!r}")
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    label, edition, kind = match.groups()
    env = inliner.document.settings.env
    current = env.config.gputrain_edition
    up = "../" * env.docname.count("/") + ("../" if EDITIONS[current][1] else "")
    node = nodes.reference(rawtext, label, refuri=up + edition_file(edition, kind), **(options or {}))
    return [node], []


def _page_context(app, pagename, templatename, context, doctree):
    current = app.config.gputrain_edition
    context["body"] = switcher(pagename, current) + context.get("body", "")
    tags = [
        f'<link rel="alternate" hreflang="{tag}" href="{escape(page_url(pagename, current, edition))}" />'
        for edition, (_, _, _, tag) in EDITIONS.items()
    ]
    context["metatags"] = context.get("metatags", "") + "\n".join(tags) + "\n"


def setup(app):
    app.add_config_value("gputrain_edition", "en", "html")
    app.connect("html-page-context", _page_context)
    app.connect("html-page-context", _download_book, priority=600)  # after the theme fills its menu
    app.add_role("edition-file", edition_link_role)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

"""Sphinx extension: the language switcher of the three editions (English, 繁體中文, 简体中文).

The site holds English at its root and the Chinese editions in ``zh-tw/`` and
``zh-cn/`` (``book/tools/build.py``).  Every page gets a row of links to the
same page in the other editions, at the top of its article, and
``<link rel="alternate" hreflang=...>`` tags in its head.  The build passes
the edition being built as ``gputrain_edition`` (a key of ``EDITIONS``).
"""

from __future__ import annotations

from html import escape

# edition -> (Sphinx language, folder under the site root, name in its own script, BCP 47 tag)
EDITIONS = {
    "en": ("en", "", "English", "en"),
    "zh_TW": ("zh_TW", "zh-tw", "繁體中文", "zh-Hant-TW"),
    "zh_CN": ("zh_CN", "zh-cn", "简体中文", "zh-Hans-CN"),
}


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
    return {"parallel_read_safe": True, "parallel_write_safe": True}

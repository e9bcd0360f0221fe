"""A PDF of each edition of the book (``make pdf``): English, 繁體中文, 简体中文.

The builder is the built website printed by Debian's Chromium, the browser the
site tests already drive through playwright.  Sphinx's LaTeX route would need a
second toolchain of about a gigabyte (TeX Live, xeCJK) and a LaTeX rendering of
every notebook output, widget and animation; printing the pages reuses what the
site already renders (MathJax, figures, the Chinese fonts of
``fonts-noto-cjk``) and adds nothing to install but poppler's ``pdfinfo``.

For each edition, every page of ``_toc.yml`` is taken from the built site
(``book/tools/build.py``) and laid into one document: a title page, a table of
contents with page numbers, then the pages, each chapter on a new page, with
its numbered, captioned figures, and the math typeset by MathJax as vector
graphics.  Interactive figures (matplotlib frame scrubbers, ipywidgets) are
first rendered in their own page and photographed, so the PDF holds a static
image of each.  Chromium writes page numbers in the footer and PDF bookmarks
from the chapter and section headings.  The document is printed twice: the
first print says on which page each chapter and section begins (the PDF's
named destinations, read by ``pdfinfo -dests``), the second prints those page
numbers in the table of contents.

``python book/tools/pdf.py [EDITION ...]`` writes
``_build/html/<edition folder>/how-a-gpu-trains-ai-<tag>.pdf``, the file each
edition's download menu links (``book/tools/languages.py``).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import http.server
import posixpath
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

from bs4 import BeautifulSoup

sys.path.insert(0, str(Path(__file__).parent))
from languages import EDITIONS, edition_file  # noqa: E402
from toc import docnames  # noqa: E402
from vendor import ROOT  # noqa: E402

SITE = ROOT / "_build" / "html"
WORK = ROOT / "_build" / "pdf"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WAIT_MS = 300_000
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
# What the PDF says in each edition's language where the site's templates would speak: written
# once in Traditional Chinese; the Simplified edition converts it (as build.py's ZH_TEXT).
TEXT = {
    "en": {"contents": "Contents", "edition": "English edition", "static": "Static image of an interactive figure"},
    "zh_TW": {"contents": "目錄", "edition": "繁體中文版", "static": "互動圖的靜態影像"},
}
# Latin from DejaVu; Chinese prose from AR PL UMing (Ming/Song, the text face of Chinese books, with
# the Taiwan or the mainland glyph forms), headings and bold in WenQuanYi Micro Hei (Hei, the way
# Chinese books set emphasis). Both are TrueType, which Chromium embeds as named subset fonts (Noto
# CJK's OpenType CFF, and any bold or italic it synthesizes, it draws as unnamed Type 3 glyphs:
# pdf.css turns synthesis off). It fails to subset a face of a font collection and embeds the whole
# 21 MB file, so each face is first cut to the characters the edition uses (fontTools) and served
# to the page as a web font.
# (the English edition quotes the articles' Chinese titles too)
CJK_FACES = {
    "en": {"GT Ming": "AR PL UMing TW", "GT Hei": "WenQuanYi Micro Hei"},
    "zh_TW": {"GT Ming": "AR PL UMing TW", "GT Hei": "WenQuanYi Micro Hei"},
    "zh_CN": {"GT Ming": "AR PL UMing CN", "GT Hei": "WenQuanYi Micro Hei"},
}
FONTS = {edition: '"DejaVu Sans", "GT Ming"' for edition in CJK_FACES}
HEI = {edition: '"DejaVu Sans", "GT Hei"' for edition in CJK_FACES}
MONO = {edition: '"DejaVu Sans Mono"' + fonts[len('"DejaVu Sans"') :] for edition, fonts in FONTS.items()}


def text(edition: str) -> dict[str, str]:
    if edition in TEXT:
        return TEXT[edition]
    from translations import simplifier

    convert = simplifier()
    return {key: convert(value) for key, value in TEXT["zh_TW"].items()}


def edition_root(edition: str) -> str:
    """The edition's folder as a URL path on the site: "/" or "/zh-tw/"."""
    folder = EDITIONS[edition][1]
    return f"/{folder}/" if folder else "/"


# ---------------------------------------------------------------- interactive figures, photographed


def _interactive(article) -> list[int]:
    """Indices (among the article's cell outputs) of the outputs that need a browser to be seen."""
    outputs = article.select(".cell_output")
    return [
        i
        for i, out in enumerate(outputs)
        if out.select_one(f'script[type="{WIDGET_VIEW}"]') or out.select_one("div.animation")
    ]


def photograph(page, origin: str, url: str, indices: list[int], out: Path) -> dict[int, Path]:
    """Open a page of the site, let its widgets render and its frame scrubbers stop on the last
    frame, and save a PNG of each interactive output; return index -> PNG."""
    page.goto(origin + url, wait_until="load", timeout=WAIT_MS)
    if page.evaluate(f"!!document.querySelector('script[type=\"{WIDGET_VIEW}\"]')"):
        page.wait_for_selector(".jupyter-widgets", timeout=WAIT_MS)
    # a frame scrubber (matplotlib's to_jshtml) shows its last frame: the whole story of the figure
    page.evaluate(
        """() => document.querySelectorAll('div.animation img[id^="_anim_img"]').forEach(img => {
             const anim = window['anim' + img.id.slice('_anim_img'.length)];
             if (anim) { anim.pause_animation(); anim.last_frame(); }
           })"""
    )
    page.wait_for_function("Array.from(document.images).every(i => i.complete)", timeout=WAIT_MS)
    page.wait_for_timeout(300)
    shots = {}
    outputs = page.locator("article .cell_output")
    for i in indices:
        element = outputs.nth(i)
        animation = element.locator("div.animation img")
        if not animation.count():  # widgets: photograph them alone, the caption and any text stay text
            element.evaluate("e => e.querySelectorAll('figcaption, div.output').forEach(x => x.style.display = 'none')")
        target = animation.first if animation.count() else element
        path = out / f"{url.strip('/').replace('/', '_')}-{i}.png"
        target.screenshot(path=str(path))
        shots[i] = path
    return shots


# ---------------------------------------------------------------- one document from the pages


def _resolve(href: str, base: str) -> str:
    """An href of a page at URL path ``base``, as an absolute URL path (fragment kept)."""
    parts = urlsplit(href)
    path = posixpath.normpath(posixpath.join(posixpath.dirname(base), unquote(parts.path))) if parts.path else base
    return path + (f"#{parts.fragment}" if parts.fragment else "")


def _article(site: Path, edition: str, n: int, docname: str, shots: dict[int, Path], static_note: str):
    """The ``n``-th page's article, its ids prefixed ``p{n}-``, its links and assets made absolute."""
    base = edition_root(edition) + f"{docname}.html"
    soup = BeautifulSoup((site / base.lstrip("/")).read_text(encoding="utf-8"), "html.parser")
    article = soup.select_one("article.bd-article")
    outputs = article.select(".cell_output")
    for i, png in shots.items():
        data = base64.b64encode(png.read_bytes()).decode()
        img = soup.new_tag("img", src=f"data:image/png;base64,{data}", alt=static_note, title=static_note)
        img["class"] = "gt-static"
        # the photograph takes the place of the scrubber or the widgets; a caption or printed text stays
        live = outputs[i].select(f'div.animation, script[type="{WIDGET_VIEW}"]')
        live = [e.find_parent("div", class_="output") or e if e.name == "div" else e for e in live]
        live[0].insert_before(img)
        for element in live:
            element.decompose()
    for junk in article.select(
        ".gt-languages, a.headerlink, .copybtn, button, script, details.above-input, details.below-input, "
        ".cell.tag_remove-cell, .tag_remove-input .cell_input, .toggle-details__summary"
    ):
        junk.decompose()
    for element in article.select("[id]"):
        element["id"] = f"p{n}-{element['id']}"
    for element in article.select("[src]"):
        if not element["src"].startswith(("data:", "http:", "https:")):
            element["src"] = _resolve(element["src"], base)
    return article, base


def _relink(article, base: str, pages: dict[str, int]) -> None:
    """Links to a page of the book point into the document; other relative links lose their target."""
    for a in article.select("a[href]"):
        href = a["href"]
        if href.startswith(("http:", "https:", "mailto:")):
            continue
        target = _resolve(href, base)
        path, _, fragment = target.partition("#")
        if path in pages:
            a["href"] = f"#p{pages[path]}-{fragment}" if fragment else f"#p{pages[path]}"
        else:
            a.unwrap()


def _headings(article) -> list[tuple[int, str, str]]:
    """(level, id, text) of the chapter and section headings, for the table of contents."""
    found = []
    for h in article.select("h1, h2"):
        section = h.find_parent("section")
        if section is not None and section.get("id"):
            found.append((int(h.name[1]), section["id"], " ".join(h.get_text(" ").split())))
    return found


def _demote(article) -> None:
    """Headings below sections become styled paragraphs: the bookmarks stop at sections."""
    for h in article.select("h3, h4, h5, h6"):
        h["class"] = [*h.get("class", []), f"gt-{h.name}"]
        h.name = "p"


def document(site: Path, edition: str, shots: dict, pages_of: dict[str, int] | None = None, fonts=None) -> str:
    """The whole edition as one HTML document; ``pages_of`` (id -> page) fills the contents."""
    names = docnames()
    words = text(edition)
    pages = {edition_root(edition) + f"{name}.html": n for n, name in enumerate(names)}
    body, toc = [], []
    for n, name in enumerate(names):
        article, base = _article(site, edition, n, name, shots.get(name, {}), words["static"])
        _relink(article, base, pages)
        for level, ident, title in _headings(article):
            page = (pages_of or {}).get(ident, "")
            toc.append(
                f'<li class="gt-toc-{level}"><a href="#{ident}"><span class="gt-toc-title">{_escape(title)}'
                f'</span><span class="gt-toc-page">{page}</span></a></li>'
            )
        _demote(article)
        body.append(f'<section class="gt-page" id="p{n}">{article.decode_contents()}</section>')
    head = _head(site, edition, fonts)
    title = _escape(_book_title(site, edition))
    cover = (
        f'<section class="gt-cover"><h1 class="gt-title">{title}</h1>'
        f'<p class="gt-edition">{_escape(words["edition"])}</p></section>'
    )
    contents = f'<nav class="gt-toc"><p class="gt-toc-heading">{words["contents"]}</p><ol>{"".join(toc)}</ol></nav>'
    lang = EDITIONS[edition][3]
    return (
        f'<!DOCTYPE html><html lang="{lang}" data-theme="light"><head>{head}</head>'
        f'<body><div class="bd-content"><article class="bd-article">{cover}{contents}{"".join(body)}'
        "</article></div></body></html>"
    )


def _escape(s: str) -> str:
    from html import escape

    return escape(s, quote=False)


def _book_title(site: Path, edition: str) -> str:
    index = site / edition_root(edition).lstrip("/") / f"{docnames()[0]}.html"
    soup = BeautifulSoup(index.read_text(encoding="utf-8"), "html.parser")
    return " ".join(soup.select_one("article h1").get_text(" ").split()).rstrip("#").strip()


def _head(site: Path, edition: str, fonts: dict[str, Path] | None = None) -> str:
    """The site's stylesheets, MathJax (as SVG: vector graphics in the PDF), and the print style."""
    base = edition_root(edition) + f"{docnames()[0]}.html"
    soup = BeautifulSoup((site / base.lstrip("/")).read_text(encoding="utf-8"), "html.parser")
    links = [
        f'<link rel="stylesheet" href="{_resolve(link["href"], base)}">'
        for link in soup.head.select('link[rel="stylesheet"]')
    ]
    mathjax = next(s["src"] for s in soup.head.select("script[src]") if "mathjax" in s["src"])
    mathjax = _resolve(mathjax.split("?")[0], base).replace("tex-chtml.js", "tex-svg.js")
    config = (
        'window.MathJax = {options: {processHtmlClass: "tex2jax_process|mathjax_process|math|output_area"},'
        ' svg: {fontCache: "global"}};'
    )
    style = "".join(
        f'@font-face {{ font-family: "{family}"; src: url("/__pdf__/fonts/{path.name}"); }}\n'
        for family, path in (fonts or {}).items()
    )
    style += (ROOT / "book" / "tools" / "pdf.css").read_text(encoding="utf-8")
    for key, fonts in (("FONT", FONTS), ("HEI", HEI), ("MONO", MONO)):
        style = style.replace(f"/*{key}*/", fonts[edition])
    return (
        f'<meta charset="utf-8"><title>{_escape(_book_title(site, edition))}</title>'
        + "".join(links)
        + f'<style>{style}</style><script>{config}</script><script defer src="{mathjax}"></script>'
    )


def cjk_fonts(edition: str, html: str, out: Path) -> dict[str, Path]:
    """The edition's Chinese faces cut to the characters ``html`` uses: family -> TTF file."""
    from fontTools import subset
    from fontTools.ttLib import TTFont

    chars = {ord(c) for c in html if ord(c) > 0x2000} | set(range(0x20, 0x7F))
    made = {}
    for family, face in CJK_FACES.get(edition, {}).items():
        found = subprocess.run(["fc-match", "-f", "%{file}:%{index}", face], capture_output=True, text=True)
        path, _, index = found.stdout.rpartition(":")
        if (
            face.split()[0]
            not in subprocess.run(["fc-match", "-f", "%{family}", face], capture_output=True, text=True).stdout
        ):
            sys.exit(f"make pdf needs the font {face!r}: run `make pdf-deps`")
        font = TTFont(path, fontNumber=int(index or 0), lazy=False)
        options = subset.Options()
        options.drop_tables += ["EBDT", "EBLC", "EBSC", "DSIG"]  # embedded bitmaps: the PDF draws outlines
        options.name_IDs = ["*"]
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes=chars)
        subsetter.subset(font)
        target = out / f"{family.replace(' ', '-')}-{edition}.ttf"
        font.save(target)
        made[family] = target
    return made


# ---------------------------------------------------------------- printing


@contextlib.contextmanager
def _server(site: Path):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        sys.exit("make pdf needs Chromium: run `make pdf-deps` (Debian packages chromium, poppler-utils, fonts)")
    return found


def destinations(pdf: Path) -> dict[str, int]:
    """The PDF's named destinations (the targets of its internal links) and their pages."""
    if not shutil.which("pdfinfo"):
        sys.exit("make pdf needs pdfinfo: run `make pdf-deps` (Debian package poppler-utils)")
    out = subprocess.run(["pdfinfo", "-dests", str(pdf)], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        match = re.match(r"\s*(\d+)\s+\[.*?\]\s+\"(.*)\"\s*$", line)
        if match:
            found[match.group(2)] = int(match.group(1))
    return found


def _footer(edition: str) -> str:
    font = FONTS[edition].replace('"', "'")
    return (
        f'<div style="width:100%;text-align:center;font-size:8pt;font-family:{font};color:#555">'
        '<span class="pageNumber"></span></div>'
    )


def _print(page, origin: str, html: str, target: Path, edition: str) -> None:
    url = f"{origin}/__pdf__/{edition}.html"
    page.route(url, lambda route: route.fulfill(body=html, content_type="text/html; charset=utf-8"))
    fonts = WORK / edition
    page.route(
        f"{origin}/__pdf__/fonts/*",
        lambda route: route.fulfill(path=str(fonts / route.request.url.rsplit("/", 1)[1]), content_type="font/ttf"),
    )
    page.goto(url, wait_until="load", timeout=WAIT_MS)
    page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=WAIT_MS)
    page.evaluate("MathJax.startup.promise.then(() => { window.__typeset = true; })")
    page.wait_for_function("window.__typeset === true", timeout=WAIT_MS)
    page.wait_for_function("Array.from(document.images).every(i => i.complete)", timeout=WAIT_MS)
    page.wait_for_function("document.fonts.status === 'loaded'", timeout=WAIT_MS)
    page.pdf(
        path=str(target),
        format="A4",
        margin={"top": "18mm", "bottom": "20mm", "left": "17mm", "right": "17mm"},
        print_background=True,
        display_header_footer=True,
        header_template="<span></span>",
        footer_template=_footer(edition),
        outline=True,
        tagged=True,  # Chromium builds the bookmarks from the structure tree: half the bytes, but needed
    )
    page.unroute(url)
    page.unroute(f"{origin}/__pdf__/fonts/*")


def build_pdf(edition: str, site: Path = SITE, browser=None, origin: str | None = None) -> Path:
    """Print one edition; returns the PDF's path in the site."""
    target = site / edition_file(edition, "pdf")
    work = WORK / edition
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    shots = {}
    for name in docnames():
        url = edition_root(edition) + f"{name}.html"
        if not (site / url.lstrip("/")).exists():
            sys.exit(f"{url} is not built: run `make book` first")
        soup = BeautifulSoup((site / url.lstrip("/")).read_text(encoding="utf-8"), "html.parser")
        indices = _interactive(soup.select_one("article.bd-article"))
        if indices:
            shots[name] = photograph(page, origin, url, indices, work)
    first = work / "first.pdf"
    html = document(site, edition, shots)
    fonts = cjk_fonts(edition, html, work)
    _print(page, origin, document(site, edition, shots, fonts=fonts), first, edition)
    where = destinations(first)
    html = document(site, edition, shots, where, fonts)
    (work / "book.html").write_text(html, encoding="utf-8")
    _print(page, origin, html, target, edition)
    page.close()
    return target


def build(editions: tuple[str, ...] = tuple(EDITIONS), site: Path = SITE) -> dict[str, Path]:
    """Print every edition with one browser; returns edition -> PDF."""
    from playwright.sync_api import sync_playwright

    if not (site / "index.html").exists():
        sys.exit("the site is not built: run `make book` first")
    done = {}
    with _server(site) as origin, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_FLAGS, headless=True)
        for edition in editions:
            start = time.perf_counter()
            done[edition] = build_pdf(edition, site, browser, origin)
            size = done[edition].stat().st_size
            print(f"{edition}: {done[edition]} ({size / 1e6:.1f} MB) in {time.perf_counter() - start:.0f} s")
        browser.close()
    return done


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("editions", nargs="*", default=list(EDITIONS), help="en, zh_TW, zh_CN (default: all)")
    build(tuple(parser.parse_args().editions))

"""The website: it builds with warnings as errors, and in a real browser with
no network, math is typeset, figures load and widgets render.

The browser is Debian's Chromium (``make browser-deps``) driven by playwright;
every request that leaves the local server is blocked and recorded, so a page
that depends on a CDN fails here.  Screenshots land in ``_build/screenshots``.
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import sys
import threading
from pathlib import Path

import pytest
from helpers import CJK, build_lock, built_site, toc_docnames

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
sys.path.insert(0, str(ROOT / "book" / "tools"))

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# Generous limits for each wait in a page: on a busy machine a heavy chapter page takes tens of seconds.
WAIT_MS = 120_000


@pytest.fixture(scope="module")
def site():
    html = built_site()  # raises on any warning
    assert (html / "index.html").exists()
    return html


def test_book_builds_without_warnings(site):
    pages = list(site.rglob("*.html"))
    assert len(pages) >= 16
    chapters = [doc for doc in toc_docnames() if doc.startswith("chapters/")]
    assert len(chapters) >= 15 and "chapters/13_rewards" in chapters
    for doc in chapters:  # every chapter of the table of contents became a page
        assert (site / f"{doc}.html").exists(), doc


def test_the_executing_build_loads_its_config(tmp_path):
    """`make book EXECUTE=1` builds from a copy of _config.yml in _build/: its paths must still resolve.

    One page, no notebooks: this checks the configuration (extensions, paths,
    jupyter-cache settings), not the execution, which nbval covers.
    """
    import yaml
    from build import build, config_path

    config = yaml.safe_load(config_path(execute=True).read_text(encoding="utf-8"))
    assert config["execute"]["execute_notebooks"] == "cache"
    toc = tmp_path / "_toc.yml"
    toc.write_text("format: jb-book\nroot: book/intro\n", encoding="utf-8")
    with build_lock():  # it writes its config copy into _build/, beside the site's build
        html = build(execute=True, strict=False, toc=toc, output=tmp_path)  # links to other pages dangle here
    assert "MathJax" in (html / "book" / "intro.html").read_text(encoding="utf-8")


def test_site_assets_are_local(site):
    """No page loads a script or stylesheet from another host."""
    external = re.compile(r'<(?:script|link)[^>]+(?:src|href)="(https?:)?//[^"]+"')
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert not external.search(text), f"{page.relative_to(site)} loads {external.search(text).group(0)}"
    assert (site / "_static" / "vendor" / "mathjax" / "tex-chtml.js").exists()


def _pages_with_widgets(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if WIDGET_VIEW in p.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def browser(site):
    if CHROMIUM is None:
        pytest.fail("Chromium is missing: run `make browser-deps` (Debian package chromium)")
    from playwright.sync_api import sync_playwright

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # keep the test log readable
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        yield b, f"http://127.0.0.1:{server.server_port}"
        b.close()
    server.shutdown()


def _open(browser, url_path: str):
    """Load a page with every non-local request blocked; return (page, blocked, errors).

    ``errors`` collects JavaScript exceptions and local requests that failed (HTTP >= 400).
    """
    b, origin = browser
    context = b.new_context(viewport={"width": 1280, "height": 900})
    blocked: list[str] = []
    errors: list[str] = []

    def route(r):
        if r.request.url.startswith(origin) or r.request.url.startswith("data:"):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    # a local file the page asks for but the site lacks (a font, a script chunk) is an error too
    page.on(
        "response",
        lambda r: (
            errors.append(f"HTTP {r.status}: {r.url}")
            if r.status >= 400 and not r.url.endswith("/favicon.ico")
            else None
        ),
    )
    # Requests in flight, so that none is still pending (and its failure unrecorded) when the checks run.
    pending: set = set()
    page.on("request", lambda r: pending.add(r))
    page.on("requestfinished", lambda r: pending.discard(r))
    page.on("requestfailed", lambda r: pending.discard(r))
    page.goto(f"{origin}/{url_path}", wait_until="load", timeout=WAIT_MS)
    # Wait for what the checks look at, not for "no request for 500 ms" (networkidle), which a busy
    # machine missed for 30 s on a heavy page: every image has finished loading (or failed: the
    # checks judge that), MathJax has typeset, widgets have rendered.
    page.wait_for_function("Array.from(document.images).every(i => i.complete)", timeout=WAIT_MS)
    if page.evaluate("!!document.querySelector('script[src*=\"mathjax\" i]')"):
        _wait_for_math(page)
    if page.evaluate(f"!!document.querySelector('script[type=\"{WIDGET_VIEW}\"]')"):
        page.wait_for_selector(".jupyter-widgets", timeout=WAIT_MS)
    quiet = 0  # then, as networkidle but with the generous limit: no request in flight for 500 ms,
    for _ in range(WAIT_MS // 100):  # so the fonts and scripts these started have loaded or failed
        quiet = 0 if pending else quiet + 1
        if quiet == 5:
            break
        page.wait_for_timeout(100)
    assert not pending, f"{url_path}: requests still pending after {WAIT_MS / 1000:.0f} s: {[r.url for r in pending]}"
    return page, blocked, errors


def _wait_for_math(page) -> int:
    page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=WAIT_MS)
    page.evaluate("MathJax.startup.promise.then(() => { window.__typeset = true; })")
    page.wait_for_function("window.__typeset === true", timeout=WAIT_MS)
    return page.evaluate("document.querySelectorAll('mjx-container').length")


def test_math_is_typeset_offline(browser):
    page, blocked, errors = _open(browser, "book/intro.html")
    assert _wait_for_math(page) >= 1
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "intro.png"), full_page=False)
    assert not blocked, f"requests left the site: {blocked}"
    assert not errors, errors


def test_figures_load_and_widgets_render(browser, site):
    widget_pages = _pages_with_widgets(site)
    assert widget_pages, "no page carries widget state: store it when executing (make execute)"
    for path in widget_pages:
        rel = path.relative_to(site).as_posix()
        page, blocked, errors = _open(browser, rel)
        page.wait_for_selector(".jupyter-widgets", timeout=WAIT_MS)
        n_widgets = page.evaluate("document.querySelectorAll('.jupyter-widgets').length")
        assert n_widgets >= 1, rel
        images = page.evaluate(
            "Array.from(document.querySelectorAll('img'))"
            ".map(i => [i.src.slice(0, 60), i.complete && i.naturalWidth > 0])"
        )
        broken = [src for src, ok in images if not ok]
        assert not broken, f"{rel}: images that did not load: {broken}"
        _wait_for_math(page)
        untypeset = page.evaluate(
            "Array.from(document.querySelectorAll('.math')).filter(e => !e.querySelector('mjx-container')).length"
        )
        assert untypeset == 0, f"{rel}: {untypeset} formulas were not typeset"
        page.screenshot(path=str(SHOTS / (path.stem + ".png")), full_page=False)
        assert not blocked, f"{rel}: requests left the site: {blocked}"
        assert not errors, f"{rel}: {errors}"


def test_every_chapter_has_its_figures(browser, site):
    """Each chapter page shows at least one figure, and every image on it loads."""
    for path in sorted((site / "chapters").glob("*.html")):
        rel = path.relative_to(site).as_posix()
        page, blocked, errors = _open(browser, rel)
        images = page.evaluate(
            "Array.from(document.querySelectorAll('.cell_output img, .output img'))"
            ".map(i => i.complete && i.naturalWidth > 0)"
        )
        assert all(images), f"{rel}: {images.count(False)} images did not load"
        assert not blocked, f"{rel}: requests left the site: {blocked}"
        assert not errors, f"{rel}: {errors}"


MAX_PAGE_BYTES = 1_200_000  # the reader's pass (issue 14): a page a phone can load


def test_no_built_page_is_heavier_than_the_limit(site):
    """Every built HTML page, its embedded figures included, stays under 1.2 MB; captioned
    figures in the chapters that have had the reader's pass are numbered "Figure N.M"."""
    heavy = {
        p.relative_to(site).as_posix(): p.stat().st_size
        for p in site.rglob("*.html")
        if p.stat().st_size > MAX_PAGE_BYTES
    }
    assert not heavy, f"pages over {MAX_PAGE_BYTES / 1e6:.1f} MB (bytes): {heavy}"
    for n, stem in enumerate(("01_data", "02_forward", "03_loss", "04_backprop", "05_optimizers"), 1):
        text = (site / "chapters" / f"{stem}.html").read_text(encoding="utf-8")
        numbers = re.findall(rf"Figure {n}\.(\d+)", text)
        assert "1" in numbers, f"chapters/{stem}.html shows no 'Figure {n}.1': figure numbering is off"


# The Chinese editions (issue 17): zh-tw/ and zh-cn/ beside the English root, one switcher on every page.
EDITIONS = {"": "en", "zh-tw": "zh-TW", "zh-cn": "zh-CN"}
# the chapter the browser opens in every edition: it has math, figures and widgets
EDITION_CHAPTER = "chapters/02_forward.html"


def _english_pages(site: Path) -> list[str]:
    """The pages the table of contents lists, plus Sphinx's own (index, search): not stale files."""
    return sorted(f"{name}.html" for name in toc_docnames()) + ["genindex.html", "search.html"]


# each edition's own downloads: its PDF (when make pdf or test_pdf printed it) and its zip of notebooks
DOWNLOADS = {".pdf", ".zip"}


def _size(folder: Path) -> int:
    """Bytes of the pages and their assets, without the edition's downloads."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and p.suffix not in DOWNLOADS)


def test_every_page_exists_in_every_edition_in_its_language(site):
    pages = _english_pages(site)
    assert len(pages) >= 20
    for folder, lang in EDITIONS.items():
        for rel in pages:
            path = site / folder / rel
            assert path.exists(), f"{folder}/{rel} is missing"
            head = path.read_text(encoding="utf-8")[:4000]
            assert f'<html lang="{lang}"' in head, f"{folder or 'English'} {rel}: wrong or missing <html lang>"


def test_the_language_switcher_links_resolve_to_the_same_page(site):
    link = re.compile(r'<a class="gt-lang-link" href="([^"]+)" hreflang="([^"]+)"')
    for folder in EDITIONS:
        for rel in _english_pages(site):
            if rel in ("genindex.html", "search.html"):
                continue  # Sphinx's generated pages: no article to carry the switcher
            page = site / folder / rel
            found = link.findall(page.read_text(encoding="utf-8"))
            assert len(found) == 2, f"{folder}/{rel}: {len(found)} switcher links, expected 2"
            for href, _ in found:
                target = (page.parent / href).resolve()
                assert target.exists(), f"{folder}/{rel}: switcher link {href} does not resolve"
                assert target.as_posix().endswith(rel), f"{folder}/{rel}: {href} is not the same page"


def test_the_chinese_editions_share_the_vendored_assets(site):
    """MathJax, the widget manager and every figure exist once; the site is at most twice the English
    (downloads aside: each edition has its own PDF and zip)."""
    for folder in ("zh-tw", "zh-cn"):
        assert not (site / folder / "_static" / "vendor").exists(), f"{folder} has its own copy of the vendored scripts"
        assert not list((site / folder).glob("_images/*.png")), f"{folder} has its own copies of the figures"
    english = _size(site) - _size(site / "zh-tw") - _size(site / "zh-cn")
    assert _size(site) <= 2 * english, f"site {_size(site) / 1e6:.0f} MB, English alone {english / 1e6:.0f} MB"


def test_one_chapter_in_each_edition_renders_whole(browser, site):
    """Math typeset, figures loaded, widgets rendered, switcher links answer; on a Chinese page every
    prose paragraph (not code, not outputs) contains Chinese."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for folder in EDITIONS:
        rel = f"{folder}/{EDITION_CHAPTER}".lstrip("/")
        page, blocked, errors = _open(browser, rel)
        assert _wait_for_math(page) >= 1, f"{rel}: no math typeset"
        page.wait_for_selector(".jupyter-widgets", timeout=WAIT_MS)
        images = page.evaluate("Array.from(document.images).map(i => i.complete && i.naturalWidth > 0)")
        assert images and all(images), f"{rel}: {images.count(False)} of {len(images)} images did not load"
        hrefs = page.evaluate("Array.from(document.querySelectorAll('.gt-languages a')).map(a => a.href)")
        assert len(hrefs) == 2
        for href in hrefs:
            assert page.request.get(href).status == 200, f"{rel}: switcher link {href} does not answer"
        if folder:
            paragraphs = page.evaluate(
                "Array.from(document.querySelectorAll('article p, article li, article figcaption'))"
                ".filter(p => !p.closest('.cell_output, .output, pre, .highlight, .gt-languages, .jupyter-widgets'))"
                ".map(p => { const c = p.cloneNode(true);"
                " c.querySelectorAll('mjx-container, code, .math, cite, .citation').forEach(e => e.remove());"
                " return c.textContent.trim(); })"
            )
            english = [t for t in paragraphs if re.search(r"[A-Za-z]{4,}", t) and not CJK.search(t)]
            assert not english, f"{rel}: {len(english)} paragraphs without Chinese, first: {english[0][:100]!r}"
        page.screenshot(path=str(SHOTS / f"{folder or 'en'}-{Path(EDITION_CHAPTER).stem}.png"), full_page=False)
        assert not blocked, f"{rel}: requests left the site: {blocked}"
        assert not errors, f"{rel}: {errors}"


@pytest.mark.parametrize(
    "folder, query, chapter",
    [
        ("zh-tw", "梯度", "04_backprop"),
        ("zh-tw", "混合精度", "07_memory_precision"),
        ("zh-cn", "梯度", "04_backprop"),
        ("zh-cn", "混合精度", "07_memory_precision"),
    ],
)
def test_chinese_search_finds_the_chapter(browser, folder, query, chapter):
    """Sphinx's Chinese search (words segmented by jieba) finds the chapter about the word."""
    page, blocked, errors = _open(browser, f"{folder}/search.html?q={query}")
    page.wait_for_selector("#search-results ul.search li", timeout=WAIT_MS)
    found = page.evaluate("Array.from(document.querySelectorAll('#search-results ul.search li a')).map(a => a.href)")
    assert any(f"chapters/{chapter}.html" in href for href in found), f"{query} in {folder}: {found[:8]}"
    assert all(f"/{folder}/" in href for href in found), f"{folder}'s search leads out of its edition"
    assert not errors, errors


def test_every_prose_paragraph_of_the_chinese_editions_is_in_chinese(site):
    """Every heading, paragraph, list item and caption of every Chinese page contains Chinese, outside
    code, outputs and math; what stays English on purpose is named: a term copied unchanged in its
    catalog (FlashAttention), the glossary index's English column, and the API pages' docstrings."""
    from bs4 import BeautifulSoup
    from translations import catalogs

    kept = {m.id for c in catalogs().values() for m in c if m.id and m.string == m.id}
    outside = ".cell_output, .output, pre, .highlight, .gt-languages, .jupyter-widgets, .citation, .bibliography"
    english = []
    for folder in ("zh-tw", "zh-cn"):
        for rel in _english_pages(site):
            if rel in ("genindex.html", "search.html") or rel.startswith("book/api"):  # docstrings stay English
                continue
            article = BeautifulSoup((site / folder / rel).read_text(encoding="utf-8"), "html.parser").article
            skip = {id(e) for block in article.select(outside) for e in block.descendants}
            for element in article.select("p, li, figcaption, h1, h2, h3, h4, dt, th"):
                if id(element) in skip or element.find_parent("td") and element.select("a[href*='#term-']"):
                    continue
                for e in element.select(".math, code, a.headerlink"):
                    e.decompose()
                text = " ".join(element.get_text(" ").split())
                text = re.sub(r"^\d+(\.\d+)*\.? ", "", text)  # a heading's section number
                if re.search(r"[A-Za-z]{4,}", text) and not CJK.search(text) and text not in kept:
                    english.append(f"{folder}/{rel}: {text[:80]!r}")
    assert not english, f"{len(english)} paragraphs without Chinese, first: {english[:5]}"

"""The Chinese edition's catalogs (``make translations``).

English is the source text.  ``extract`` runs Sphinx's gettext builder over the
book (one catalog per page), keeps the messages a reader reads (not math
blocks, not code listings, not bare numbers, not the API pages' docstrings),
and merges them into the Traditional Chinese catalogs under
``book/locales/zh_TW/LC_MESSAGES/`` with sphinx-intl: a new English sentence
arrives as an empty message, a changed one as a fuzzy one, and the count of
untranslated messages per page is printed.

The Simplified catalogs are never committed: ``simplified`` writes them into
``_build/locales/zh_CN/`` from the Traditional ones with OpenCC (``tw2sp``),
then the committed term table ``book/locales/zh_CN/terms.tsv`` (mainland terms
OpenCC misses) and the per-message overrides ``book/locales/zh_CN/overrides.po``; a quotation
of the source articles listed in ``book/locales/zh_CN/quotations.tsv`` keeps the article's wording.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, write_po

sys.path.insert(0, str(Path(__file__).parent))
from vendor import ROOT  # noqa: E402

LOCALES = ROOT / "book" / "locales"
TW = LOCALES / "zh_TW" / "LC_MESSAGES"
CN_SOURCES = LOCALES / "zh_CN"
BUILD_LOCALES = ROOT / "_build" / "locales"
# pages whose docstrings stay English: only the page's own prose is translated
API_PAGES = ("book/api", "book/api_scaling", "book/api_posttrain")

# dollar math; an escaped \\$ is a plain dollar sign
_MATH = re.compile(r"(?<!\\)\$\$.*?(?<!\\)\$\$|(?<!\\)\$[^$\n]+?(?<!\\)\$", re.S)
_CODE = re.compile(r"`[^`]*`")


def needs_translation(msgid: str) -> bool:
    """Whether a reader needs this message in Chinese: prose, not math, code or bare numbers."""
    if msgid.startswith("\\begin{Verbatim}") or "\\PY{" in msgid:
        return False  # a code listing's LaTeX form
    if msgid.startswith("\n"):
        return False  # a display-math block
    rest = _CODE.sub("", _MATH.sub("", msgid))
    return re.search(r"[A-Za-z]{2,}", rest) is not None


def _from_page(message, docname: str) -> bool:
    """For the API pages: whether the message comes from the page itself, not a docstring."""
    return any(
        path.endswith((docname + ".md", docname + ".ipynb")) and "docstring" not in path
        for path, _ in message.locations
    )


def gettext_config(tmp: Path) -> Path:
    """A copy of ``_config.yml`` for the gettext builder: one catalog per page."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    sphinx = config.setdefault("sphinx", {})
    sphinx.setdefault("config", {})["gettext_compact"] = False
    local = sphinx.get("local_extensions") or {}
    for name, folder in local.items():
        local[name] = str((ROOT / folder).resolve())
    out = tmp / "_config_gettext.yml"
    out.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return out


def extract(out: Path) -> dict[str, Catalog]:
    """Run the gettext builder and return the filtered templates, one per page (docname -> catalog)."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cmd = [
            str(Path(sys.executable).with_name("jupyter-book")),
            "build",
            str(ROOT),
            "--builder",
            "custom",
            "--custom-builder",
            "gettext",
            "--path-output",
            str(tmp),
            "--config",
            str(gettext_config(tmp)),
            "-W",
            "--keep-going",
        ]
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        templates = {}
        for pot in sorted((tmp / "_build" / "gettext").rglob("*.pot")):
            docname = pot.relative_to(tmp / "_build" / "gettext").with_suffix("").as_posix()
            source = read_catalog(pot)
            catalog = Catalog(project="How a GPU Trains AI", fuzzy=False)
            for message in source:
                if not message.id or not needs_translation(message.id):
                    continue
                if docname in API_PAGES and not _from_page(message, docname):
                    continue
                # babel flags a "10%" as a Python format string; this is prose, not a format
                catalog.add(message.id).flags.discard("python-format")
            templates[docname] = catalog
    for docname, catalog in templates.items():
        write_catalog(out / f"{docname}.pot", catalog)
    return templates


def _merge(pot_dir: Path) -> None:
    cmd = [str(Path(sys.executable).with_name("sphinx-intl")), "update", "-p", str(pot_dir)]
    cmd += ["-d", str(LOCALES), "-l", "zh_TW", "-w", "0"]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)


def _strip_format_flags() -> None:
    """babel flags a message with "10%" as a Python format string on every read; these are prose."""
    for po in TW.rglob("*.po"):
        catalog = read_catalog(po)
        flagged = [m for m in catalog if "python-format" in m.flags]
        for message in flagged:
            message.flags.discard("python-format")
        if flagged:
            write_catalog(po, catalog)


def update(pot_dir: Path, pages: list[str] | None = None) -> None:
    """Merge the templates into the zh_TW catalogs (sphinx-intl keeps translations, marks changes fuzzy).

    With ``pages``, only those pages' catalogs are touched.
    """
    if pages:
        with tempfile.TemporaryDirectory() as tmp:
            for page in pages:
                target = Path(tmp) / f"{page}.pot"
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes((pot_dir / f"{page}.pot").read_bytes())
            _merge(Path(tmp))
        return
    _merge(pot_dir)
    _strip_format_flags()
    # sphinx-intl keeps catalogs of pages that no longer exist; drop them
    wanted = {p.relative_to(pot_dir).with_suffix(".po") for p in pot_dir.rglob("*.pot")}
    for po in TW.rglob("*.po"):
        if po.relative_to(TW) not in wanted:
            po.unlink()
    for po in TW.rglob("*.mo"):
        po.unlink()


def catalogs(folder: Path = TW) -> dict[str, Catalog]:
    """The catalogs under ``folder``, by docname."""
    return {po.relative_to(folder).with_suffix("").as_posix(): read_catalog(po) for po in sorted(folder.rglob("*.po"))}


def read_catalog(path: Path) -> Catalog:
    """One catalog file."""
    with open(path, "rb") as f:
        return read_po(f)


def write_catalog(path: Path, catalog: Catalog) -> None:
    """Write a catalog as the committed ones are written: one line per message, no wrapping."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # into a file of this process, then renamed over the catalog: a reader (a book build in another
    # test worker, Sphinx) sees the old catalog or the new one, never a half-written one
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write_po(f, catalog, width=0)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def messages_dir(edition: str) -> Path:
    """Where an edition's catalogs are: committed for zh_TW, generated under _build/ for zh_CN."""
    return TW if edition == "zh_TW" else BUILD_LOCALES / edition / "LC_MESSAGES"


def untranslated(catalog: Catalog) -> list[str]:
    """The messages of a catalog with no translation, or a fuzzy one."""
    return [m.id for m in catalog if m.id and (not m.string or m.fuzzy)]


def report(folder: Path = TW) -> int:
    """Print the untranslated count per page; return the total."""
    total = 0
    for docname, catalog in catalogs(folder).items():
        messages = [m for m in catalog if m.id]
        missing = untranslated(catalog)
        total += len(missing)
        print(f"{docname:40s} {len(messages) - len(missing):5d} / {len(messages):5d} translated")
    print(f"{'untranslated in all':40s} {total:5d}")
    return total


_ROLE = re.compile(r"\{([a-z:-]+)\}`([^`]*)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_CJK = re.compile(r"[\u3400-\u9fff]")


def markup(text: str) -> dict[str, list[str]]:
    """What a translation must carry over unchanged: math, code, role targets, link targets, numbers."""
    roles = []
    for role, content in _ROLE.findall(text):
        target = re.search(r"<([^<>]+)>\s*$", content)
        roles.append(f"{{{role}}}{(target.group(1) if target else content).strip()}")
    rest = _ROLE.sub(" ", text)
    code = _CODE.findall(rest)
    rest = _CODE.sub(" ", rest)
    math = _MATH.findall(rest)
    rest = _MATH.sub(" ", rest)
    links = _LINK.findall(rest)
    numbers = _NUMBER.findall(_LINK.sub(" ", rest))
    return {
        "math": sorted(math),
        "code": sorted(code),
        "roles": sorted(roles),
        "links": sorted(links),
        "numbers": numbers,
    }


def problems(msgid: str, msgstr: str) -> list[str]:
    """Why a translation does not fit its English message (empty when it does)."""
    if not msgstr:
        return []
    found = []
    if msgstr != msgid and not _CJK.search(msgstr):
        found.append("no Chinese in the translation (copy the English exactly if it stays English)")
    source, target = markup(msgid), markup(msgstr)
    for kind in ("math", "code", "roles", "links"):
        if source[kind] != target[kind]:
            lost = [x for x in source[kind] if x not in target[kind]]
            added = [x for x in target[kind] if x not in source[kind]]
            found.append(f"{kind} differ: English has {lost or '(same items, different count)'}, Chinese has {added}")
    missing = list(source["numbers"])
    for n in target["numbers"]:
        if n in missing:
            missing.remove(n)
    if missing:
        found.append(f"numbers of the English missing from the Chinese: {missing}")
    return found


def check(folder: Path = TW) -> int:
    """Print every translation whose markup or numbers differ from its English; return how many."""
    bad = 0
    for docname, catalog in catalogs(folder).items():
        for message in catalog:
            if message.id and message.string:
                for problem in problems(message.id, message.string):
                    bad += 1
                    print(f"{docname}: {problem}\n    msgid: {message.id[:100]}")
    return bad


def terms(path: Path = CN_SOURCES / "terms.tsv") -> list[tuple[str, str]]:
    """The committed term table: (Taiwan term, mainland term), longest first."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            taiwan, mainland, *_ = line.split("\t")
            rows.append((taiwan, mainland))
    return sorted(rows, key=lambda row: -len(row[0]))


@functools.lru_cache(maxsize=4)
def _shield(table: tuple[tuple[str, str], ...]) -> tuple[re.Pattern, dict[str, str]]:
    """The table's terms as one pattern (a space in a term is optional), and term -> mainland term."""
    pattern = re.compile("|".join(re.escape(t).replace(r"\ ", " ?") for t, _ in table))
    return pattern, {t.replace(" ", ""): m for t, m in table}


def quotations(path: Path = CN_SOURCES / "quotations.tsv") -> list[str]:
    """The committed quotations of the source articles, as the zh_TW catalogs quote them in 「」."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            rows.append(line.split("\t")[0])
    return sorted(rows, key=len, reverse=True)


def to_simplified(text: str, table: list[tuple[str, str]], converter, quotes: dict[str, str] | None = None) -> str:
    """Taiwan Traditional -> mainland Simplified: a quotation of the source articles (``quotes``:
    「quoted」 -> its characters in Simplified script) stays the article's wording; then the term
    table (its matches are shielded from OpenCC by placeholders), then OpenCC tw2sp for the rest."""
    pattern, index = _shield(tuple(table))
    found = []

    def shield(match: re.Match) -> str:
        found.append(index[match.group(0).replace(" ", "")])
        return f"\ue000{len(found) - 1}\ue001"

    def keep(match: re.Match) -> str:
        found.append(f"「{quotes[match.group(1)]}」")
        return f"\ue000{len(found) - 1}\ue001"

    if quotes:
        text = _quote_pattern(tuple(quotes)).sub(keep, text)
    converted = converter.convert(pattern.sub(shield, text))
    converted = re.sub("\ue000(\\d+)\ue001", lambda m: found[int(m.group(1))], converted)
    # a "Traditional / Simplified" pair (the glossary's) is one word once both are Simplified
    converted = _PAIR.sub(lambda m: m.group(1) if _CJK.search(m.group(1)) else m.group(0), converted)
    # mainland quotation marks
    return converted.translate(_QUOTES)


@functools.lru_cache(maxsize=4)
def _quote_pattern(quotes: tuple[str, ...]) -> re.Pattern:
    return re.compile("「(" + "|".join(re.escape(q) for q in sorted(quotes, key=len, reverse=True)) + ")」")


def simplifier():
    """``to_simplified`` with OpenCC's tw2sp, the committed term table and the articles' quotations
    (converted character by character, OpenCC t2s): text -> text."""
    import opencc

    converter, table, characters = opencc.OpenCC("tw2sp"), terms(), opencc.OpenCC("t2s")
    quotes = {q: characters.convert(q) for q in quotations()}
    return lambda text: to_simplified(text, table, converter, quotes)


_EDGE = "\\s（）()「」『』，。；：、"
_WORD = rf"[^{_EDGE}/]+"
_PAIR = re.compile(rf"(?<![^{_EDGE}])((?:{_WORD} )?{_WORD}) / \1(?![^{_EDGE}])")
_QUOTES = str.maketrans({"「": "“", "」": "”", "『": "‘", "』": "’"})


def simplified(out: Path = BUILD_LOCALES / "zh_CN" / "LC_MESSAGES") -> int:
    """Write the zh_CN catalogs from the zh_TW ones; return the number of messages converted."""
    convert = simplifier()
    overrides = {m.id: m.string for m in read_catalog(CN_SOURCES / "overrides.po") if m.id}
    count = 0
    for docname, catalog in catalogs(TW).items():
        for message in catalog:
            if message.id and message.string and not message.fuzzy:
                message.string = overrides.get(message.id) or convert(message.string)
                count += 1
        catalog.locale = "zh_CN"
        write_catalog(out / f"{docname}.po", catalog)
    return count


def search_terms(edition: str, out: Path) -> Path:
    """A jieba user dictionary of the glossary's Chinese terms, for the edition's search index.

    jieba alone cuts 混合精度 into 混合 / 精度, so a reader searching the whole term finds
    nothing; with the book's terms in its dictionary the index holds the terms and their parts.
    The terms come from the glossary's Chinese -> English index (Traditional / Simplified).
    """
    text = (ROOT / "book" / "glossary.md").read_text(encoding="utf-8")
    words = set()
    for row in re.findall(r"^\| ([^|]+) \|", text.split("## Chinese", 1)[-1], re.M):
        forms = [form.strip() for form in row.split(" / ")]
        form = forms[0] if edition == "zh_TW" else forms[-1]
        words.update(part for part in form.split() if _CJK.search(part))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(f"{word} 100000\n" for word in sorted(words)), encoding="utf-8")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("update", help="extract the English messages and merge them into the zh_TW catalogs")
    up.add_argument("pages", nargs="*", help="only these pages (docnames such as book/glossary)")
    sub.add_parser("report", help="print the untranslated count per page")
    sub.add_parser("check", help="list translations whose math, code, roles, links or numbers differ from the English")
    args = parser.parse_args()
    if args.command == "check":
        sys.exit(1 if check() else 0)
    if args.command == "update":
        pot_dir = ROOT / "_build" / "gettext"
        extract(pot_dir)
        update(pot_dir, args.pages)
    report()


if __name__ == "__main__":
    main()

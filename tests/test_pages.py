"""The reader's pass over the pages: light notebooks, short visible code, no "seed", exercises.

These read the committed notebooks and the MyST pages as files; nothing is
executed or built (the built-page size limit is in ``tests/test_site.py``,
which builds the site).

- every notebook in ``chapters/`` and ``book/`` stays under 1.5 MB, outputs included;
- no code cell that a reader sees unfolded (no ``hide-input``, ``hide-cell`` or
  ``remove-*`` tag) runs over 30 lines, and no line of any code cell, folded or
  not, is wider than the page's code column (88 characters);
- the words "seed" and "seeds" appear nowhere in the chapters or the book's
  pages, outputs included: the four source articles are cited by their titles;
- every chapter listed in ``CHAPTERS_WITH_EXERCISES`` ends with an
  "Exercises" section of 4 to 6 exercises, each followed by a folded worked
  solution and a folded code cell that checks the answer with ``assert``;
- a checked cell (``# NBVAL_CHECK_OUTPUT``) whose stored output holds a number
  with a fraction or an exponent says, on a line ``# same on every CPU: why``,
  why that number cannot change with the CPU or its math library: an error
  magnitude or a measured rate must be asserted against a bound instead;
- every figure a cell draws carries a numbered caption (MyST-NB's
  ``mystnb.figure`` cell metadata), and the prose refers to each by number;
  interactive figures (frame players, sliders) are captioned the same way
  ("Interactive: ..."), or by a ``**Figure (interactive).**`` paragraph below.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb")) + sorted((ROOT / "book").glob("*.ipynb"))
PAGES = sorted((ROOT / "book").glob("*.md"))  # book/tools/ is not a page
MAX_NOTEBOOK_BYTES = 1_500_000
MAX_VISIBLE_LINES = 30
# The code column of a notebook page holds 90 characters: measured in Chromium at a 1400 px window on
# sphinx-book-theme (a <pre>'s clientWidth over one monospace character's width). Wider lines scroll sideways.
MAX_CODE_WIDTH = 88
FOLDED = ("hide-input", "hide-cell")
# Chapters that have been through the reader's pass; the others join as they get theirs.
CHAPTERS_WITH_EXERCISES = [
    "01_data",
    "02_forward",
    "03_loss",
    "04_backprop",
    "05_optimizers",
    "06_training",
    "07_memory_precision",
    "08_parallelism",
    "08b_parallelism_deeper",
    "09_experts",
    "10_fp8",
    "11_inside_the_chip",
    "12_fine_tuning",
    "13_rewards",
    "14_scaling_laws",
]
SEED = re.compile(r"\bseeds?\b", re.IGNORECASE)
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml")


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def folded(cell: dict) -> bool:
    return any(t in FOLDED or t.startswith("remove") for t in tags(cell))


def output_text(cell: dict) -> str:
    """Everything a cell's outputs would show as text (streams, plain text, HTML, errors)."""
    parts = []
    for out in cell.get("outputs", []):
        parts.append("".join(out.get("text", "")))
        for mime, value in out.get("data", {}).items():
            if mime.startswith("text/"):
                parts.append("".join(value))
        parts.extend(out.get("traceback", []))
    return "\n".join(parts)


def images(cell: dict) -> int:
    return sum(any(m in out.get("data", {}) for m in IMAGE_TYPES) for out in cell.get("outputs", []))


def name(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=name)
def test_notebook_is_under_the_size_limit(path):
    size = path.stat().st_size
    assert size < MAX_NOTEBOOK_BYTES, (
        f"{name(path)} is {size / 1e6:.2f} MB (limit {MAX_NOTEBOOK_BYTES / 1e6:.1f} MB): use fewer or smaller "
        "animation frames, a lower dpi, gputrain.plots.compact_inline() (palette PNGs, JPEG photos)"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=name)
def test_no_visible_code_cell_is_longer_than_thirty_lines(path):
    long = [
        (i, len(source(c).splitlines()))
        for i, c in enumerate(cells(path))
        if c["cell_type"] == "code" and not folded(c) and len(source(c).splitlines()) > MAX_VISIBLE_LINES
    ]
    assert not long, (
        f"{name(path)}: visible code cells over {MAX_VISIBLE_LINES} lines (cell, lines): {long}; "
        "split them, or fold bookkeeping with the tag hide-input"
    )


def prose(text: str) -> str:
    """Markdown without its code: the API's own names (``seed=``, ``cfg.seed``) are not prose."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))


CHECKED = "# NBVAL_CHECK_OUTPUT"
SAME_EVERYWHERE = re.compile(r"^# same on every CPU: \S", re.M)
# a number with a fraction or an exponent (1.5, .5, 8e-07, 3.4e+38), not part of a version or a name
FRACTIONAL = re.compile(r"(?<![\w.])[-+]?(?:\d*\.\d+(?:e[-+]?\d+)?|\d+e[-+]?\d+)(?![\w.])")


def unexplained_fractions(nb_cells: list[dict]) -> list[tuple[int, list[str]]]:
    """Checked cells that print a fractional number without saying why it is the same on every CPU."""
    found = []
    for i, c in enumerate(nb_cells):
        if c["cell_type"] != "code" or CHECKED not in source(c) or SAME_EVERYWHERE.search(source(c)):
            continue
        numbers = FRACTIONAL.findall(output_text(c))
        if numbers:
            found.append((i, numbers[:4]))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=name)
def test_checked_cells_print_nothing_a_cpu_can_change(path):
    # "dk 8e-07" printed "6e-07" on another CPU, "11.21 FP32 eps" printed "8.58": a checked cell
    # compared those digits with the machine that recorded them, and failed on the next one
    bad = unexplained_fractions(cells(path))
    assert not bad, (
        f"{name(path)}: checked cells print fractional numbers (cell, first numbers): {bad}; print a "
        "verdict and assert the magnitude against a bound, or add '# same on every CPU: <why>' if the "
        "numbers are exact (integers, format constants, published figures)"
    )


def test_the_checked_cell_rule_can_fail():
    def cell(src, out):
        return {"cell_type": "code", "source": src, "outputs": [{"output_type": "stream", "text": out}]}

    measured = cell(f"{CHECKED}\nprint(err)", "dq 4e-07, dk 8e-07\n")
    assert unexplained_fractions([measured]) == [(0, ["4e-07", "8e-07"])]
    assert unexplained_fractions([cell(f"{CHECKED}\nprint(r)", "11.21 FP32 eps\n")]) == [(0, ["11.21"])]
    exact = cell(f"{CHECKED}\n# same on every CPU: IEEE constants\nprint(m)", "3.4e+38\n")
    counts = cell(f"{CHECKED}\nprint(n)", "torch 2.13.0, 16,384 weights, shape (4, 8)\n")
    unchecked = cell("print(err)", "8e-07\n")
    assert unexplained_fractions([exact, counts, unchecked]) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=name)
def test_no_code_line_is_wider_than_the_code_column(path):
    wide = [
        (i, len(line))
        for i, c in enumerate(cells(path))
        if c["cell_type"] == "code"
        for line in source(c).splitlines()
        if len(line) > MAX_CODE_WIDTH
    ]
    assert not wide, (
        f"{name(path)}: code lines wider than {MAX_CODE_WIDTH} characters (cell, width): {wide[:10]}"
        f"{' ...' if len(wide) > 10 else ''}; they scroll sideways on the page: wrap them"
    )


@pytest.mark.parametrize("path", NOTEBOOKS + PAGES, ids=name)
def test_the_word_seed_is_gone_from_the_pages(path):
    """The source articles were once called 'seeds' in our notes; in the book they go by their titles.

    Prose and what cells print are checked; code is not, since TrainConfig's ``seed`` field and
    ``torch.manual_seed`` are real names a reader must be able to type.
    """
    if path.suffix == ".ipynb":
        texts = [
            (f"cell {i} {where}", text)
            for i, c in enumerate(cells(path))
            for where, text in (
                ("source", prose(source(c)) if c["cell_type"] == "markdown" else ""),
                ("output", output_text(c)),
            )
        ]
    else:
        texts = [("", prose(path.read_text(encoding="utf-8")))]
    found = [
        f"{where}: ...{text[max(0, m.start() - 30) : m.end() + 20]!r}"
        for where, text in texts
        for m in SEED.finditer(text)
    ]
    assert not found, (
        f"{name(path)}: cite the source articles by their titles, and call a fixed random "
        "start what it is, not a 'seed':\n" + "\n".join(found[:20])
    )


def test_the_seed_check_can_fail():
    """The word match catches the word and its plural in any case, and not words that contain it."""
    assert SEED.search("after Seed 000") and SEED.search("three seeds.") and SEED.search("seed=0")
    assert not SEED.search("torch.manual_seed(0)") and not SEED.search("seeded") and not SEED.search("reseed")
    assert SEED.search(prose("as seed 002 says, `cfg.seed`")) and not SEED.search(prose("set `seed=1`"))


def exercise_blocks(path: Path) -> tuple[list[dict], list[dict]]:
    """The cells after the chapter's '## Exercises' heading, and the cells before it."""
    cs = cells(path)
    heads = [
        i
        for i, c in enumerate(cs)
        if c["cell_type"] == "markdown"
        and re.match(r"##\s+Exercises\s*$", source(c).splitlines()[0] if source(c) else "")
    ]
    assert len(heads) == 1, f"{name(path)}: expected one '## Exercises' section, found {len(heads)}"
    return cs[heads[0] + 1 :], cs[: heads[0]]


@pytest.mark.parametrize("stem", CHAPTERS_WITH_EXERCISES)
def test_chapter_ends_with_exercises_and_checked_solutions(stem):
    path = ROOT / "chapters" / f"{stem}.ipynb"
    after, _ = exercise_blocks(path)
    numbers = [
        int(m.group(1))
        for c in after
        if c["cell_type"] == "markdown"
        for m in [re.match(r"\*\*Exercise (\d+)\.\*\* \S", source(c))]
        if m
    ]
    assert 4 <= len(numbers) <= 6, f"{stem}: {len(numbers)} exercises, the book asks for 4 to 6"
    assert numbers == list(range(1, len(numbers) + 1)), f"{stem}: exercises numbered {numbers}"
    for n in numbers:
        q = next(i for i, c in enumerate(after) if source(c).startswith(f"**Exercise {n}.** "))
        solution, check = after[q + 1], after[q + 2]
        assert solution["cell_type"] == "markdown" and re.match(
            rf"````\{{admonition\}} Solution to exercise {n}\n:class: dropdown\n", source(solution)
        ), f"{stem}, exercise {n}: the next cell must be a dropdown admonition 'Solution to exercise {n}'"
        assert check["cell_type"] == "code" and "hide-cell" in tags(check), (
            f"{stem}, exercise {n}: the solution must be followed by a code cell tagged hide-cell"
        )
        code = source(check)
        assert code.startswith(f"# Check for exercise {n}\n"), f"{stem}, exercise {n}: the check must say so first"
        assert re.search(r"^\s*assert\b", code, re.M), f"{stem}, exercise {n}: the check asserts nothing"
        errors = [o for o in check.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, f"{stem}, exercise {n}: the stored check failed"


@pytest.mark.parametrize("stem", CHAPTERS_WITH_EXERCISES)
def test_every_figure_has_a_numbered_caption_and_is_referred_to(stem):
    path = ROOT / "chapters" / f"{stem}.ipynb"
    cs = cells(path)
    prose = "\n".join(source(c) for c in cs if c["cell_type"] == "markdown")
    names = []
    for i, c in enumerate(cs):
        if c["cell_type"] != "code":
            continue
        figure = c.get("metadata", {}).get("mystnb", {}).get("figure")
        if images(c):
            assert images(c) == 1, f"{stem} cell {i}: {images(c)} images in one cell; one figure per cell"
            assert figure, f"{stem} cell {i} draws a figure without mystnb.figure metadata (caption and name)"
        if figure:
            assert re.fullmatch(rf"fig-{stem.split('_')[0]}-[a-z0-9-]+", figure.get("name", "")), (
                f"{stem} cell {i}: figure name {figure.get('name')!r} is not fig-{stem.split('_')[0]}-<slug>"
            )
            caption = figure.get("caption", "")
            assert caption.count(". ") >= 1 and caption.endswith("."), (
                f"{stem} cell {i}: the caption says what it shows, then its takeaway, in sentences: {caption!r}"
            )
            names.append(figure["name"])
        html = output_text(c)
        if ("<script" in html and "Animation" in html) or 'class="gt-switcher"' in html:  # a player or a slider
            # MyST-NB wraps any display output in a numbered figure, so a caption in the metadata
            # ("Interactive: ...") is preferred; a markdown caption right below is accepted too
            below = source(cs[i + 1]) if i + 1 < len(cs) else ""
            assert (figure and figure.get("caption", "").startswith("Interactive: ")) or below.startswith(
                "**Figure (interactive).** "
            ), f"{stem} cell {i}: an interactive figure needs a caption: mystnb.figure 'Interactive: ...'"
    assert len(set(names)) == len(names), f"{stem}: figure names repeat"
    unreferenced = [n for n in names if f"{{numref}}`{n}`" not in prose]
    assert not unreferenced, f"{stem}: figures never referred to by number in the prose: {unreferenced}"

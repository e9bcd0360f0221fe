"""The book's back matter: glossary, bibliography, fact check, API page, "Running at scale".

Each test reads the pages as a reader would use them and checks what a
build with warnings as errors cannot: that every glossary entry carries the
source articles' Chinese terms and names its chapter, that the bibliography holds no
uncited work (its page lists ``:all:`` entries), that every fact-check claim
has an allowed verdict and a link to the chapter section or the source that
decides it and that its arithmetic is right, that the API page documents
every public name of every ``gputrain`` module, and that every command and
configuration file in "Running at scale" is accepted by the real launcher,
Accelerate's own configuration loader and ``gputrain``'s own parser.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import json
import math
import os
import pkgutil
import posixpath
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import CJK, toc_docnames

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
# The four source articles, as the fact check names them (book/fact_check.md lists them with citations)
ARTICLES = ("《GPU怎麼訓練AI》", "gradient-descent article", "《训练：AI的天价减法课》", "secret-war article")

TERM = re.compile(r"\{term\}`([^`\n]+)`")
CITE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`\n]+)`")


# --- reading the book ------------------------------------------------------------


def markdown_of(path: Path) -> str:
    """The prose of a page: a MyST file as it is, a notebook's markdown cells joined."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return path.read_text(encoding="utf-8")


def pages() -> dict[str, str]:
    """Every page of the book's table of contents, by path relative to the root."""
    found = {}
    for entry in toc_docnames():
        for suffix in (".md", ".ipynb"):
            path = ROOT / f"{entry}{suffix}"
            if path.exists():
                found[f"{entry}{suffix}"] = markdown_of(path)
    return found


def glossary() -> dict[str, str]:
    """Glossary term -> its definition (the indented lines below it)."""
    text = (BOOK / "glossary.md").read_text(encoding="utf-8")
    block = text.split("```{glossary}", 1)[1].split("\n```", 1)[0]
    entries: dict[str, str] = {}
    term = None
    for line in block.splitlines():
        if not line.strip() or line.startswith(":"):
            continue
        if line[0].isspace():
            assert term, f"definition line before any term: {line!r}"
            entries[term] += " " + line.strip()
        else:
            term = line.strip()
            assert term.lower() not in {t.lower() for t in entries}, f"glossary term {term!r} appears twice"
            entries[term] = ""
    return entries


def bib_keys() -> list[str]:
    return re.findall(r"^@\w+\{\s*([^,\s]+)\s*,", (BOOK / "references.bib").read_text(encoding="utf-8"), re.M)


def cited(text: str) -> set[str]:
    return {k.strip() for group in CITE.findall(text) for k in group.split(",")}


def headings(path: Path) -> set[str]:
    """Section titles of a page, without the leading #'s."""
    return {m.strip() for m in re.findall(r"^#+\s+(.+)$", markdown_of(path), re.M)}


# --- glossary --------------------------------------------------------------------


def test_glossary_has_sixty_terms_with_the_articles_chinese_and_a_chapter():
    entries = glossary()
    assert len(entries) >= 60, f"only {len(entries)} glossary terms"
    for term, definition in entries.items():
        first = re.split(r"(?<!e\.g)\.\s+(?=[A-Z$])", definition.strip(), maxsplit=1)[0]
        assert CJK.search(first), f"{term!r}: the definition must start with the Chinese terms: {first!r}"
        assert re.search(r"(?i)chapters? \d|appendix|introduction", definition), (
            f"{term!r}: the definition names no chapter"
        )


def test_every_term_link_in_the_book_has_a_glossary_entry():
    known = {t.lower() for t in glossary()}
    missing = []
    for name, text in pages().items():
        for raw in TERM.findall(text):
            target = re.search(r"<([^>]+)>\s*$", raw)
            term = (target.group(1) if target else raw).strip()
            if term.lower() not in known:
                missing.append(f"{name}: {term}")
    assert not missing, "terms linked but not in book/glossary.md: " + ", ".join(missing)


def test_every_chapter_links_the_glossary():
    for chapter in CHAPTERS:
        text = markdown_of(chapter)
        if "This chapter is being written" in text:
            continue  # a placeholder has no prose yet
        assert TERM.search(text), f"{chapter.name} links no glossary term"


# --- bibliography ------------------------------------------------------------------


def test_bibliography_keys_are_unique():
    keys = bib_keys()
    dupes = {k for k in keys if keys.count(k) > 1}
    assert not dupes, f"duplicate BibTeX keys: {sorted(dupes)}"


def test_every_citation_exists_and_every_entry_is_cited():
    keys = set(bib_keys())
    uses = {name: cited(text) for name, text in pages().items()}
    unknown = sorted(f"{name}: {k}" for name, ks in uses.items() for k in ks - keys)
    assert not unknown, "cited but not in book/references.bib: " + ", ".join(unknown)
    everything = set().union(*uses.values())
    uncited = sorted(keys - everything)
    # the bibliography page lists :all: entries, so an uncited entry would show up unexplained
    assert not uncited, "in book/references.bib but cited nowhere: " + ", ".join(uncited)
    assert "```{bibliography}" in (BOOK / "bibliography.md").read_text(encoding="utf-8")


# --- API page ----------------------------------------------------------------------


def gputrain_modules() -> list[str]:
    import gputrain

    names = ["gputrain"] + [m.name for m in pkgutil.walk_packages(gputrain.__path__, "gputrain.")]
    return [n for n in names if not n.endswith("__main__")]


def public_names(module_name: str) -> list[str]:
    """Functions and classes a module defines and does not mark private (its __all__ when it has one)."""
    mod = importlib.import_module(module_name)
    exported = getattr(mod, "__all__", None)
    return sorted(
        f"{module_name}.{name}"
        for name, obj in vars(mod).items()
        if not name.startswith("_")
        and (inspect.isclass(obj) or inspect.isfunction(obj))
        and obj.__module__ == module_name
        and (exported is None or name in exported)
    )


API_PAGES = ("api.md", "api_scaling.md", "api_posttrain.md")  # the reference, split so no page outgrows the limit


def api_text() -> str:
    return "\n".join((BOOK / page).read_text(encoding="utf-8") for page in API_PAGES)


def api_rst() -> str:
    return "\n\n".join(re.findall(r"```\{eval-rst\}\n(.*?)```", api_text(), re.S))


def test_api_page_has_every_module_in_the_book_order():
    rst = api_rst()
    documented = re.findall(r"^\.\. automodule:: (\S+)", rst, re.M)
    missing = [m for m in gputrain_modules() if m not in documented]
    assert not missing, f"book/api.md documents no automodule for {missing}"
    pages = [(BOOK / page).read_text(encoding="utf-8") for page in API_PAGES]
    links = [re.findall(r"\[chapter (\d+)\]\(\.\./(chapters/\d\d_\w+)\.ipynb", text) for text in pages]
    for page, found in zip(API_PAGES, links):  # each page follows the book's order
        chapters = [int(n) for n, _ in found]
        assert chapters == sorted(chapters), f"{page}: chapter links out of order: {chapters}"
    links = [link for found in links for link in found]
    assert len({n for n, _ in links}) >= 11, f"the API pages link only chapters {sorted({n for n, _ in links})}"
    missing = sorted({path for _, path in links if not (ROOT / f"{path}.ipynb").exists()})
    assert not missing, f"the API page links chapters that do not exist: {missing}"


def test_api_page_builds_and_documents_every_public_name(tmp_path):
    """Sphinx autodoc over the page's own directives, warnings as errors, then its object inventory."""
    (tmp_path / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(BOOK / 'tools')!r})\n"
        "extensions = ['sphinx.ext.autodoc', 'sphinx.ext.napoleon', 'docstring_math']\n",
        encoding="utf-8",
    )
    (tmp_path / "index.rst").write_text("API\n===\n\n" + api_rst(), encoding="utf-8")
    out = tmp_path / "_out"
    run = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-W", "-q", "-E", str(tmp_path), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    from sphinx.util.inventory import InventoryFile

    with open(out / "objects.inv", "rb") as f:
        inventory = InventoryFile.load(f, "", posixpath.join)
    objects = {name for kind in ("py:function", "py:class", "py:exception") for name in inventory.get(kind, {})}
    wanted = [n for m in gputrain_modules() for n in public_names(m)]
    assert len(wanted) > 150, f"suspiciously few public names: {len(wanted)}"
    missing = [n for n in wanted if n not in objects]
    assert not missing, f"public names absent from the API pages {API_PAGES}: {missing}"
    # the docstrings' $...$ math arrives typeset, not as dollar signs
    html = (out / "index.html").read_text(encoding="utf-8")
    assert 'class="math' in html and "$$" not in html
    # an inline formula the converter missed (one broken across docstring lines) stays raw TeX
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    for literal in soup.select("code, pre, .math"):
        literal.decompose()
    raw = re.findall(r"\$[^$]{1,120}\$", " ".join(soup.get_text(" ").split()))
    assert not raw, f"untypeset $...$ math in a docstring (keep inline math on one line): {raw[:3]}"


def test_a_reference_to_a_reexported_name_links_to_where_it_is_documented(tmp_path):
    """Chapter 5 writes {py:class}`gputrain.optim.AdamW`; since optim became a package, the class is documented
    as gputrain.optim.adaptive.AdamW, and the reference rendered as plain text, its link lost."""
    (tmp_path / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(BOOK / 'tools')!r})\nextensions = ['sphinx.ext.autodoc', 'reexports']\n",
        encoding="utf-8",
    )
    refs = ":py:class:`gputrain.optim.AdamW`, :py:meth:`gputrain.model.GPT.generate`, :py:func:`gputrain.optim.nope`"
    (tmp_path / "index.rst").write_text(
        f"API\n===\n\n{refs}\n\n.. autoclass:: gputrain.optim.adaptive.AdamW\n\n"
        ".. autoclass:: gputrain.model.gpt.GPT\n   :members: generate\n",
        encoding="utf-8",
    )
    run = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-E", str(tmp_path), str(tmp_path / "_out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    html = (tmp_path / "_out" / "index.html").read_text(encoding="utf-8")
    links = re.findall(r'<a class="reference internal" href="#([\w.]+)"', html)  # the references, not the headers
    assert links == ["gputrain.optim.adaptive.AdamW", "gputrain.model.gpt.GPT.generate"], links


# --- Running at scale ----------------------------------------------------------------


def scale_page() -> str:
    return (BOOK / "running_at_scale.md").read_text(encoding="utf-8")


def shell_commands() -> list[list[str]]:
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", scale_page(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(shlex.split(line))
    return commands


def check_flags(parser, argv: list[str]) -> None:
    """Every --flag is spelled exactly as the parser defines it (argparse would accept abbreviations)."""
    for token in argv:
        if token.startswith("--"):
            flag = token.split("=", 1)[0]
            assert flag in parser._option_string_actions, f"{flag} is not an option of {parser.prog}"


def parse_gputrain(argv: list[str]):
    """``gputrain ...`` through the package's own parser; a train command also builds its TrainConfig."""
    from gputrain import cli
    from gputrain.train import TrainConfig, preset_config

    parser = cli.build_parser()
    args = parser.parse_args(cli._attach_negative_numbers(argv))
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    check_flags(sub.choices[argv[0]], argv[1:])
    if argv[0] == "train":
        overrides = {
            f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if getattr(args, f.name) is not None
        }
        return preset_config(args.preset, **overrides)
    return args


def test_every_command_parses_with_the_real_launchers():
    from accelerate.commands.launch import launch_command_parser
    from torch.distributed.run import get_args_parser

    commands = shell_commands()
    assert len(commands) >= 10
    launchers = {("accelerate", "launch"): launch_command_parser, ("torchrun",): get_args_parser}
    seen: dict[str, set[str]] = {"accelerate": set(), "torchrun": set()}
    for argv in commands:
        prefix = next((p for p in launchers if tuple(argv[: len(p)]) == p), None)
        if prefix:
            parser = launchers[prefix]()
            args = parser.parse_args(argv[len(prefix) :])
            script, rest = args.training_script, args.training_script_args
            own = argv[len(prefix) : argv.index(script)]  # the launcher's flags, before the script
            check_flags(parser, own)
            seen[prefix[0]].update(t for t in own if t.startswith("--"))
        elif argv[0] == "gputrain":
            parse_gputrain(argv[1:])
            continue
        else:
            pytest.fail(f"unexpected command in the page: {shlex.join(argv)}")
        if script == "gputrain":
            assert args.module, f"gputrain is a module: launch it with -m ({shlex.join(argv)})"
            parse_gputrain(rest)
        else:
            assert script.endswith(".py"), script
    needed = {
        "--num_processes",
        "--num_machines",
        "--machine_rank",
        "--main_process_ip",
        "--main_process_port",
        "--mixed_precision",
        "--config_file",
        "--multi_gpu",
        "--use_deepspeed",
    }
    assert needed <= seen["accelerate"], f"accelerate launch flags never shown: {needed - seen['accelerate']}"
    assert {"--nproc_per_node", "--nnodes", "--node_rank", "--standalone"} <= seen["torchrun"]


def test_every_config_file_loads_and_sets_what_it_says(tmp_path):
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    blocks = re.findall(r"```yaml\n(.*?)```", scale_page(), re.S)
    kinds = []
    for i, block in enumerate(blocks):
        path = tmp_path / f"config_{i}.yaml"
        path.write_text(block, encoding="utf-8")
        config = load_config_from_file(str(path))  # unknown top-level keys raise here
        parser = launch_command_parser()
        for section in ("fsdp_config", "deepspeed_config"):
            for key in getattr(config, section) or {}:
                assert f"--{key}" in parser._option_string_actions, f"{section}.{key} is not an Accelerate setting"
        args = parser.parse_args(["--config_file", str(path), "my_train.py"])
        args, defaults, mp_from_file = _validate_launch_command(args)
        kind = config.distributed_type.value
        kinds.append(kind)
        if kind == "DEEPSPEED":
            args.deepspeed_fields_from_accelerate_config = ",".join(
                list(defaults.deepspeed_config) + (["mixed_precision"] if mp_from_file else [])
            )
            _, env = prepare_deepspeed_cmd_env(args)
            assert env["ACCELERATE_USE_DEEPSPEED"] == "true"
            assert env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == str(config.deepspeed_config["zero_stage"])
        else:
            args.main_process_port = 0  # a free port: the check must not depend on what else runs here
            env = prepare_multi_gpu_env(args)
            if kind == "FSDP":
                assert env["ACCELERATE_USE_FSDP"] == "true" and env["FSDP_VERSION"] == "2"
                assert env["FSDP_TRANSFORMER_CLS_TO_WRAP"] == "Block"  # gputrain's transformer block class
            else:
                assert args.multi_gpu
        assert env["ACCELERATE_MIXED_PRECISION"] == config.mixed_precision == "bf16"
        assert args.num_processes == config.num_processes == 8
    assert sorted(kinds) == ["DEEPSPEED", "FSDP", "MULTI_GPU"]
    from gputrain.model import Block  # noqa: F401  (the class the FSDP examples wrap exists)


def test_the_page_arithmetic_matches_the_presets_and_the_memory_model():
    from gputrain.memory import estimate
    from gputrain.train import gpt2_small

    text = scale_page()
    cfg = gpt2_small()
    per_step = cfg.batch_size * cfg.grad_accum_steps * 1 * cfg.window
    assert (cfg.batch_size, cfg.grad_accum_steps, cfg.window, per_step) == (16, 32, 1024, 524_288)
    assert "16 sequences × 32\nmicro-batches × 1 process × 1,024 tokens = 524,288" in text
    for procs, accum in ((8, 4), (16, 2)):
        assert cfg.batch_size * accum * procs * cfg.window == per_step
    assert "(16 × 4 × 8 × 1,024 = 524,288), so launch it with `--grad-accum-steps 4`" in text
    # every gpt2_small launch on 8 or 16 processes keeps the preset's tokens per step
    for argv in shell_commands():
        if "gpt2_small" in argv:
            procs = next((int(argv[i + 1]) for i, t in enumerate(argv) if t in ("--num_processes",)), None)
            if procs is None and "--nproc_per_node" in argv:
                nodes = int(argv[argv.index("--nnodes") + 1]) if "--nnodes" in argv else 1
                procs = nodes * int(argv[argv.index("--nproc_per_node") + 1])
            procs = procs or 8  # the multi_gpu.yaml file's 8 processes
            accum = int(argv[argv.index("--grad-accum-steps") + 1])
            assert cfg.batch_size * accum * procs * cfg.window == per_step, shlex.join(argv)
    zero0, zero1 = estimate(7.5e9, zero_stage=0, dp=64), estimate(7.5e9, zero_stage=1, dp=64)
    assert f"{zero1.total / 1e9:.3f} GB per GPU for stage 1 against {zero0.total / 1e9:.0f} GB" in text


def test_precision_from_the_program_beats_the_launchers(monkeypatch):
    """The note on the page: an explicit mixed_precision wins over ``accelerate launch --mixed_precision``.

    (That ``gputrain train`` takes the launcher's value when its own flag is absent is
    tested in tests/test_train_cli.py.)
    """
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")  # what the launcher's flag sets
    try:
        AcceleratorState._reset_state(True)
        assert Accelerator(mixed_precision="no", cpu=True).mixed_precision == "no"
        AcceleratorState._reset_state(True)
        assert Accelerator(cpu=True).mixed_precision == "bf16"
    finally:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
    page = scale_page()
    assert "takes it when its own" in page and "that choice wins" in page


@pytest.mark.multiprocess
def test_the_cpu_torchrun_command_trains_on_two_processes(tmp_path):
    """The page's CPU command, run as printed: two processes, so twice the epochs of one process."""
    line = next(
        argv for argv in shell_commands() if argv[:2] == ["torchrun", "--standalone"] and "2" in argv and "tiny" in argv
    )
    bindir = Path(sys.executable).parent

    # torchrun gives each process one thread; the single process gets the same (two threads on a
    # loaded two-core machine oversubscribe it and only make the comparison slow)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def epochs(argv: list[str]) -> float:
        run = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        found = re.findall(r"trained (\d+) steps \(([\d.]+) epochs\)", run.stdout + run.stderr)
        assert len(found) == 1, f"expected one summary line from process 0, got {found}"
        return float(found[0][1])

    two = epochs([str(bindir / "torchrun"), *line[1:]])
    one = epochs([sys.executable, "-m", "gputrain", *line[line.index("gputrain") + 1 :]])
    assert abs(two / one - 2) < 0.1, (two, one)


# --- Fact check ----------------------------------------------------------------------

VERDICTS = ("holds", "holds with a caveat", "wrong", "unsupported")


def fact_check() -> tuple[str, dict[int, str]]:
    """The page, and each claim's text (from its ``(fc-NN)=`` label to the next one) by number."""
    text = (BOOK / "fact_check.md").read_text(encoding="utf-8")
    parts = re.split(r"^\(fc-(\d+)\)=\n", text, flags=re.M)
    claims = {int(label): re.split(r"^## ", body, flags=re.M)[0] for label, body in zip(parts[1::2], parts[2::2])}
    return text, claims


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_fact_check_claims_have_a_source_a_verdict_and_a_decider():
    text, claims = fact_check()
    assert len(claims) >= 25, f"only {len(claims)} claims"
    assert sorted(claims) == list(range(1, len(claims) + 1)), "claims must be numbered 1..n without gaps"
    table = {int(n): v for n, v in re.findall(r"^\| \{ref\}`fc-(\d+)` \| [^|]+ \| ([a-z ]+) \|$", text, re.M)}
    assert sorted(table) == sorted(claims), "the summary table must list every claim once"
    keys = set(bib_keys())
    notebooks = {f"../chapters/{p.name}": p for p in CHAPTERS} | {"making_it_fast.ipynb": BOOK / "making_it_fast.ipynb"}
    for n, body in claims.items():
        assert re.match(rf"### {n}\. \S", body), f"claim {n}: heading must start with '### {n}. '"
        source = re.search(r"^\*\*Claim\*\* \((.+?)\):", body, re.M)
        assert source, f"claim {n}: no '**Claim** (article, section; 「term」):' line"
        assert any(a in source.group(1) for a in ARTICLES), f"claim {n}: names none of the articles {ARTICLES}"
        assert re.search(r"[§,] ?(?:§|part|heading|opening|closing)", source.group(1)), (
            f"claim {n}: no section of the article in {source.group(1)!r}"
        )
        assert re.search(r"「[^」]*[\u3400-\u9fff][^」]*」", source.group(1)), (
            f"claim {n}: the article's key Chinese term, in 「」, is missing from {source.group(1)!r}"
        )
        verdict = re.search(r"^\*\*Verdict:\*\* (.+)$", body, re.M)
        assert verdict and verdict.group(1).strip() in VERDICTS, f"claim {n}: verdict must be one of {VERDICTS}"
        assert table[n] == verdict.group(1).strip(), f"claim {n}: the summary table says {table[n]!r}"
        decided = flat(body.split("**Decided by:**", 1)[1])
        citations = cited(decided)
        assert citations <= keys, f"claim {n}: unknown citation {citations - keys}"
        links = re.findall(r"\]\(([^)]+\.ipynb)\)", decided)
        sections = re.findall(r"\]\(([^)]+\.ipynb)\), sections? ((?:\"[^\"]+\"(?:,| and|, and)? ?)+)", decided)
        assert len(sections) == len(links), f"claim {n}: every chapter link must name the section that decides it"
        for target, names in sections:
            assert target in notebooks, f"claim {n}: {target} is not a chapter"
            for name in re.findall(r"\"([^\"]+)\"", names):
                assert name in headings(notebooks[target]), f"claim {n}: {target} has no section {name!r}"
        # an unsupported claim may have no source at all; it must then point to the entry that covers its subject
        refs = re.findall(r"\{ref\}`[^`]*<fc-(\d+)>`", decided)
        assert sections or citations or (table[n] == "unsupported" and refs), (
            f"claim {n}: decided by neither a chapter section nor a source"
        )


def test_fact_check_arithmetic_is_right():
    from fractions import Fraction

    import torch

    from gputrain.device import GPU_SPECS, PEAK_FLOPS
    from gputrain.memory import estimate
    from gputrain.parallel.pipeline import bubble_fraction
    from gputrain.roofline import Machine, adamw_step

    text = flat(fact_check()[0]).replace("\\$", "$")  # a dollar amount is written \$ so it is not math
    h100, h800 = PEAK_FLOPS["H100"], PEAK_FLOPS["H800"]
    # useful FLOP/s per GPU over pre-training: 6 x active parameters x tokens / GPU-seconds
    deepseek_per_gpu = 6 * 37e9 * 14.8e12 / (2.664e6 * 3600)
    llama_per_gpu = 6 * 405e9 * 15.6e12 / (30.84e6 * 3600)
    f16, bf16, f32 = torch.finfo(torch.float16), torch.finfo(torch.bfloat16), torch.finfo(torch.float32)
    zero = {(s, dp): estimate(7.5e9, zero_stage=s, dp=dp).total for s in (0, 1) for dp in (8, 64)}
    a100, l4, h100_sm, h200_sm = (GPU_SPECS[n] for n in ("A100", "L4", "H100", "H200"))
    h800_sm = GPU_SPECS["H800"]
    h100_roofs, step = Machine.from_gpu("H100", "bf16"), adamw_step(10**9)
    training_state = estimate(175e9).total  # bf16 weights and gradients, FP32 master weights and Adam moments
    checks = {
        "3 × 224 × 224 = 150,528": 3 * 224 * 224 == 150_528,
        "570 GB is 1.3% of 45 TB": round(100 * 570 / 45_000, 1) == 1.3,
        "0.25¹⁰⁰ ≈ 6 × 10⁻⁶¹": round(0.25**100 / 1e-61) == 6,
        "(2 − 2⁻¹⁰) × 2¹⁵ = 65504": (2 - 2**-10) * 2**15 == 65504 == f16.max,
        "the smallest normal number is 1.18 × 10⁻³⁸ in both": bf16.tiny == f32.tiny
        and round(f32.tiny / 1e-38, 2) == 1.18,
        "3.39 × 10³⁸ in BF16 against 3.40 × 10³⁸ in FP32": (round(bf16.max / 1e38, 2), round(f32.max / 1e38, 2))
        == (3.39, 3.40),
        "8 significant bits against FP32's 24": (bf16.eps, f32.eps) == (2.0**-7, 2.0**-23),
        "stop at 9.2 × 10⁻⁴¹ where FP32's reach 1.4 × 10⁻⁴⁵": (
            round(bf16.tiny * bf16.eps / 1e-41, 1),
            round(f32.tiny * f32.eps / 1e-45, 1),
        )
        == (9.2, 1.4),
        "2⁻³ and 2⁻²": (torch.finfo(torch.float8_e4m3fn).eps, torch.finfo(torch.float8_e5m2).eps) == (2**-3, 2**-2),
        "989 ÷ 66.9 ≈ 14.8": round(h100["fp16"] / 1e12) == 989
        and h100["fp32"] == 66.9e12
        and round(h100["fp16"] / h100["fp32"], 1) == 14.8,
        "against TF32 tensor-core products the factor is 2": round(h100["fp16"] / h100["tf32"], 3) == 2,
        "16 × 32 = 512": 16 * 32 == 512,
        "175 billion × 2 bytes = 350 GB": estimate(175e9).parameters == 350e9,
        "the training state is 2.8 TB, which needs at least 35 GPUs of 80 GB": training_state == 2.8e12
        and math.ceil(training_state / 80e9) == 35,
        "100 × 10¹² × 16 bytes = 1.6 PB of training state, which would take 20,000 GPUs of 80 GB": estimate(
            100e12
        ).total
        == 1.6e15
        and estimate(100e12).total / 80e9 == 20_000,
        "1.75 at N = 8": 2 * (8 - 1) / 8 == 1.75,
        "(p − 1)/(m + p − 1) = 3/11": bubble_fraction(4, 8) == Fraction(3, 11),
        "120 ÷ 31.4 ≈ 3.82, with 8 GPUs 2.91": (round(zero[0, 64] / 1e9), round(zero[1, 64] / 1e9, 1)) == (120, 31.4)
        and round(zero[0, 64] / zero[1, 64], 2) == 3.82
        and round(zero[0, 8] / zero[1, 8], 2) == 2.91,
        "450 ÷ 50 = 9": 900 / 2 / 50 == 9,
        "160 ÷ 50 = 3.2": 160 / 50 == 3.2,
        "2,788,000 × $2 = $5,576,000": 2_788_000 * 2 == 5_576_000,
        "2,664,000 × $2 = $5,328,000": 2_664_000 * 2 == 5_328_000,
        "2,664 + 119 + 5 = 2,788 thousand": 2_664 + 119 + 5 == 2_788,
        "in 2.664 million hours is about 343 TFLOP/s per H800": round(deepseek_per_gpu / 1e12) == 343,
        "in 30.84 million hours about 341 per H100": round(llama_per_gpu / 1e12) == 341,
        "35% of the dense 16-bit peak of 989 TFLOP/s": round(h100["bf16"] / 1e12) == 989
        and {round(100 * deepseek_per_gpu / h800["bf16"]), round(100 * llama_per_gpu / h100["bf16"])} == {35},
        "1,979 TFLOP/s, its share is 17%": round(h800["fp8"] / 1e12) == 1979
        and round(100 * deepseek_per_gpu / h800["fp8"]) == 17,
        "30.84 ÷ 2.788 ≈ 11.1": round(30.84 / 2.788, 1) == 11.1,
        "312 ÷ 19.5 = 16 on the A100": a100.peaks["fp16"] / a100.peaks["fp32"] == 16,
        "121 ÷ 30.3 ≈ 4.0 on the L4": round(l4.peaks["fp16"] / l4.peaks["fp32"], 1) == 4.0,
        "up to 228 KB of its 256 KB": (h800_sm.shared_per_sm, h800_sm.l1_shared_per_sm) == (228 * 1024, 256 * 1024),
        "132 × 228 KB = 30,096 KB": h800_sm.sms * h800_sm.shared_per_sm == 30_096 * 1024,
        "at most 164 KB": a100.shared_per_sm == 164 * 1024,
        "128 bytes × 132 SMs × 1.98 GHz = 33.5 TB/s": (h800_sm.shared_bytes_per_clock, h800_sm.sms) == (128, 132)
        and h800_sm.boost_clock_hz == 1.98e9
        and round(h800_sm.shared_bandwidth / 1e12, 1) == 33.5,
        "33.5 ÷ 3.35 ≈ 10.0": round(h100_sm.shared_to_hbm, 1) == round(h800_sm.shared_to_hbm, 1) == 10.0,
        "at 1.83 GHz, the clock the tensor-core peaks are quoted at, the ratio is 9.2": round(
            128 * 132 * h100_sm.tensor_clock_hz / h100_sm.hbm_bandwidth, 1
        )
        == 9.2,
        "33.5 ÷ 4.8 ≈ 7.0": round(h200_sm.shared_to_hbm, 1) == 7.0,
        "19.5 TB/s from shared memory against 2.04 TB/s": (
            round(a100.shared_bandwidth / 1e12, 1),
            round(a100.hbm_bandwidth / 1e12, 2),
        )
        == (19.5, 2.04),
        "a ratio of 9.6": round(a100.shared_to_hbm, 1) == 9.6,
        "gives 12.5": round(GPU_SPECS["A100 40GB"].shared_to_hbm, 1) == 12.5,
        "about 12.7 to 12.8": 12.7 <= GPU_SPECS["H100 PCIe"].shared_to_hbm <= 12.8,
        "768 × 3,072 = 2,359,296": 768 * 3072 == 2_359_296,
        "28 bytes per parameter for 14 FLOPs, 0.5 FLOP per byte": (step.bytes / 10**9, step.flops / 10**9) == (28, 14)
        and step.intensity == 0.5,
        "989.4 ÷ 3.35 ≈ 295": round(h100_roofs.ridge) == 295,
        "for 1 billion parameters it moves 28 GB and takes at least 8.4 ms": step.bytes == 28e9
        and round(h100_roofs.predict_seconds(step) * 1e3, 1) == 8.4
        and h100_roofs.bound(step) == "memory",
        "405 × 15.6 ÷ (37 × 14.8) ≈ 11.5": round(405 * 15.6 / (37 * 14.8), 1) == 11.5,
        "1,287 MWh ÷ 10.715 MWh ≈ 120": round(1287 / 10.715) == 120,
        "14.8 T ÷ 37 B = 400 tokens per active parameter": round(14.8e12 / 37e9) == 400,
        "6 × 10¹⁴ × 2 × 10¹⁵ = 1.2 × 10³⁰ FLOPs": 6 * 1e14 * 2e15 == 1.2e30,
        "would need about 3,800 years": round(1.2e30 / (25_000 * 0.4 * h100["bf16"]) / (365.25 * 86400), -2) == 3800,
        "about 190 years": round(6e28 / (25_000 * 0.4 * h100["bf16"]) / (365.25 * 86400), -1) == 190,
        "raising β to 2.0, 100 times the default": round(2.0 / 0.02) == 100,
    }
    absent = [s for s in checks if s not in text]
    assert not absent, f"statements no longer in book/fact_check.md: {absent}"
    wrong = [s for s, ok in checks.items() if not ok]
    assert not wrong, f"arithmetic that does not hold: {wrong}"

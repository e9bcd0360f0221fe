"""gputrain.posttrain's shape (chapter 12): one mechanism per module, imports one way, PEFT only in tests."""

import ast
from pathlib import Path

from package_layout import check_exports, check_layout

import gputrain


def test_the_posttrain_package_stays_in_modules_a_reader_can_hold():
    check_layout("gputrain.posttrain")


def test_every_public_name_of_the_posttrain_modules_is_exported_from_the_package():
    check_exports("gputrain.posttrain")


def test_the_package_never_imports_peft_or_transformers():
    """PEFT is what LoRA is checked against in the tests, never something gputrain needs to run."""
    for path in Path(gputrain.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                roots = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = {(node.module or "").split(".")[0]}
            else:
                continue
            assert not roots & {"peft", "transformers", "trl"}, f"{path.name}:{node.lineno} imports {roots}"

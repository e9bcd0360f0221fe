"""gputrain: the companion package of *How a GPU Trains AI*.

Each chapter of the book imports one or two modules from here::

    import gputrain as gt
    gt.preset()            # "cpu" or "gpu" (GPUTRAIN_PRESET overrides)
    from gputrain.train import TrainConfig, train

``gt.show(obj)`` prints the source of any function or class, so a reader can
see the code a chapter runs without leaving the notebook.
"""

from __future__ import annotations

import importlib
import inspect
from importlib.metadata import PackageNotFoundError, version

try:  # from the installed package's metadata (companion/pyproject.toml)
    __version__ = version("gputrain")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "unknown"

__all__ = ["__version__", "info", "info_line", "pick", "preset", "show"]
_FROM_DEVICE = ("info", "info_line", "pick", "preset")


def __getattr__(name: str):
    """``gt.preset`` and friends, and submodules (``gt.device``), imported on first use.

    ``import gputrain`` alone does not import torch: the command line answers
    a typo at once because of this (see :mod:`gputrain.cli_spec`).
    """
    if name in _FROM_DEVICE:
        value = getattr(importlib.import_module(".device", __name__), name)
        globals()[name] = value
        return value
    if not name.startswith("_"):
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise  # the submodule exists but something it imports does not
    raise AttributeError(f"module 'gputrain' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FROM_DEVICE))


def show(obj) -> None:
    """Display the source code of a gputrain function, class or module (a Triton kernel shows its Python source)."""
    source = inspect.getsource(getattr(obj, "fn", obj))  # triton.jit wraps the function; .fn is the source
    try:
        from IPython.display import Code, display

        display(Code(source, language="python"))
    except ImportError:  # plain Python: print it
        print(source)

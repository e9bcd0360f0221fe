"""gputrain: the companion package of *How a GPU Trains AI*.

Each chapter of the book imports one or two modules from here::

    import gputrain as gt
    gt.preset()            # "cpu" or "gpu" (GPUTRAIN_PRESET overrides)
    from gputrain.train import TrainConfig, train

``gt.show(obj)`` prints the source of any function or class, so a reader can
see the code a chapter runs without leaving the notebook.
"""

from __future__ import annotations

import inspect
import os

import torch

from .device import info, info_line, package_version, pick, preset

# Chapter 11's Triton kernels run in Triton's interpreter where there is no GPU to compile for. The switch
# must be on before triton.language is first imported (torch.compile imports it too), so it is set here.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

__version__ = package_version()  # from the installed package's metadata (companion/pyproject.toml)

__all__ = ["__version__", "info", "info_line", "pick", "preset", "show"]


def show(obj) -> None:
    """Display the source code of a gputrain function, class or module (a Triton kernel shows its Python source)."""
    source = inspect.getsource(getattr(obj, "fn", obj))  # triton.jit wraps the function; .fn is the source
    try:
        from IPython.display import Code, display

        display(Code(source, language="python"))
    except ImportError:  # plain Python: print it
        print(source)

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

__version__ = "0.1.0"

from .device import info, info_line, pick, preset  # noqa: E402

__all__ = ["__version__", "info", "info_line", "pick", "preset", "show"]


def show(obj) -> None:
    """Display the source code of a gputrain function, class or module."""
    source = inspect.getsource(obj)
    try:
        from IPython.display import Code, display

        display(Code(source, language="python"))
    except ImportError:  # plain Python: print it
        print(source)

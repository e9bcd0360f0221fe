"""Stopping a run cleanly (chapter 6): Ctrl-C and SIGTERM end it after the current step, with a checkpoint.

A scheduler that preempts a job sends SIGTERM and, a grace period later,
SIGKILL; a person presses Ctrl-C (SIGINT).  Either way the run should lose
nothing: :class:`StopSignals` turns the first signal into a request that the
loop honours after the optimizer step in progress, then saves a checkpoint
and closes its log.  A second signal means "now": it raises
``KeyboardInterrupt`` at once.  With several processes every rank must stop
after the same step, or their checkpoints would disagree; :meth:`agreed`
takes the maximum over the ranks, so one signalled rank stops them all.
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Optional

import torch
import torch.distributed as dist

if TYPE_CHECKING:  # annotations only: the Accelerator is passed in
    from accelerate import Accelerator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """While active, the first SIGINT/SIGTERM is recorded; a second one raises ``KeyboardInterrupt``."""

    def __init__(self) -> None:
        self.signum = 0  # the first signal received (0: none)
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            for s in SIGNALS:
                if signal.getsignal(s) is not signal.SIG_IGN:  # ignored by whoever started us (nohup, &): keep
                    self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def _handle(self, signum, frame) -> None:
        if self.signum:
            raise KeyboardInterrupt(f"a second {signal.Signals(signum).name}")
        self.signum = signum

    def agreed(self, accelerator: Accelerator) -> Optional[str]:
        """The signal every rank stops for after this step (``None``: carry on); a collective call with >1 rank."""
        signum = _across_ranks(accelerator, self.signum, "MAX")
        return signal.Signals(signum).name if signum else None


def agree(accelerator: Accelerator, ok: bool) -> bool:
    """Whether ``ok`` holds on every rank; with one process, ``ok`` itself (a collective call with >1 rank).

    A step every rank takes together: a failure on one rank (a save, a lock)
    then stops all of them instead of leaving the others waiting forever.
    """
    return bool(_across_ranks(accelerator, int(ok), "MIN"))


def _across_ranks(accelerator: Accelerator, value: int, op: str) -> int:
    """``value`` reduced over every rank with ``op`` ('MAX', 'MIN'); ``value`` itself with one process."""
    if accelerator.num_processes > 1 and dist.is_available() and dist.is_initialized():
        flag = torch.tensor([value], device=accelerator.device)
        dist.all_reduce(flag, op=getattr(dist.ReduceOp, op))
        return int(flag.item())
    return value

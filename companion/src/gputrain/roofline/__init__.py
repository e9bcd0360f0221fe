"""The roofline (chapter 11, "The roofline"): FLOPs and bytes of the book's operations, and how long they take.

Every operation below is counted by formula and returned as an :class:`OpCost`:
its FLOPs, the bytes it must move between the chip and its main memory, and
the rule that counted them.  A :class:`Machine` has two roofs, a peak FLOP/s
and a memory bandwidth, taken from the GPU table
(:meth:`Machine.from_gpu`, :data:`gputrain.device.GPU_SPECS`) or measured on
this machine with the probes of :mod:`gputrain.speed`
(:meth:`Machine.measure`).  It predicts an operation's time as the slower of
the two::

    t = max(FLOPs / peak, bytes / bandwidth)

so an operation whose arithmetic intensity (FLOPs per byte) is below the
machine's ridge point, peak / bandwidth, waits on memory, and one above it
waits on arithmetic.  :func:`check_cpu_roofline` times real operations on this
CPU against that prediction.

Counting rules, shared by every function: a FLOP is one add or multiply (a
multiply-add is two), as in :mod:`gputrain.flops`, whose
:data:`~gputrain.flops.ELEMENTWISE_FLOPS` gives the elementwise costs; bytes
are the traffic of one kernel per operation that reads each input once and
writes each output once, nothing kept on chip between operations.  That is a
lower bound for a real kernel and the exact traffic of a perfect one.

One mechanism per module.  Imports go one way, down this list: a module may
import those above it, never one below::

    cost        OpCost: FLOPs, bytes and the rule that counted them
       |
    operations  matmul, add, layernorm, gelu, softmax, attention, adamw_step, all_reduce
       |
    gpt         gpt_matmuls, gpt_operations: one GPT block in the order it runs
    machine     Machine, its roofs measured on this CPU, on_a_cpu   (imports cost)
       |
    check       Agreement, check_cpu_roofline: real operations against the roofs

Every name is re-exported here, so ``roofline.matmul`` works as it always did.
"""

from __future__ import annotations

from .check import CPU_TOLERANCE, Agreement, check_cpu_roofline
from .cost import OpCost
from .gpt import gpt_matmuls, gpt_operations
from .machine import WRITE_ALLOCATE, Machine, on_a_cpu
from .operations import (
    ADAMW_FLOPS_PER_PARAM,
    adamw_step,
    add,
    all_reduce,
    attention_naive,
    attention_tiled,
    gelu,
    layernorm,
    matmul,
    softmax,
)

__all__ = [
    "OpCost",
    "matmul",
    "add",
    "layernorm",
    "gelu",
    "softmax",
    "attention_naive",
    "attention_tiled",
    "adamw_step",
    "all_reduce",
    "gpt_matmuls",
    "gpt_operations",
    "ADAMW_FLOPS_PER_PARAM",
    "Machine",
    "Agreement",
    "CPU_TOLERANCE",
    "check_cpu_roofline",
    "on_a_cpu",
    "WRITE_ALLOCATE",
]

"""Where a Triton kernel runs: compiled on a CUDA GPU, interpreted on the CPU (chapter 11).

Triton compiles a kernel for the GPU it finds.  Without CUDA, its interpreter
(``TRITON_INTERPRET=1``) runs the *same* kernel source on the CPU: every
program of the grid, one after another, with NumPy arrays standing in for the
blocks.  That is slow (milliseconds per program) but exact enough to test a
kernel against PyTorch, and it lets every reader run every kernel of the
chapter.  This module

* switches the interpreter on when CUDA is absent, before any kernel is
  decorated (``triton.jit`` reads the variable at decoration time);
* runs interpreted launches on one BLAS thread (two threads fighting over tiny
  blocks are several times slower than one);
* stands in for Triton where it has no wheel (macOS, Windows): ``import
  gputrain.kernels`` still works and a launch raises :class:`KernelUnavailable`
  with one line naming the way out.

Known faults of the interpreter, avoided by design in every kernel here:

* arithmetic on bf16 blocks works on their raw bits (a ``tl.dot`` multiplies
  them, a ``+`` adds them): kernels upcast operands to fp32 after the load
  (the matmuls only when :func:`interpreted`, so that a GPU's tensor cores get bf16);
* a cast from fp32 to bf16 cuts bits off (rounds toward zero) instead of rounding
  to nearest: ``add`` stores its fp32 sum there and lets torch round it;
* fp32 -> FP8 casts inside a kernel round wrongly and never saturate: FP8
  codes are made in torch (``gputrain.fp8.quantize``) and only loaded here;
* block pointers (``tl.make_block_ptr``) are gone in recent Triton: kernels
  compute their addresses from offsets and strides;
* an out-of-bounds load is not caught, it kills the process: every load and
  store is masked, and wrappers check shapes before launching;
* Triton decorates its own library (``tl.sum``, ``tl.max``, ``tl.zeros``...)
  when it is first imported, and torch imports it on its first optimizer step:
  imported before the interpreter was switched on, those functions raise
  inside interpreted kernels, so :func:`interpret_triton_library` rebinds them.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import platform
import sys
from typing import Any, Callable

import torch

INTERPRET_ENV = "TRITON_INTERPRET"
if not torch.cuda.is_available():  # nothing to compile for: the interpreter must be on before the kernels are defined
    os.environ[INTERPRET_ENV] = "1"


class KernelUnavailable(RuntimeError):
    """Triton cannot be imported here (no wheel for this platform, or not installed)."""


TRITON_IMPORTED_BEFORE = "triton" in sys.modules  # perhaps with the interpreter off: see interpret_triton_library
try:
    import triton
    import triton.language as tl

    HAVE_TRITON = True
    WHY_NOT = ""
except ImportError as exc:  # macOS and Windows have no Triton wheel
    HAVE_TRITON = False
    WHY_NOT = (
        f"Triton is not available on {platform.system()} {platform.machine()} ({exc}); chapter 11's kernels need "
        "Linux: run them in WSL, on a Linux machine, or in a Linux container (pip install triton numpy)"
    )

    class _Stand:
        """What the kernel modules see instead of ``triton`` / ``triton.language``: enough to define kernels."""

        constexpr = object

        def __getattr__(self, name: str) -> "_Stand":
            return _Stand()

        def __call__(self, *args, **kwargs) -> "_Stand":
            return _Stand()

        def jit(self, fn: Callable | None = None, **kwargs) -> Any:
            if fn is None:
                return lambda f: _Unlaunchable(f)
            return _Unlaunchable(fn)

    class _Unlaunchable:
        def __init__(self, fn: Callable):
            self.fn = fn
            self.__name__ = getattr(fn, "__name__", "kernel")

        def __getitem__(self, grid):
            raise KernelUnavailable(WHY_NOT)

    triton = tl = _Stand()  # type: ignore[assignment]


def interpret_triton_library() -> int:
    """Rebind Triton's own compiled-mode library functions as interpreted ones; returns how many.

    ``triton.jit`` picks compiled or interpreted when it decorates, so if Triton
    was imported before ``TRITON_INTERPRET`` was set (torch's optimizers import
    it), ``tl.sum``, ``tl.max`` and ``tl.zeros`` are compiled-mode functions and
    every kernel that calls them fails with "Cannot call @triton.jit'd outside
    of the scope of a kernel".  Nothing to do when Triton was imported after.
    """
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    swapped: dict[int, Any] = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("triton.language") or module is None:
            continue
        owners = [module, *(c for c in vars(module).values() if inspect.isclass(c) and c.__module__ == name)]
        for owner in owners:  # the functions, and the same functions as tensor methods (x.sum())
            for attr, obj in list(vars(owner).items()):
                if isinstance(obj, JITFunction):
                    setattr(owner, attr, swapped.setdefault(id(obj), InterpretedFunction(obj.fn)))
    return len(swapped)


if HAVE_TRITON and TRITON_IMPORTED_BEFORE and os.environ.get(INTERPRET_ENV, "0") not in ("", "0"):
    interpret_triton_library()


def check_available() -> None:
    """Raise :class:`KernelUnavailable` (one line: what to do) when Triton cannot run here."""
    if not HAVE_TRITON:
        raise KernelUnavailable(WHY_NOT)


def interpreted() -> bool:
    """Whether kernels run in Triton's interpreter (no CUDA, or ``TRITON_INTERPRET=1`` set by hand)."""
    return os.environ.get(INTERPRET_ENV, "0") not in ("", "0")


def mode() -> str:
    """``"compiled"`` (a real GPU kernel) or ``"interpreter"`` (the same source, run on the CPU)."""
    return "interpreter" if interpreted() else "compiled"


def kernel_device() -> torch.device:
    """Where the kernels' tensors must live: the GPU when compiled, the CPU when interpreted without CUDA."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@contextlib.contextmanager
def one_blas_thread():
    """Inside the block, torch and NumPy's BLAS use one thread (only when interpreting).

    The interpreter multiplies each ``tl.dot`` block with NumPy; on blocks of
    16 to 64 rows, a second BLAS thread costs more in hand-offs than it adds.
    """
    if not interpreted():
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits

        limit = threadpool_limits(limits=1)
    except ImportError:  # threadpoolctl is optional: torch's own pool is still limited
        limit = contextlib.nullcontext()
    try:
        with limit:
            yield
    finally:
        torch.set_num_threads(old)


def launch(kernel, grid: tuple[int, ...], *args, **kwargs) -> None:
    """Run ``kernel[grid](*args, **kwargs)``: compiled on a GPU, interpreted on one thread on the CPU."""
    check_available()
    with one_blas_thread():
        kernel[grid](*args, **kwargs)


def cdiv(a: int, b: int) -> int:
    """Ceiling division: the number of blocks of ``b`` that cover ``a``."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (block sizes in Triton are powers of two)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()

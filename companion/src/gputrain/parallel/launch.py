"""Run one function on N processes, from a script or a notebook (chapter 8).

``launch(fn, nprocs, *args)`` starts ``nprocs`` fresh processes, joins them
into one ``torch.distributed`` process group (NCCL with one GPU per process
when there are enough GPUs, gloo on the CPU otherwise: the same code either
way), runs ``fn(*args)`` on every rank and returns what each rank returned,
in rank order.  What each rank prints is collected and shown afterwards, rank
by rank, so a notebook shows tidy output instead of interleaved lines.

Three things make it safe to call from a notebook:

* Processes come from a *forkserver* that has already imported torch, so a
  launch costs a fraction of a second after the first one (a plain ``spawn``
  re-imports torch in every child, seconds each on a small CPU), and nothing is
  forked from the kernel itself (forking a process that has touched CUDA or an
  OpenMP pool is unsafe).
* ``fn`` is sent to the children by reference, so it must be importable: the
  per-rank functions of the book live in :mod:`gputrain.parallel`, not in
  notebook cells.  In a script, call :func:`launch` under
  ``if __name__ == "__main__":`` as with any multiprocessing code.
* Every launch has a deadline.  A rank that raises makes :func:`launch` raise
  :class:`LaunchError` with that rank's traceback at once (the others are
  stopped, since they would wait forever for the dead rank); a rank that dies
  or hangs is reported when the deadline passes.
"""

from __future__ import annotations

import datetime
import os
import pickle
import queue as queue_mod
import socket
import tempfile
import time
import traceback
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# Imported once by the forkserver, so every child starts with them loaded (importing
# these takes seconds; a fork that inherits them takes milliseconds).
PRELOAD = [
    "torch",
    "torch.distributed",
    "torch.distributed.tensor.parallel",
    "torch.distributed.pipelining",
    "torch.distributed.fsdp",
    "accelerate",
    "gputrain.model",
    "gputrain.parallel",
]
_preload_set = False


class LaunchError(RuntimeError):
    """A rank raised, died, or did not finish within the launch's timeout."""


class Results(list):
    """What each rank returned (index = rank), plus what each rank printed."""

    def __init__(self, values: list, outputs: list[str], seconds: float):
        super().__init__(values)
        self.outputs = outputs  # stdout of each rank, in rank order
        self.seconds = seconds  # wall time of the launch, start-up included


def default_backend(nprocs: int) -> str:
    """``"nccl"`` when there is one CUDA GPU per process, else ``"gloo"`` (CPU tensors)."""
    if torch.cuda.is_available() and torch.cuda.device_count() >= nprocs and dist.is_nccl_available():
        return "nccl"
    return "gloo"


def rank_device() -> torch.device:
    """The device this rank computes on: its own GPU under NCCL, the CPU under gloo."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def free_port() -> int:
    """A TCP port nobody listens on right now, for the rendezvous of rank 0."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def format_outputs(outputs: list[str]) -> str:
    """Every rank's printed lines, rank by rank, each prefixed with ``[rank r]``."""
    lines = []
    for rank, text in enumerate(outputs):
        lines += [f"[rank {rank}] {line}" for line in text.rstrip("\n").split("\n") if text.strip()]
    return "\n".join(lines)


def _worker(
    fn: Callable, rank: int, nprocs: int, args: tuple, backend: str, port: int, timeout: float, out_dir: str, results
) -> None:
    """Body of one child process: join the group, run ``fn``, report back."""
    env = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "WORLD_SIZE": str(nprocs),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(nprocs),
        "GPUTRAIN_RANK": str(rank),
    }
    os.environ.update(env)  # Accelerate and torchrun-style code read these
    # Share the cores instead of every rank spawning one thread per core.
    threads = max(1, (os.cpu_count() or 1) // nprocs)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    out_path, err_path = Path(out_dir) / f"{rank}.out", Path(out_dir) / f"{rank}.err"
    with (
        open(out_path, "w", buffering=1) as out,
        open(err_path, "w", buffering=1) as err,
        redirect_stdout(out),
        redirect_stderr(err),
    ):
        try:
            if backend == "nccl":
                torch.cuda.set_device(rank)
            dist.init_process_group(backend, rank=rank, world_size=nprocs, timeout=datetime.timedelta(seconds=timeout))
            value = fn(*args)
            payload = ("ok", pickle.dumps(value))
        except BaseException as exc:  # noqa: BLE001 - report everything, including KeyboardInterrupt
            payload = ("error", f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}")
        finally:
            out.flush()
    results.put((rank, *payload))
    if dist.is_initialized():
        dist.destroy_process_group()


def _context():
    """The forkserver context, preloading torch and gputrain.parallel the first time."""
    global _preload_set
    if not _preload_set:
        mp.set_forkserver_preload(PRELOAD)
        _preload_set = True
    return mp.get_context("forkserver")


def launch(
    fn: Callable[..., Any],
    nprocs: int,
    *args: Any,
    backend: Optional[str] = None,
    timeout: float = 120.0,
    show: bool = True,
) -> Results:
    """Run ``fn(*args)`` on ``nprocs`` processes in one process group; return each rank's value.

    ``fn`` must be importable (defined in a module, not a notebook cell).  The
    ranks' printed output is shown after they finish, in rank order
    (``show=False`` keeps it in ``results.outputs`` only).  Raises
    :class:`LaunchError` with the failing rank's traceback if a rank raises,
    dies, or if the launch takes longer than ``timeout`` seconds.
    Explained in chapter 8.
    """
    backend = _check_launch(fn, nprocs, backend)
    ctx = _context()
    results = ctx.Queue()
    port = free_port()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gputrain-launch-") as out_dir:
        procs = [
            ctx.Process(
                target=_worker,
                name=f"gputrain-rank-{rank}",
                daemon=True,
                args=(fn, rank, nprocs, args, backend, port, timeout, out_dir, results),
            )
            for rank in range(nprocs)
        ]
        for p in procs:
            p.start()
        try:
            values = _collect(procs, results, nprocs, t0 + timeout, out_dir)
        finally:
            _stop(procs)
        outputs = [_read(Path(out_dir) / f"{r}.out") for r in range(nprocs)]
    seconds = time.perf_counter() - t0
    if show and any(o.strip() for o in outputs):
        print(format_outputs(outputs))
    return Results(values, outputs, seconds)


def _check_launch(fn: Callable[..., Any], nprocs: int, backend: Optional[str]) -> str:
    """One clear error for a launch that cannot work; the backend it will use."""
    if not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs must be a positive integer, got {nprocs!r}")
    if os.environ.get("GPUTRAIN_RANK") is not None:
        raise RuntimeError("launch() was called inside a launched rank; launch from the main process only")
    if getattr(fn, "__module__", None) in (None, "__main__") or "<locals>" in getattr(fn, "__qualname__", ""):
        raise ValueError(
            f"{getattr(fn, '__qualname__', fn)!r} is not importable by the child processes; "
            "define it in a module (e.g. gputrain.parallel) and import it"
        )
    backend = backend or default_backend(nprocs)
    if backend == "nccl" and torch.cuda.device_count() < nprocs:
        raise ValueError(
            f"backend='nccl' needs one GPU per process: {nprocs} processes, "
            f"{torch.cuda.device_count()} GPUs; use backend='gloo' or fewer processes"
        )
    return backend


def _stop(procs: list) -> None:
    """End every rank still running (a launch that failed or timed out), killing those that ignore the request."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join()


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _collect(procs, results, nprocs: int, deadline: float, out_dir: str) -> list:
    """Wait for every rank's report; raise on the first error, a death, or the deadline."""
    values: dict[int, Any] = {}
    while len(values) < nprocs:
        try:
            rank, status, payload = results.get(timeout=0.05)
        except queue_mod.Empty:
            dead = [r for r, p in enumerate(procs) if r not in values and not p.is_alive()]
            if dead:
                time.sleep(0.5)  # a rank that exited may still have a report in flight
                if results.empty():
                    raise LaunchError(_death(procs, dead, out_dir))
            elif time.perf_counter() > deadline:
                waiting = [r for r in range(nprocs) if r not in values]
                raise LaunchError(
                    f"timed out: ranks {waiting} had not finished within the launch's "
                    "timeout (a rank waiting for a dead or slower peer hangs); raise timeout= "
                    "if the work is simply slow" + _tails(waiting, out_dir)
                )
            continue
        if status == "ok":
            values[rank] = pickle.loads(payload)
            continue
        # One rank failed.  Its peers fail soon after with "connection reset" errors: wait a
        # moment, then name the root cause (a rank that died silently, else the first to raise).
        time.sleep(1.0)
        dead = [
            r
            for r, p in enumerate(procs)
            if r not in values and r != rank and not p.is_alive() and p.exitcode not in (0, None)
        ]
        others = []
        while not results.empty():
            other, other_status, _ = results.get()
            if other_status == "error":
                others.append(other)
                dead = [r for r in dead if r != other]
        message = f"rank {rank} of {nprocs} raised {payload}" + _tails([rank], out_dir)
        if dead:
            message = _death(procs, dead, out_dir) + f"\n(then rank {rank} raised: {payload.splitlines()[0]})"
        elif others:
            message += f"\n(ranks {others} failed afterwards, most likely waiting for rank {rank})"
        raise LaunchError(message)
    return [values[r] for r in range(nprocs)]


def _death(procs, dead: list[int], out_dir: str) -> str:
    """Say which ranks exited without a report (killed, out of memory, os._exit...)."""
    codes = ", ".join(f"rank {r} (exit code {procs[r].exitcode})" for r in dead)
    hint = ""
    if not any((Path(out_dir) / f"{r}.out").exists() for r in dead):
        hint = (
            " before reaching fn; in a script, call launch() under "
            "`if __name__ == '__main__':` (each child imports the main module)"
        )
    return f"{codes} died without reporting a result{hint}" + _tails(dead, out_dir)


def _tails(ranks: list[int], out_dir: str, chars: int = 2000) -> str:
    """The last lines each rank printed (stdout and stderr), to help find the cause."""
    parts = []
    for r in ranks:
        for kind in ("out", "err"):
            text = _read(Path(out_dir) / f"{r}.{kind}").strip()
            if text:
                parts.append(f"\n--- rank {r} std{kind} (last {chars} characters) ---\n{text[-chars:]}")
    return "".join(parts)

"""A whole program's cost: :func:`process_cost` runs it in a fresh process and reads the kernel's accounting."""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

# Runs the command and reports on it.  A small process of its own does the waiting because Linux counts into
# a child's peak RSS the memory of the process it was forked from: started from a notebook's kernel or a
# script that has imported torch, every child would seem to need at least that much.
_MEASURER = """
import os, subprocess, sys, time
t0 = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
print(time.perf_counter() - t0, os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime, usage.ru_maxrss)
"""


def process_cost(command: Sequence[str], cwd: Optional[str] = None) -> dict[str, float]:
    """Run ``command`` to its end in a fresh process; its wall and CPU seconds and its peak memory.

    The whole process is measured, imports and exit included, by the kernel's
    own accounting (``os.wait4``): ``wall_s``, ``cpu_s`` (user + system) and
    ``rss_mib``, the peak resident set size.  Its output is discarded; a
    failure raises ``RuntimeError`` with the end of its standard error.
    ``bench/compare.py`` and the appendix "Making it fast" use it.  Linux and
    macOS only: Windows has no ``wait4``.
    """
    import subprocess
    import tempfile

    if not hasattr(os, "wait4"):
        raise OSError("process_cost needs os.wait4, which this platform lacks; run it on Linux or macOS")
    with tempfile.TemporaryFile() as err:
        out = subprocess.run([sys.executable, "-c", _MEASURER, *command], cwd=cwd, stdout=subprocess.PIPE, stderr=err)
        err.seek(0)
        tail = err.read().decode(errors="replace")[-1500:]
    fields, name = out.stdout.split(), " ".join(map(str, command))
    if out.returncode or len(fields) != 4:  # the measurer itself failed: the command could not start
        raise RuntimeError(f"{name} did not run:\n{tail}")
    wall, code, cpu, peak = float(fields[0]), int(fields[1]), float(fields[2]), int(fields[3])
    if code:
        raise RuntimeError(f"{name} exited {code}:\n{tail}")
    per_unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return {"wall_s": wall, "cpu_s": cpu, "rss_mib": peak * per_unit / 2**20}

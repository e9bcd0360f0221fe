"""gputrain.speed.keep_freed_memory: a step's freed buffers are reused, not faulted in again (glibc)."""

import resource
import subprocess
import sys

import pytest

# 20 "steps", each allocating twenty 2 MiB activations, writing them and freeing them all, as a training step does
PROGRAM = """
import ctypes, resource, sys, torch
from gputrain.speed import keep_freed_memory
libc = ctypes.CDLL("libc.so.6")  # glibc's starting thresholds (128 KiB), held there: its own adjustment varies by run
assert libc.mallopt(-3, 128 * 1024) and libc.mallopt(-1, 128 * 1024)
if sys.argv[1] == "keep":
    assert keep_freed_memory()
torch.ones(1)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    xs = [torch.ones(2**19) for _ in range(20)]  # 20 x 2 MiB, every page written
    del xs
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_step_buffers_are_reused_instead_of_faulted_in_again():
    fresh, kept = _faults("fresh"), _faults("keep")
    steps, pages = 20, 20 * 2**21 // resource.getpagesize()  # pages a step writes
    assert fresh > steps * pages / 2  # without it: freed blocks go back to the kernel, every step faults them in
    assert kept < fresh / 10  # with it: the first step's pages serve all 20

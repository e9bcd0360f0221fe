import os

import pytest
import torch

# The order in which make test's two workers take the test files (pytest -n 2 --dist loadfile
# --no-loadscope-reorder hands out whole files in collection order): the longest chain first (the PDF
# test builds the site, which the site and Chinese-notebook tests then reuse, and prints it), the
# notebooks next, the many short test files last, so that the two workers finish close together.
FIRST = ("tests/test_pdf.py",)


def run_order(nodeid: str) -> int:
    path = nodeid.split("::")[0]
    return 0 if path in FIRST else 1 if path.endswith(".ipynb") else 2


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: run_order(item.nodeid))  # stable: a file's tests keep their order
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run bench/gpu_check.sh on one)")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


def worker_threads() -> int | None:
    """Under pytest-xdist, each worker's share of this machine's cores (1 for two workers on two
    cores); None in a run without workers.

    torch takes every core by default; two workers doing so put four busy threads on two cores, and
    OpenMP threads that wait for each other then make a small model's step ten times slower.
    """
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return None
    return max(1, len(os.sched_getaffinity(0)) // int(workers))


@pytest.fixture(autouse=True)
def _threads_of_a_worker(monkeypatch):
    """The processes a test starts (the CLI, accelerate launch, an example script) take the worker's
    share of the cores too. Notebooks keep the machine's: nbval's items use no fixtures, and a chapter
    that measures with every thread (chapter 2's throughput) still does."""
    threads = worker_threads()
    if threads is not None:
        monkeypatch.setenv("OMP_NUM_THREADS", str(threads))


def pytest_configure(config):
    """Token caches of the test run go to a temporary folder: those of the tests, of the CLI
    processes they start, and of the notebooks' kernels, which inherit this environment.

    Set here, not in a fixture: under pytest-xdist a worker may be given only notebooks, whose
    nbval items use no fixtures, and its kernels would then write to the user's own cache.
    """
    import tempfile

    if worker_threads() is not None:
        torch.set_num_threads(worker_threads())
    # No test reaches the network: Hugging Face libraries (PEFT's, used to check LoRA) must not try either
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    config._gputrain_saved_cache = os.environ.get("GPUTRAIN_CACHE")
    config._gputrain_cache = tempfile.mkdtemp(prefix="gputrain_cache-")
    os.environ["GPUTRAIN_CACHE"] = config._gputrain_cache


def pytest_unconfigure(config):
    import shutil

    if not hasattr(config, "_gputrain_cache"):
        return
    shutil.rmtree(config._gputrain_cache, ignore_errors=True)
    if config._gputrain_saved_cache is None:
        os.environ.pop("GPUTRAIN_CACHE", None)
    else:
        os.environ["GPUTRAIN_CACHE"] = config._gputrain_saved_cache

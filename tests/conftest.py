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


def pytest_configure(config):
    """Token caches of the test run go to a temporary folder: those of the tests, of the CLI
    processes they start, and of the notebooks' kernels, which inherit this environment.

    Set here, not in a fixture: under pytest-xdist a worker may be given only notebooks, whose
    nbval items use no fixtures, and its kernels would then write to the user's own cache.
    """
    import os
    import tempfile

    config._gputrain_saved_cache = os.environ.get("GPUTRAIN_CACHE")
    config._gputrain_cache = tempfile.mkdtemp(prefix="gputrain_cache-")
    os.environ["GPUTRAIN_CACHE"] = config._gputrain_cache


def pytest_unconfigure(config):
    import os
    import shutil

    if not hasattr(config, "_gputrain_cache"):
        return
    shutil.rmtree(config._gputrain_cache, ignore_errors=True)
    if config._gputrain_saved_cache is None:
        os.environ.pop("GPUTRAIN_CACHE", None)
    else:
        os.environ["GPUTRAIN_CACHE"] = config._gputrain_saved_cache

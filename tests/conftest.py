import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run bench/gpu_check.sh on one)")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _token_cache(tmp_path_factory):
    """Token caches of the test runs (and of the CLI processes they start) go to a temporary folder."""
    import os

    saved = os.environ.get("GPUTRAIN_CACHE")
    os.environ["GPUTRAIN_CACHE"] = str(tmp_path_factory.mktemp("gputrain_cache"))
    yield
    if saved is None:
        os.environ.pop("GPUTRAIN_CACHE", None)
    else:
        os.environ["GPUTRAIN_CACHE"] = saved

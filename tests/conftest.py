"""Test-suite setup: Triton runs in its interpreter without a GPU, value checks are on."""

import os

import pytest

os.environ.setdefault("SPECOPS_VALIDATE", "1")
try:
    import torch

    _HAS_GPU = torch.cuda.is_available()
    # Tests use small tensors: intra-op threads only add overhead on the 2-core CI machine.
    torch.set_num_threads(1)
except ImportError:  # pragma: no cover
    _HAS_GPU = False
if not _HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if _HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


DEVICES = ["cpu"] + (["cuda"] if _HAS_GPU else [])


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param

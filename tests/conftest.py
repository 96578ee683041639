"""Test-suite setup: Triton runs in its interpreter without a GPU, value checks are on."""

import operator
import os
import types

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


def _fix_interpreter_index():
    """Triton 3.6's interpreter converts a scalar (a 1-element array there) to a Python int with
    int(array), which NumPy >= 2.4 rejects (triton-lang/triton#9171): every range() over a runtime
    bound fails.  Squeeze first, as later Tritons do; a no-op where the probe already works."""
    try:
        import numpy as np
        from triton.runtime import interpreter as interp
    except ImportError:
        return
    orig = getattr(interp, "_patch_lang_tensor", None)
    scope_cls = getattr(interp, "_LangPatchScope", None)
    if orig is None or scope_cls is None:
        return

    class Probe:
        handle = types.SimpleNamespace(data=np.ones(1, np.int32))

    scope = scope_cls()
    try:
        orig(Probe, scope)
        operator.index(Probe())
        return
    except TypeError:
        pass
    except Exception:  # pragma: no cover - an interpreter this probe does not understand
        return
    finally:
        scope.restore()

    def patched(tensor, scope):
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    interp._patch_lang_tensor = patched


if os.environ.get("TRITON_INTERPRET") == "1":
    _fix_interpreter_index()


def _runs_on_gpu(item) -> bool:
    """Marked gpu, or parametrized with the device or backend "cuda" (not cuda_sim)."""
    if "gpu" in item.keywords:
        return True
    spec = getattr(item, "callspec", None)
    return spec is not None and any(v == "cuda" for v in spec.params.values())


def pytest_collection_modifyitems(config, items):
    # SPECOPS_GPU_ONLY=1 (the lease command, bench/lease.py): the GPU cases alone, so leased
    # minutes are not spent on CPU cases CI already runs.
    if os.environ.get("SPECOPS_GPU_ONLY") == "1":
        keep = [it for it in items if _runs_on_gpu(it)]
        config.hook.pytest_deselected(items=[it for it in items if not _runs_on_gpu(it)])
        items[:] = keep
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


@pytest.fixture(scope="module")
def markov():
    """The exact Markov chain target and its drafter (tests/markov_chain_lm.py); the modules that
    take the target alone (test_decode_coupling, test_decode_relax_sjd) define their own."""
    from markov_chain_lm import MarkovDrafter, MarkovLM

    return MarkovLM(), MarkovDrafter()


# Every Triton specialisation the suite launches, recorded for the ahead-of-time compile of
# tests/triton_specs.py (scripts/test.sh sets SPECOPS_TRITON_SPECS=<file>).
_TRITON_SPECS = os.environ.get("SPECOPS_TRITON_SPECS")
_triton_recorder = None
if _TRITON_SPECS and os.environ.get("TRITON_INTERPRET") == "1":
    try:
        import triton_specs

        _triton_recorder = triton_specs.Recorder().__enter__()
    except ImportError:  # pragma: no cover - no triton
        _triton_recorder = None


def pytest_sessionfinish(session, exitstatus):
    if _triton_recorder is not None:
        _triton_recorder.__exit__(None, None, None)
        _triton_recorder.write(_TRITON_SPECS)

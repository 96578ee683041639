"""``generate_image``: a checkpoint directory, a prompt or class, a method -> pictures and stats.

    result = generate_image("ckpts/llamagen-b", class_id=[207], method="sjd_pac")
    result.images[0].save("fox.png"); print(result.table())

``load_pipeline(dir)`` tells the architecture from the directory (``ARCHITECTURES``): a
transformers ``config.json`` names its model type; LlamaGen's released ``.pt`` files (a GPT and a
VQ tokenizer) are recognised by their keys.  Each pipeline knows its model's image-token layout,
its conditioning (class ids or a text prompt, the unconditional input of classifier-free
guidance), its paper's sampling defaults (``Pipeline.defaults``, each overridable) and its VQ
decoder.  Every check (directory, architecture, conditioning, grid against the context, method
and its options) runs before any model work.
"""

from __future__ import annotations

from pathlib import Path

import torch

from specops import decode
from specops.imagegen.base import METHODS, ImageResult, Pipeline, check_sampling

__all__ = [
    "generate_image", "load_pipeline", "detect", "pipeline_class", "require_images",
    "ImageResult", "Pipeline", "ARCHITECTURES", "METHODS",
]  # fmt: skip


def _detect(path: Path) -> str:
    if (path / "config.json").is_file():
        import json

        mt = json.loads((path / "config.json").read_text()).get("model_type", "?")
        return {"janus": "janus", "emu3": "emu3", "chameleon": "chameleon"}.get(mt, f"hf:{mt}")
    if any(path.glob("*.pt")):
        return "llamagen"
    return "?"


def _llamagen(path, **kw):
    from specops.imagegen.llamagen import LlamaGenPipeline

    return LlamaGenPipeline(path, **kw)


def _hf(kind):
    def make(path, **kw):
        require_images(transformers=True)
        return pipeline_class(kind)(path, **kw)

    return make


def require_images(*, transformers: bool = False) -> None:
    """pillow (the pictures) and, for the transformers families, transformers: the ``images``
    extra, checked before any work (a MissingDependency naming ``pip install
    'specops[images]'``)."""
    from specops._optional import require

    require("image generation", "PIL", *(["transformers"] * transformers), extra="images")


def pipeline_class(arch: str) -> type:
    """The Pipeline class of an ``ARCHITECTURES`` name, without loading anything (its class
    attributes and ``check_method`` serve the checks before loading)."""
    if arch == "llamagen":
        from specops.imagegen.llamagen import LlamaGenPipeline

        return LlamaGenPipeline
    from specops.imagegen import hf_models

    return {"janus": hf_models.JanusPipeline, "emu3": hf_models.Emu3Pipeline,
            "chameleon": hf_models.ChameleonPipeline}[arch]  # fmt: skip


def detect(model_dir) -> str:
    """The ``ARCHITECTURES`` name of the checkpoint directory ``model_dir`` (reads its
    config.json or file names only); a ValueError / FileNotFoundError naming what is wrong."""
    path = Path(model_dir)
    if not path.exists():
        raise FileNotFoundError(f"generate_image: model directory {path} does not exist")
    if not path.is_dir():
        raise ValueError(
            f"generate_image: model {path} is a file; pass the checkpoint directory that holds it"
        )
    arch = _detect(path)
    if arch not in ARCHITECTURES:
        raise ValueError(
            f"generate_image: {path} holds no supported checkpoint (found {arch!r}); supported: "
            f"{sorted(ARCHITECTURES)} (a transformers directory with config.json, or LlamaGen's "
            ".pt files)"
        )
    return arch


ARCHITECTURES = {
    "llamagen": _llamagen,
    "janus": _hf("janus"),
    "emu3": _hf("emu3"),
    "chameleon": _hf("chameleon"),
}


def load_pipeline(model_dir, *, device="cpu", dtype=torch.float32, **options) -> Pipeline:
    """The pipeline of the checkpoint in ``model_dir`` (``ARCHITECTURES``); ``options`` go to it
    (``image_size``; LlamaGen: ``drafter``; transformers models: ``tokenizer``, a directory
    apart from the model's; Chameleon: ``vqgan``)."""
    path = Path(model_dir)
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise ValueError(f"generate_image: device must be cpu, cuda or cuda:N, got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"generate_image: device {device!r}, but this machine has no CUDA GPU")
    arch = detect(path)
    options = {k: v for k, v in options.items() if v is not None}
    try:
        return ARCHITECTURES[arch](path, device=device, dtype=dtype, **options)
    except TypeError as e:  # an option this architecture does not take
        if "unexpected keyword argument" not in str(e):
            raise
        msg = f"generate_image: the {arch} pipeline takes no {str(e).split()[-1]}"
        raise ValueError(msg) from None


def generate_image(
    model,
    *,
    prompt=None,
    class_id=None,
    method: str = "sjd_pac",
    temperature=None,
    top_k=None,
    top_p=None,
    cfg_scale=None,
    seed: int = 0,
    compare_ar: bool = False,
    progress=None,
    device=None,
    dtype=None,
    **method_options,
) -> ImageResult:
    """Generate one image per prompt (text models) or class id (LlamaGen c2i) with ``method``.
    ``model``: a checkpoint directory or a ``Pipeline``.  Sampling settings left None take the
    pipeline's defaults (its paper's); ``cfg_scale`` 1.0 turns guidance off.  ``compare_ar``:
    also run plain AR on the same requests (``ImageResult.ar_stats``, ``table()``).
    ``progress(counts, length)``: ``specops.decode.progress``'s hook.  ``device`` / ``dtype``
    (default CPU, float32) apply when ``model`` is a directory; a Pipeline is already loaded."""
    require_images()  # the pictures need pillow: said before any decoding
    if isinstance(model, Pipeline):
        if device is not None or dtype is not None:
            raise ValueError(
                "generate_image: device / dtype apply when loading a directory; this Pipeline is "
                "already loaded (load_pipeline(dir, device=..., dtype=...))"
            )
        pipe = model
    else:
        pipe = load_pipeline(model, device=device or "cpu", dtype=dtype or torch.float32)
    fn = pipe.method_fn(method, method_options)
    given = dict(temperature=temperature, top_k=top_k, top_p=top_p, cfg_scale=cfg_scale)
    sampling = {k: pipe.defaults.get(k) if v is None else v for k, v in given.items()}
    check_sampling(sampling)
    cond = pipe.conditions(prompt, class_id)
    if sampling["cfg_scale"] is not None and float(sampling["cfg_scale"]) == 1.0:
        sampling["cfg_scale"] = None  # uncond + 1 (cond - uncond) = cond: no second half
    with decode.progress(progress):  # specops.hf.generate keeps an enclosing hook
        codes, stats = pipe.run(method, cond, fn=fn, seed=seed, sampling=sampling,
                                options=method_options)  # fmt: skip
        ar_stats = None
        if compare_ar and method != "ar":
            _, ar_stats = pipe.run("ar", cond, fn=decode.ar, seed=seed, sampling=sampling,
                                   options={})  # fmt: skip
    from PIL import Image

    pixels = pipe.decode(codes)
    images = [Image.fromarray(p.numpy()) for p in pixels]
    return ImageResult(images, codes, stats, ar_stats, sampling)

"""LlamaGen (class-conditional GPT-B/L/XL/XXL/3B + VQ-16) from a directory of its released files.

    ckpts/llamagen-b/c2i_B_256.pt        # the GPT; the image size in the name (or image_size=)
    ckpts/llamagen-b/vq_ds16_c2i.pt      # the VQ-16 tokenizer
    ckpts/llamagen-b/drafter.pt          # optional: a specops.models.Drafter for speculative/vvs

Layout: one class token, then grid x grid codes in raster order, no separators.  Guidance:
the unconditional class 1000 (``ARConfig.null_class``), ``uncond + s (cond - uncond)`` before
the temperature.  Defaults: LlamaGen's sample_c2i.py (CFG 4.0, top-k 2000, top-p 1, temperature
1).  Text-conditional GPTs (``t2i_XL_stage1_256.pt``, ``vq_ds16_t2i.pt``) also need the
FLAN-T5-XL encoder (``t5/`` in the directory, or t5=DIR): the prompt's 120 T5 features are the
prefix, ``uncond_embedding`` the guidance's; sample_t2i.py's CFG 7.5, top-k 1000.  VVS:
LANTERN relaxation over the VQ-16 codebook (``delta`` 0.2, ``lantern_k`` 16 latent neighbours),
as VVS runs every experiment.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from specops.imagegen.base import Pipeline
from specops.models.llamagen_gpt import LlamaGenT2I, load_llamagen
from specops.models.loading import load_drafter_file
from specops.models.vqgan import load_vq16, to_uint8

__all__ = ["LlamaGenPipeline"]


def _find(path: Path, drafter):
    """(gpt, vq, drafter) files of the directory; the VQ and drafter files by name."""
    pts = sorted(path.glob("*.pt"))
    vqs = [p for p in pts if p.name.startswith("vq")]
    drafters = [p for p in pts if p.name.startswith("drafter")]
    gpts = [p for p in pts if p not in vqs and p not in drafters]
    if len(vqs) != 1 or len(gpts) != 1:
        raise ValueError(
            f"LlamaGen directory {path}: expected one GPT .pt and one vq*.pt, found GPT "
            f"{[p.name for p in gpts]} and VQ {[p.name for p in vqs]}"
        )
    if drafter is None and len(drafters) == 1:
        drafter = drafters[0]
    return gpts[0], vqs[0], drafter


class LlamaGenPipeline(Pipeline):
    name = "llamagen"
    defaults = dict(cfg_scale=4.0, top_k=2000, top_p=None, temperature=1.0)
    extra_options = {"vvs": ("delta", "lantern_k")}

    def __init__(
        self, path, *, device="cpu", dtype=torch.float32, image_size=None, drafter=None, t5=None
    ):  # fmt: skip
        gpt, vq, drafter = _find(Path(path), drafter)
        if drafter is not None and not Path(drafter).is_file():  # every check before loading
            raise FileNotFoundError(f"LlamaGen: drafter file {drafter} does not exist")
        if t5 is not None and not Path(t5).is_dir():
            raise FileNotFoundError(f"LlamaGen t2i: T5 directory {t5} does not exist")
        grid = None
        if image_size is not None:
            if (
                isinstance(image_size, bool)
                or not isinstance(image_size, int)
                or (image_size <= 0 or image_size % 16)
            ):
                raise ValueError(f"LlamaGen: image_size must be a multiple of 16, got {image_size}")
            grid = image_size // 16
        elif re.search(r"_(\d+)\.pt$", gpt.name) is None:
            raise ValueError(f"LlamaGen: cannot tell the image size of {gpt.name}; pass image_size")
        self.model = load_llamagen(gpt, grid=grid, device=device, dtype=dtype)
        self.vq = load_vq16(vq, device=device)
        if self.vq.cfg.n_embed != self.model.cfg.vocab:
            raise ValueError(
                f"LlamaGen: the GPT has {self.model.cfg.vocab} image codes but the VQ codebook "
                f"{self.vq.cfg.n_embed}"
            )
        g = self.model.cfg.grid
        self.grid = (g, g)
        if drafter is not None:
            drafter = Path(drafter)
            self.drafter, _ = load_drafter_file(self.model, drafter.name, drafter.parent, device,
                                                dtype)  # fmt: skip
        self.text = isinstance(self.model, LlamaGenT2I)
        if self.text:  # sample_t2i.py's settings; the T5 encoder that makes the captions
            self.defaults = dict(cfg_scale=7.5, top_k=1000, top_p=None, temperature=1.0)
            self.t5, self.t5_tokenizer = _load_t5(Path(path), t5, device, dtype)
        elif t5 is not None:
            raise ValueError("LlamaGen: t5= is for the text-conditional (t2i) GPTs")

    def conditions(self, prompt, class_id):
        if self.text:
            return self._captions(prompt, class_id)
        if prompt is not None:
            raise ValueError("LlamaGen c2i models take class ids (class_id=), not a text prompt")
        if class_id is None:
            raise ValueError("LlamaGen: class_id is required (ImageNet class ids, e.g. 207)")
        ids = torch.as_tensor(class_id).reshape(-1)
        n = self.model.cfg.num_classes
        if ids.numel() == 0 or ids.dtype.is_floating_point or bool(((ids < 0) | (ids >= n)).any()):
            raise ValueError(f"LlamaGen: class_id must be integers in [0, {n}), got {class_id}")
        return ids.long().to(self.model.embed.weight.device)

    def _captions(self, prompt, class_id):
        """Text prompts -> FLAN-T5 features of max length T (padded, truncated) -> the model's
        caption prefix (``LlamaGenT2I.set_captions``) -> the loop's prompt ids."""
        if class_id is not None or prompt is None or prompt == "" or prompt == []:
            raise ValueError("LlamaGen t2i models take a text prompt (prompt=), not class ids")
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        t = self.model.cfg.prefix
        enc = self.t5_tokenizer(prompts, max_length=t, padding="max_length", truncation=True,
                                return_tensors="pt")  # fmt: skip
        dev = self.model.embed.weight.device
        ids, mask = enc["input_ids"].to(dev), enc["attention_mask"].to(dev)
        with torch.no_grad():
            feats = self.t5(input_ids=ids, attention_mask=mask).last_hidden_state
        return self.model.set_captions(feats, mask)

    def run(self, method, cond, *, fn, seed, sampling, options):
        length = self.grid[0] * self.grid[1]
        opts = dict(options)
        if self.text and method in ("speculative", "vvs"):
            if opts.setdefault("drafter_prefill", False):  # caption slots: no token embedding
                raise ValueError("LlamaGen t2i: the drafter cannot read the caption prefix "
                                 "(drafter_prefill=True)")  # fmt: skip
        args = [self.model]
        if method in ("speculative", "vvs"):
            args.append(self.drafter)
        args.append(cond)
        if method == "vvs":
            from specops.decode import lantern

            args.append(self.vq.codebook)
            k, delta = opts.pop("lantern_k", 16), opts.pop("delta", 0.2)
            opts.setdefault("relax", lantern(self.vq.codebook, k, delta))
        return fn(*args, length=length, seed=seed, **sampling, **opts)

    def vq_codes(self):
        return self.vq.codebook, None  # the loop draws the VQ codes themselves

    def decode(self, codes):
        return to_uint8(self.vq.decode(codes, self.grid))


def _load_t5(path: Path, t5, device, dtype):
    """The FLAN-T5 encoder and tokenizer of a t2i model: ``t5=DIR``, else ``t5/`` or
    ``flan-t5-xl/`` inside the model directory (transformers' T5EncoderModel layout)."""
    from specops._optional import require

    require("LlamaGen t2i", "transformers", extra="images")
    import transformers

    cands = [Path(t5)] if t5 is not None else [path / "t5", path / "flan-t5-xl"]
    found = next((c for c in cands if (c / "config.json").is_file()), None)
    if found is None:
        raise FileNotFoundError(
            f"LlamaGen t2i: no T5 encoder at {[str(c) for c in cands]} (a FLAN-T5-XL "
            "save_pretrained directory with its tokenizer; t5=DIR)"
        )
    enc = transformers.T5EncoderModel.from_pretrained(found, dtype=dtype).to(device).eval()
    return enc, transformers.AutoTokenizer.from_pretrained(found)

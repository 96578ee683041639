"""Text-to-image transformers checkpoints: Janus / Janus-Pro, Emu3, Chameleon / Lumina-mGPT.

Each pipeline builds its model's image prompt, its unconditional prompt for classifier-free
guidance and its image-token layout, runs ``specops.hf.generate`` and decodes the codes
(docs/notes/janus.md, docs/notes/emu3.md and docs/notes/chameleon_lumina.md have the specs):

- Janus: chat prompt + <begin_of_image>; ``num_image_tokens`` codes from the generation head
  (``image_head``); CFG 5, temperature 1 (the Janus-Pro release).
- Emu3: the processor's image prompt ("H*W" header); per row W visual tokens and the EOL token;
  CFG 3, top-k 2048 (BAAI's recipe).
- Chameleon / Lumina-mGPT: "Generate an image of WxH ..." with the size tokens fed, not sampled;
  per row W image tokens and <reserved08799>; CFG 3, top-k 2000; the VQGAN decoder from the
  Chameleon tokenizer's ``vqgan.ckpt``.
Each family's prompts, unconditional prompts and defaults: docs/generate.md, "Architectures".
"""

from __future__ import annotations

from pathlib import Path

import torch

from specops.imagegen.base import Pipeline

__all__ = ["JanusPipeline", "Emu3Pipeline", "ChameleonPipeline"]

EMU3_NEGATIVE = (
    "lowres, bad anatomy, bad hands, text, error, missing fingers, extra digit, fewer digits, "
    "cropped, worst quality, low quality, normal quality, jpeg artifacts, signature, watermark, "
    "username, blurry."
)


def _ragged(rows: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists -> (ids [B, P] right-padded with 0, attention mask [B, P])."""
    p = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), p, dtype=torch.long)
    mask = torch.zeros(len(rows), p, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    return ids.to(device), mask.to(device)


def _positive(image_size) -> None:
    if image_size is not None and (isinstance(image_size, bool) or not isinstance(image_size, int)
                                   or image_size <= 0):  # fmt: skip
        raise ValueError(f"image_size must be a positive number of pixels, got {image_size!r}")


def _to_uint8(x: torch.Tensor) -> torch.Tensor:
    """[-1, 1] channels-first float -> uint8 [B, H, W, 3] (the processors' clip((x + 1) / 2 * 255)
    and truncation)."""
    y = ((x.float().clamp(-1, 1) + 1) / 2 * 255).to(torch.uint8)
    return y.permute(0, 2, 3, 1).cpu()


class HFPipeline(Pipeline):
    """The shared part: load the model class and the processor, check the prompt, run
    ``specops.hf.generate`` with the layout, keep the image's codes."""

    model_class = ""
    takes_drafter = False
    layout = None  # a GridLayout the new tokens follow (row ends: Emu3, Lumina-mGPT)
    image_head = False  # Janus: codes from the image-generation head

    def __init__(self, path, *, device="cpu", dtype=torch.float32, drafter=None, tokenizer=None):
        import transformers

        if drafter is not None:
            raise ValueError(
                f"{self.name}: drafter files are for LlamaGen; transformers models run ar, sjd "
                "and sjd_pac here"
            )
        if tokenizer is not None and not Path(tokenizer).is_dir():
            raise FileNotFoundError(f"{self.name}: tokenizer directory {tokenizer} does not exist")
        self.path = Path(path)
        cls = getattr(transformers, self.model_class)
        self.hf = cls.from_pretrained(self.path, dtype=dtype).to(device).eval()
        src = self.path if tokenizer is None else Path(tokenizer)  # Lumina-mGPT: Chameleon's
        try:
            self.processor = transformers.AutoProcessor.from_pretrained(src)
        except (OSError, ValueError, TypeError, KeyError):
            try:  # a text-only directory (Chameleon / Lumina-mGPT needs its tokenizer alone)
                self.processor = transformers.AutoTokenizer.from_pretrained(src)
            except (OSError, ValueError, TypeError, KeyError) as e:
                raise ValueError(f"{self.name}: {src} has no loadable tokenizer ({e})") from None
        self.tokenizer = getattr(self.processor, "tokenizer", self.processor)
        self.device = torch.device(device)

    def conditions(self, prompt, class_id):
        if class_id is not None:
            raise ValueError(f"{self.name} is text-to-image: pass prompt=, not class ids")
        if prompt is None or prompt == [] or prompt == "":
            raise ValueError(f"{self.name}: a text prompt is required")
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        cond, uncond = self.prompts(prompts)
        ctx = self.context()
        longest = max(len(r) for r in cond + uncond)
        if longest + self.length > ctx:
            raise ValueError(
                f"{self.name}: the prompt ({longest} tokens) and the {self.grid[0]}x"
                f"{self.grid[1]} image ({self.length} tokens) do not fit the context of {ctx}"
            )
        return _ragged(cond, self.device), _ragged(uncond, self.device)

    def context(self) -> int:
        cfg = getattr(self.hf.config, "text_config", None) or self.hf.config
        return int(getattr(cfg, "max_position_embeddings", 1 << 30))

    @property
    def length(self) -> int:
        """Tokens the image takes (its row ends included)."""
        return self.grid[0] * self.grid[1] if self.layout is None else self.layout.length

    def run(self, method, cond, *, fn, seed, sampling, options):
        from specops.hf import generate

        (ids, mask), (neg, neg_mask) = cond
        s = dict(sampling)
        t = s.pop("temperature")
        cfg = s.pop("cfg_scale")
        seqs, stats = generate(
            self.hf, ids, attention_mask=mask, method=method, max_new_tokens=self.length,
            do_sample=t is None or t > 0, temperature=1.0 if not t else t, cfg_scale=cfg,
            negative_input_ids=neg if cfg is not None else None,
            negative_attention_mask=neg_mask if cfg is not None else None,
            eos_token_id=[], seed=seed, layout=self.layout, image_head=self.image_head,
            **s, **options,
        )  # fmt: skip
        return self.codes(seqs[:, ids.shape[1] :]), stats


class JanusPipeline(HFPipeline):
    name = "janus"
    model_class = "JanusForConditionalGeneration"
    defaults = dict(cfg_scale=5.0, temperature=1.0, top_k=None, top_p=None)
    image_head = True

    def __init__(self, path, *, image_size=None, **kw):
        if image_size is not None:  # before loading anything, as every check here
            raise ValueError("janus: the image size is fixed by the checkpoint (num_image_tokens)")
        super().__init__(path, **kw)
        n = int(self.hf.config.vision_config.num_image_tokens)
        side = int(round(n**0.5))
        self.grid = (side, side)

    def prompts(self, prompts):
        tok, gc = self.tokenizer, self.hf.generation_config
        pad = gc.pad_token_id if gc.pad_token_id is not None else tok.pad_token_id
        keep = {tok.bos_token_id, tok.convert_tokens_to_ids(tok.boi_token)}
        cond, uncond = [], []
        for p in prompts:
            if getattr(self.processor, "chat_template", None):
                msg = [{"role": "user", "content": [{"type": "text", "text": p}]}]
                p = self.processor.apply_chat_template(msg, add_generation_prompt=True)
            ids = self.processor(text=[p], generation_mode="image")["input_ids"][0]
            ids = [int(i) for i in ids]
            cond.append(ids)
            uncond.append([i if i in keep else pad for i in ids])
        return cond, uncond

    def codes(self, tokens):
        return tokens

    def vq_codes(self):
        return self.hf.model.vqmodel.quantize.embedding.weight, None  # the gen head draws codes

    @torch.no_grad()
    def decode(self, codes):
        pix = self.hf.decode_image_tokens(codes.long())  # [B, H, W, 3] in [-1, 1]
        return _to_uint8(pix.permute(0, 3, 1, 2))


class Emu3Pipeline(HFPipeline):
    name = "emu3"
    model_class = "Emu3ForConditionalGeneration"
    defaults = dict(cfg_scale=3.0, top_k=2048, temperature=1.0, top_p=None)

    def __init__(self, path, *, image_size=None, **kw):
        from specops.hf import GridLayout

        _positive(image_size)
        super().__init__(path, **kw)
        self.area = {} if image_size is None else {"image_area": int(image_size) ** 2}
        probe = self.processor(text=["x"], return_for_image_generation=True, **self.area)
        h, w = (int(v) for v in probe["image_sizes"][0])
        vm = self.hf.model.vocabulary_mapping
        vocab = self.hf.get_output_embeddings().out_features
        self.layout = GridLayout(h, w, vm.image_tokens, vocab, row_end=vm.eol_token_id)
        self.grid = (h, w)

    def prompts(self, prompts):
        cond = [
            [int(i) for i in self.processor(text=[p], return_for_image_generation=True,
                                            **self.area)["input_ids"][0]]
            for p in prompts
        ]  # fmt: skip
        neg = [int(i) for i in self.processor(text=[EMU3_NEGATIVE])["input_ids"][0]]
        return cond, [neg] * len(prompts)

    def vq_codes(self):
        vm = self.hf.model.vocabulary_mapping
        return self.hf.model.vqmodel.quantize.embedding.weight, dict(vm.bpe2img)

    def codes(self, tokens):
        h, w = self.grid
        body = tokens[:, : self.layout.length].reshape(-1, h, w + 1)
        return self.hf.model.vocabulary_mapping.convert_bpe2img(body).reshape(tokens.shape[0], -1)

    @torch.no_grad()
    def decode(self, codes):
        h, w = self.grid
        return _to_uint8(self.hf.model.vqmodel.decode(codes.view(-1, h, w)))


class ChameleonPipeline(HFPipeline):
    name = "chameleon"
    model_class = "ChameleonForConditionalGeneration"
    defaults = dict(cfg_scale=3.0, top_k=2000, temperature=1.0, top_p=None)

    def __init__(self, path, *, image_size=768, vqgan=None, **kw):
        from specops.hf import GridLayout
        from specops.models.vqgan import load_chameleon_vqgan

        _positive(image_size)
        if image_size % 32:
            raise ValueError(f"chameleon: image_size must be a multiple of 32, got {image_size}")
        self.path = Path(path)
        vq_file = Path(vqgan) if vqgan is not None else self._find_vqgan()
        if not vq_file.is_file():
            raise FileNotFoundError(f"chameleon: vqgan file {vq_file} does not exist")
        super().__init__(path, **kw)
        self.size = int(image_size)
        self.vq = load_chameleon_vqgan(vq_file, device=self.device)
        self.boi, self.sep, self.row_end, self.size_token = (
            self._token(t) for t in ("<racm3:break>", "<reserved08706>", "<reserved08799>",
                                     f"<reserved0{8800 + self.size // 32}>")
        )  # fmt: skip
        vm = self.hf.model.vocabulary_mapping
        vocab = self.hf.get_output_embeddings().out_features
        self.bpe2img = torch.zeros(vocab, dtype=torch.long)  # BPE id -> VQ code ("IMGIMG" names)
        for bpe, code in vm.bpe2img.items():
            self.bpe2img[bpe] = code
        self.bpe2img = self.bpe2img.to(self.device)
        side = self.size // 16
        self.layout = GridLayout(side, side, vm.image_tokens, vocab, row_end=self.row_end)
        self.grid = (side, side)

    def _token(self, name: str) -> int:
        """The id of one of Lumina-mGPT's layout tokens, which the tokenizer must know."""
        i = self.tokenizer.convert_tokens_to_ids(name)
        if i is None or self.tokenizer.convert_ids_to_tokens(i) != name:
            raise ValueError(
                f"chameleon: the tokenizer has no {name} token (Lumina-mGPT's image layout; "
                f"for the size token: image_size {self.size} gives size token {self.size // 32})"
            )
        return int(i)

    def _find_vqgan(self) -> Path:
        for f in ("vqgan.ckpt", "tokenizer/vqgan.ckpt", "chameleon/tokenizer/vqgan.ckpt"):
            if (self.path / f).is_file():
                return self.path / f
        raise FileNotFoundError(
            f"chameleon: no vqgan.ckpt in {self.path} (or tokenizer/): transformers has only the "
            "VQ encoder; the decoder comes from the Chameleon tokenizer's vqgan.ckpt (vqgan=PATH)"
        )

    def prompts(self, prompts):
        tok = self.tokenizer
        head = [self.boi, self.size_token, self.size_token]
        cond = []
        for p in prompts:
            text = f"Generate an image of {self.size}x{self.size} according to the following "
            text += f"prompt:\n{p}"
            body = tok(text, add_special_tokens=False)["input_ids"]
            cond.append([tok.bos_token_id, *body, self.sep, *head])
        return cond, [head] * len(prompts)

    def vq_codes(self):
        vm = self.hf.model.vocabulary_mapping
        return self.hf.model.vqmodel.quantize.embedding.weight, dict(vm.bpe2img)

    def codes(self, tokens):
        return self.bpe2img[self.layout.codes(tokens).long()]

    def decode(self, codes):
        return _to_uint8(self.vq.decode(codes, self.grid))

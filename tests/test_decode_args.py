"""Every decoding method checks the arguments it shares before any work, with one TypeError /
ValueError line naming the argument: ``length`` (an int >= 1, at most what is left of the image;
None = the rest of the image), the prompt ``classes`` (class ids in range, token ids in range,
-1 padding on the right only, at least one request and one token per request; also under
validation mode) and the window / tree sizes (``window``, ``branch``, ``depth``, ``num_draft``,
``num_nodes``)."""

from __future__ import annotations

import pytest
import torch

import specops
from specops.decode import Sampling, ar, sjd, sjd_pac, speculative, vvs
from specops.models.loading import load_default

CLS = torch.arange(2)
# every method, called with the argument checks' inputs only: the drafter and the codebook are
# never reached when an argument is refused (None in their place)
METHODS = {
    "ar": lambda m, c, **k: ar(m, c, **k),
    "sjd": lambda m, c, **k: sjd(m, c, **k),
    "sjd_pac": lambda m, c, **k: sjd_pac(m, c, **k),
    "speculative": lambda m, c, **k: speculative(m, None, c, **k),
    "vvs": lambda m, c, **k: vvs(m, None, c, None, **k),
}


@pytest.fixture(scope="module")
def model():
    return load_default(with_drafter=False).target


def _raises(exc, what, fn, *args, **kw):
    with pytest.raises(exc) as e:
        fn(*args, **kw)
    msg = str(e.value)
    assert f"{what} " in msg or f"{what}:" in msg or f"({what}" in msg, msg
    assert "\n" not in msg, msg
    return msg


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize(
    "length,exc",
    [(0, ValueError), (-1, ValueError), (257, ValueError), (2.5, TypeError), (True, TypeError),
     ("3", TypeError), (torch.tensor(3.0), TypeError)],
)  # fmt: skip
def test_bad_length(model, method, length, exc):
    _raises(exc, "length", METHODS[method], model, CLS, length=length, temperature=0)


def test_length_default_is_the_rest_of_the_image(model):
    """None: the whole image after class ids, what is left of it after a prompt that already
    holds image tokens; a prompt that fills the image leaves nothing to decode."""
    prompt = torch.cat(
        [torch.tensor([[model.cfg.vocab]]), torch.zeros(1, 250, dtype=torch.long)], 1
    )
    out, st = ar(model, prompt, temperature=0)
    assert out.shape == (1, 6) and st.tokens == 6
    out, _ = sjd(model, prompt, window=4, temperature=0)
    assert out.shape == (1, 6)
    _raises(ValueError, "length", ar, model, prompt, length=7, temperature=0)
    full = torch.cat([prompt, torch.zeros(1, 6, dtype=torch.long)], 1)
    with pytest.raises(ValueError, match="already holds the whole"):
        ar(model, full, temperature=0)


def test_length_is_required_without_an_image_size():
    """A model without cfg.grid (a text LM) needs length given."""

    class NoGrid:
        cfg = None

    with pytest.raises(ValueError, match="length is required"):
        ar(NoGrid(), torch.zeros(1, 3, dtype=torch.long))


BAD_PROMPTS = {
    "left padded": (lambda v: torch.tensor([[v, 3, 4], [-1, v, 5]]), ValueError, "right"),
    "hole": (lambda v: torch.tensor([[v, -1, 4]]), ValueError, "right"),
    "all -1": (lambda v: torch.tensor([[v, 3], [-1, -1]]), ValueError, "no token"),
    "negative token": (lambda v: torch.tensor([[v, -2]]), ValueError, "-2"),
    "token past the vocabulary": (lambda v: torch.tensor([[v, v + 11]]), ValueError, "523"),
    "negative class": (lambda v: torch.tensor([-5, 1]), ValueError, "-5"),
    "class past num_classes": (lambda v: torch.tensor([0, 10]), ValueError, "10"),
    "no request": (lambda v: torch.zeros(0, dtype=torch.long), ValueError, "B >= 1"),
    "no request, 2-D": (lambda v: torch.zeros(0, 3, dtype=torch.long), ValueError, "B >= 1"),
    "no token": (lambda v: torch.zeros(2, 0, dtype=torch.long), ValueError, "P >= 1"),
    "float ids": (lambda v: torch.tensor([1.0, 2.0]), TypeError, "float"),
    "bool ids": (lambda v: torch.tensor([True]), TypeError, "bool"),
    "3-D": (lambda v: torch.zeros(1, 2, 3, dtype=torch.long), ValueError, "shape"),
    "scalar": (lambda v: torch.tensor(3), ValueError, "shape"),
    "a string": (lambda v: "cat", TypeError, "str"),
}


@pytest.mark.parametrize("validate", [False, True])
@pytest.mark.parametrize("case", sorted(BAD_PROMPTS))
@pytest.mark.parametrize("method", sorted(METHODS))
def test_bad_prompt(model, method, case, validate):
    make, exc, text = BAD_PROMPTS[case]
    with specops.validation(validate):
        msg = _raises(exc, "classes", METHODS[method], model, make(model.cfg.vocab), length=4)
    assert text in msg, msg


def test_good_prompts_still_decode(model):
    """Right-padded ragged prompts, the null class as a token and int32 ids are prompts."""
    v = model.cfg.vocab
    ragged = torch.tensor([[v, 3, 4], [v + 1, -1, -1]], dtype=torch.int32)
    out, _ = ar(model, ragged, length=3, temperature=0)
    assert out.shape == (2, 3) and int(out.min()) >= 0
    out, _ = ar(model, torch.tensor([[model.cfg.null_class]]), length=2, temperature=0)
    assert out.shape == (1, 2)
    out, _ = ar(model, [3, 4], length=2, temperature=0)  # a list of class ids
    assert out.shape == (2, 2)


WIDTHS = [
    ("sjd", "window", {}),
    ("sjd_pac", "window", {}),
    ("sjd_pac", "branch", {"window": 16}),
    ("sjd_pac", "depth", {"window": 16, "branch": 2}),
    ("speculative", "num_draft", {"tree": None}),
    ("speculative", "branch", {}),
    ("speculative", "depth", {}),
    ("speculative", "num_nodes", {}),
    ("vvs", "branch", {}),
    ("vvs", "depth", {}),
    ("vvs", "num_nodes", {}),
    ("vvs", "interval", {}),
    ("vvs", "stride", {}),
]


@pytest.mark.parametrize("method,name,base", WIDTHS, ids=[f"{m}-{n}" for m, n, _ in WIDTHS])
@pytest.mark.parametrize(
    "value,exc", [(0, ValueError), (-5, ValueError), (2.0, TypeError), (True, TypeError)]
)
def test_bad_sizes(model, method, name, base, value, exc):
    _raises(exc, name, METHODS[method], model, CLS, length=8, **base, **{name: value})


@pytest.mark.parametrize(
    "method,name,value",
    [("sjd", "window", 100000), ("sjd_pac", "window", 100000),
     ("sjd_pac", "branch", 513), ("speculative", "num_draft", 100000),
     ("speculative", "branch", 513), ("speculative", "num_nodes", 100000)],
)  # fmt: skip
def test_sizes_past_the_image_or_the_vocabulary(model, method, name, value):
    """A window wider than any Tree, more children than tokens: refused by name before any work
    (instead of a Tree message or a topk error deep in the loop)."""
    msg = _raises(ValueError, name, METHODS[method], model, CLS, length=8, **{name: value})
    assert any(w in msg for w in ("vocabulary", "MAX_NODES")), msg


def test_speculative_tree_type(model):
    _raises(TypeError, "tree", speculative, model, None, CLS, tree=3, length=4)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_sampling_settings_are_one_object(model, method):
    """The sampling keywords (temperature, top_k, top_p, cfg_scale, seed) gather into one
    ``Sampling``; any other keyword is a TypeError naming it and the settings, before any work."""
    msg = _raises(TypeError, "'temprature'", METHODS[method], model, CLS, length=4, temprature=0)
    assert "temperature, top_k, top_p, cfg_scale, seed" in msg, msg
    s = Sampling.of(method, dict(temperature=0, top_k=3, cfg_scale=2.0, seed=5))
    assert s == Sampling(0, 3, None, 2.0, 5) and s.greedy
    assert s.probs_kwargs == dict(temperature=0, top_k=3, top_p=None)

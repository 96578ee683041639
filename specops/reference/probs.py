"""Reference probs_from_logits: CFG combine, temperature, top-k, top-p, softmax."""

__all__: list[str] = []

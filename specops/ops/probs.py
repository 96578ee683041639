"""Public probs_from_logits: CFG, temperature, top-k/top-p, softmax."""

__all__: list[str] = []

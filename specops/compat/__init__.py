"""Drop-in signatures of other libraries' ops, implemented with specops kernels.

``specops.compat.flashinfer``: FlashInfer's ``chain_speculative_sampling``.  Nothing here imports
the library it mirrors (``import specops`` never imports an engine)."""

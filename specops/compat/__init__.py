"""Drop-in signatures of other libraries' ops, implemented with specops kernels.

``specops.compat.flashinfer``: FlashInfer's ``chain_speculative_sampling``;
``specops.compat.sglang``: sgl_kernel's ``verify_tree_greedy``.  Nothing here imports
the library it mirrors (``import specops`` never imports an engine)."""

"""Drop-in signatures of other libraries' ops, implemented with specops kernels.

``specops.compat.flashinfer``: FlashInfer's ``chain_speculative_sampling``;
``specops.compat.sglang_verify``: SGLang's EAGLE tree and chain verification kernels;
``specops.compat.sglang_build_tree``: its ``build_tree_kernel_efficient``.  (``specops.sglang``
installs them into SGLang, as ``specops.vllm`` does for vLLM.)  Nothing here imports
the library it mirrors (``import specops`` never imports an engine)."""

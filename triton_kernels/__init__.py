"""specops' Triton kernels, installed as ``specops.triton_kernels``.

Never importable as a top-level ``triton_kernels``: that name belongs to the Triton project's own
package (used by vLLM).  Modules import triton lazily, so ``import specops`` works without it."""

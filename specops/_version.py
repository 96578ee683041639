"""The release version.  A CPU-only build (SPECOPS_CPU_ONLY=1) is published as ``<version>+cpu``
(pyproject.toml's override), a CUDA build as the plain version."""

__version__ = "0.1.0"

"""What every op module reaches as ``c.<name>`` (``from specops.ops import _common as c``),
gathered from the modules that hold it by what it does:

- ``_backends``: validation mode, each op's backends, resolving "auto" and named backends;
- ``checks``: argument checks (public: the engine adapters in specops.compat use them too);
- ``_rng``: seeds and offsets, normalised for the bindings and the reference;
- ``_dispatch``: torch.library registration, the eager caller and fast path, outputs.

The shape every op module follows (a declaration, its checks and hooks; the public function
written from it by scripts/gen_ops.py runs the checks, then ``OpDecl.run``, which calls
``pick_backend`` and then the kernel): docs/conventions.md."""

from __future__ import annotations

from specops.ops._backends import (  # noqa: F401
    BACKENDS,
    available_backends,
    backend_table,
    declare_backends,
    pick_backend,
    resolve_backend,
    usable_backends,
    validating,
    validation,
)
from specops.ops._dispatch import (  # noqa: F401
    _FAST,
    LIB,
    fast_kernel,
    int32_ids,
    ops,
    stream_of,
    write_outs,
)
from specops.ops._rng import (  # noqa: F401
    Rng,
    check_rng,
)
from specops.ops.checks import (  # noqa: F401
    check_ids,
    check_no_alias,
    check_out,
    check_probs,
    check_tensor,
    check_values_ids,
    check_values_probs,
    check_writable,
    check_written_apart,
)

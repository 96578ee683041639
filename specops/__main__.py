"""``python -m specops ...`` is the ``specops`` command (specops.cli)."""

import sys

from specops.cli import main

sys.exit(main())

"""``python -m einc``: the same as the ``einc`` command (see einc/cli.py)."""

import sys

from .cli import main

sys.exit(main())

"""``python -m einc``: the same as the ``einc`` command (see einc/tools/cli.py)."""

import sys

from .tools.cli import main

sys.exit(main())

"""Environment switches, read in one place.

``EINC_CACHE_SIZE``  how many plans the in-memory cache keeps (default 4096).
"""

from __future__ import annotations

import os


def cache_size() -> int:
    return int(os.environ.get("EINC_CACHE_SIZE", "4096"))

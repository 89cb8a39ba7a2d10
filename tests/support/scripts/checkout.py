"""Imported first by the scripts in this folder: puts this checkout first on ``sys.path``,
so a script tests this checkout's einc whatever folder it is run from."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


def bare_einc() -> None:
    """Register the ``einc`` package without running ``einc/__init__`` (which imports
    torch), so that only the submodules a script imports afterwards are loaded."""
    import importlib.util
    import types
    spec = importlib.util.find_spec("einc")
    pkg = types.ModuleType("einc")
    pkg.__path__ = list(spec.submodule_search_locations)
    sys.modules["einc"] = pkg

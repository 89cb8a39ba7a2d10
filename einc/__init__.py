"""einc: an einsum compiler for PyTorch.

Pipeline (one module per stage): ``equation`` (parse) -> ``graph`` -> ``plan``
(opt_einsum chooses the order) -> ``lower`` (kernel IR) -> ``codegen`` (Triton
source) -> ``runtime`` (cache, loader, dispatch, torch executor).

``import einc`` loads only the pure stages; the torch-dependent front end
(``einc.api``: ``einsum``, ``explain``, ...) is imported on first use of one of its
names, so that ``einc dump`` (``einc.cli``) runs without importing torch or triton.
"""

from __future__ import annotations

import importlib

from .errors import EincError, MemoryLimitError
from .planner.plan import Plan, Step

__version__ = "0.1.0"

# Names defined in einc.api (which imports torch), resolved on first access.
_API_NAMES = ("einsum", "contract", "explain", "contract_expression", "contract_path", "ContractExpression",
              "PathInfo", "shared_intermediates", "count_cached_ops", "cache_info", "cache_clear", "set_cache_size")

__all__ = [*_API_NAMES, "EincError", "MemoryLimitError", "Plan", "Step", "__version__"]


def __getattr__(name: str):
    if name in _API_NAMES:
        api = importlib.import_module(".api", __name__)
        # Bind every front-end name at once: later lookups are plain module attributes.
        globals().update({n: getattr(api, n) for n in _API_NAMES})
        return globals()[name]
    if not name.startswith("__"):
        # Submodules as attributes (``einc.api``, ``einc.runtime``), as an eager
        # ``__init__`` provided them.
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    """The public names only (``__all__``)."""
    return sorted(__all__)

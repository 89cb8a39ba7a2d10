"""einc: an einsum compiler for PyTorch.

Pipeline, one room per stage, each importing only the rooms below it
(``tests/test_layering.py``): ``planner/`` (equation -> graph -> plan: opt_einsum
chooses the order; slicing; fusion decisions) -> ``codegen/`` (kernel IR, lowering,
Triton source) -> ``runtime/`` (cache, dispatch, and one wing per executor:
``torch_executor/``, ``triton_executor/`` with the loader and the shared kernel
launcher) -> the doors (``api``: torch.einsum's; ``opt_einsum_api``: opt_einsum's;
``named``, ``autograd``, ``custom_op``, ``distributed``, ``dynamo/``: the torch.compile
backend) -> ``tools/`` (``cli``, ``dump``, ``benchmark/``).

``import einc`` loads only the pure stages; the torch-dependent front end
(``einc.api``: ``einsum``, ``explain``, ...; ``einc.opt_einsum_api``: ``contract``, ...)
is imported on first use of one of its names, so that ``einc dump`` (``einc.tools.cli``)
runs without importing torch or triton.
"""

from __future__ import annotations

import importlib
import sys

from .errors import EincError, MemoryLimitError
from .planner.plan import Plan, Step

__version__ = "0.1.0"

# Names defined in the doors (which import torch), resolved on first access.
_API_NAMES = ("einsum", "explain", "shared_intermediates", "count_cached_ops", "cache_info", "cache_clear",
              "set_cache_size")
_OPT_EINSUM_NAMES = ("contract", "contract_expression", "contract_path", "ContractExpression", "PathInfo")
# opt_einsum's own, as ``import einc as oe`` code reaches them (``oe.RandomGreedy(...)``,
# ``oe.paths.greedy``): the very objects, which einc's ``optimize=`` takes.
_FROM_OPT_EINSUM = ("BranchBound", "DynamicProgramming", "RandomGreedy", "get_symbol", "paths")

__all__ = [*_API_NAMES, *_OPT_EINSUM_NAMES, *_FROM_OPT_EINSUM, "EincError", "MemoryLimitError", "Plan", "Step",
           "__version__"]


def _load(name: str):
    """Import einc's submodule ``name`` with torch's function modes and subclass dispatch off.
    A user's ``TorchFunctionMode`` active at einc's first use would otherwise see einc's
    import-time torch calls (``torch.device(...)`` dispatches to modes), and a handler that
    reads ``einc.einsum`` would re-enter einc half-imported: the op library's second
    registration fails. Without torch imported no mode can be active, and ``import einc``
    still imports no torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return importlib.import_module(name, __name__)
    with torch._C.DisableTorchFunction():
        return importlib.import_module(name, __name__)


def __getattr__(name: str):
    if name in _API_NAMES or name in _OPT_EINSUM_NAMES:
        api = _load(".api")
        oe = _load(".opt_einsum_api")
        # Bind every front-end name at once: later lookups are plain module attributes.
        globals().update({n: getattr(api, n) for n in _API_NAMES})
        globals().update({n: getattr(oe, n) for n in _OPT_EINSUM_NAMES})
        return globals()[name]
    if name in _FROM_OPT_EINSUM:
        value = globals()[name] = getattr(importlib.import_module("opt_einsum"), name)
        return value
    if not name.startswith("__"):
        # Submodules as attributes (``einc.api``, ``einc.runtime``), as an eager
        # ``__init__`` provided them.
        try:
            return _load(f".{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    """The public names only (``__all__``)."""
    return sorted(__all__)

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


def __getattr__(name: str):
    if name in _API_NAMES or name in _OPT_EINSUM_NAMES:
        api = importlib.import_module(".api", __name__)
        oe = importlib.import_module(".opt_einsum_api", __name__)
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
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    """The public names only (``__all__``)."""
    return sorted(__all__)

"""einc: an einsum compiler for PyTorch.

Pipeline (one module per stage): ``equation`` (parse) -> ``graph`` -> ``plan``
(opt_einsum chooses the order) -> ``runtime`` (cache and torch executor).
"""

from .api import (ContractExpression, cache_clear, cache_info, contract_expression, einsum, explain,
                  set_cache_size)
from .errors import EincError
from .plan import Plan, Step

__version__ = "0.1.0"

__all__ = ["einsum", "explain", "contract_expression", "ContractExpression", "cache_info", "cache_clear",
           "set_cache_size", "EincError", "Plan", "Step", "__version__"]

"""Symbolic meta rules by op family; importing this package registers them all."""
from . import creation, indexing, linalg, nn, pointwise, reductions, views  # noqa: F401
from . import aten  # noqa: F401  (last: it reuses the rules above for direct ATen calls)
from .registry import RULES, get_rule, register

__all__ = ["RULES", "get_rule", "register"]

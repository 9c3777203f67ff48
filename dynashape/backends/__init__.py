"""Backends; importing this package registers them."""
from .eager import EagerBackend
from .fused import FusedBackend

__all__ = ["EagerBackend", "FusedBackend"]

"""Backends; importing this package registers them."""
from .eager import EagerBackend
from .fused import FusedBackend
from . import cudagraphs  # noqa: F401 - installs its entry wrapper

__all__ = ["EagerBackend", "FusedBackend"]

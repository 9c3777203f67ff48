"""backend="fused": shape-generic C++ kernels for pointwise and reduction regions.

Modules in pipeline order: `ops` (what is understood), `schedule` (regions), `lower` (graph
nodes to the loop IR of `loopir`), `cppgen` (C++; `cprint` prints index arithmetic),
`build` (compiler, disk cache, background thread), `backend` (tiering, rewrite; regions that autograd must record run as torch calls).
"""
from .backend import FusedBackend, Tiered, wait
from .build import counters

__all__ = ["FusedBackend", "Tiered", "counters", "wait"]

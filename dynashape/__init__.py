"""dynashape: a just-in-time compiler for PyTorch programs built around dynamic shapes.

    import dynashape as ds

    @ds.compile(dynamic=True)
    def f(x):
        return x * x.size(0)
"""
from . import backends as _backends  # noqa: F401  (registers the backends)
from .fleet import pgo
from .fleet.collectives import CompilerCollectiveError
from .runtime.annotations import mark_dynamic, mark_static, mark_unbacked, maybe_mark_dynamic
from .runtime.compile import CompiledFunction, reset
from .runtime.compiled_module import CompiledModule, compile
from .runtime.explain import explain
from .runtime.stance import set_stance
from .runtime.config import config
from .runtime.errors import RecompileError
from .symbolic.errors import ConstraintViolationError, DataDependentError
from .tracing.checks import bounds, check, check_is_size, constrain_range
from .tracing.errors import GraphBreakError
from .export import Dim, ExportedProgram, dims, export, load, save
from .logs import configure_from_env as _configure_logs, set_logs

_configure_logs()

__all__ = [
    "CompiledFunction", "CompiledModule", "ConstraintViolationError", "DataDependentError", "GraphBreakError",
    "RecompileError", "bounds", "check", "check_is_size", "compile", "constrain_range", "config", "explain", "mark_dynamic", "mark_static", "mark_unbacked",
    "maybe_mark_dynamic", "pgo", "reset", "set_logs", "set_stance",
]
__all__ += ["CompilerCollectiveError", "Dim", "ExportedProgram", "dims", "export", "load", "save"]

"""`dynashape.config`: knobs with PyTorch's defaults; `config.patch(**kw)` as context manager or decorator."""
from __future__ import annotations

import contextlib
import os

from ..symbolic import tracehook

_DEFAULTS: dict[str, tuple[type, object]] = {
    "automatic_dynamic_shapes": (bool, True),
    "assume_static_by_default": (bool, True),
    "specialize_int": (bool, False),
    "specialize_float": (bool, False),  # as torch.compile: a float argument that changes becomes a symbol
    "recompile_limit": (int, 8),
    "fail_on_recompile_limit_hit": (bool, False),
    "force_parameter_static_shapes": (bool, True),
    "force_nn_module_property_static_shapes": (bool, True),
    "allow_unspec_int_on_nn_module": (bool, False),
    "use_duck_shape": (bool, True),
    "specialize_zero_one": (bool, True),
    # a dynamic size traced as >= 2 (0/1 specialization) that arrives as 1 reuses the graph when nothing in
    # its trace depended on the difference (symbolic/widen.py); False: recompile, as torch.compile does
    "reuse_graph_for_size_one": (bool, True),
    "backed_size_oblivious": (bool, False),
    "capture_scalar_outputs": (bool, True),
    "capture_dynamic_output_shape_ops": (bool, True),
    # a branch on tensor data (`if t.any():`) is decided by the call's real values and guarded inside the
    # graph (a side exit traces the other path) instead of a graph break
    "speculate_data_branches": (bool, True),
    # fullgraph=True raises on a data branch, as torch.compile's does (a compiled function of one graph,
    # no trace tree); True: fullgraph entries speculate too (one compiled tree, never an eager fallback)
    "speculate_under_fullgraph": (bool, False),
    "speculation_paths": (int, 8),  # paths one entry's trace tree may grow; then calls on new paths run eagerly
    "dynamic_sources": (str, ""),
    "unbacked_sources": (str, ""),
    "job_id": (str, ""),
    "pgo": (bool, True),
    "pgo_dir": (str, ""),
    "pgo_remote": (str, ""),
    "pgo_remote_timeout": (float, 0.5),  # seconds: the most one Redis operation may take (then local only)
    "enable_compiler_collectives": (bool, False),
    "trace_dir": (str, ""),  # the structured compile trace (tlparse, `python -m dynashape report`)
    "backend": (str, "fused"),  # what ds.compile(backend=None) uses: "fused" (default) or "eager" (replay)
    "fused_sync": (bool, False),  # backend="fused": wait for the C++ compiler instead of running eagerly meanwhile
    "fused_cache_dir": (str, ""),  # compiled kernels; default <pgo_dir>/kernels
    # backend="fused" under autograd: a region runs its kernel as one autograd Function with a generated
    # backward; off, such a region runs its torch calls (eager's graph, gradients and speed). Read when
    # kernels build
    "fused_autograd": (bool, True),
    # backend="fused" on devices: "auto" runs each region on CUDA tensors as a Triton kernel when triton
    # imports; "off" runs torch's calls there; "cpu" sends CPU tensors to Triton too (with TRITON_INTERPRET=1:
    # how the suite runs every Triton kernel without a GPU). Read when kernels build
    "triton": (str, "auto"),
    # CUDA graphs of compiled entries on CUDA inputs: "off", "exact" (one graph per size), or "buckets"
    # (dynamic sizes rounded up to a bucket where padding provably changes no real row)
    "cudagraphs": (str, "off"),
    "cudagraph_pool_mb": (int, 1024),  # captured graphs' memory; least recently used buckets are freed past it
    # backend="fused": float32 matmuls (linear, addmm, mm, matmul by a matrix) by oneDNN's brgemm kernel through
    # ATen, forward and backward: "auto" where a one-time timing finds it faster than torch.mm here, "on", "off".
    # Read when kernels build
    "fused_gemm": (str, "auto"),
}
_ENV = {"dynamic_sources": "DYNASHAPE_DYNAMIC_SOURCES", "unbacked_sources": "DYNASHAPE_UNBACKED_SOURCES",
        "job_id": "DYNASHAPE_JOB_ID", "pgo_remote": "DYNASHAPE_PGO_REMOTE", "pgo_dir": "DYNASHAPE_CACHE_DIR",
        "pgo_remote_timeout": "DYNASHAPE_PGO_REMOTE_TIMEOUT",
        "trace_dir": "DYNASHAPE_TRACE", "fused_cache_dir": "DYNASHAPE_FUSED_CACHE_DIR",
        "backend": "DYNASHAPE_BACKEND", "fused_autograd": "DYNASHAPE_FUSED_AUTOGRAD",
        "triton": "DYNASHAPE_TRITON", "cudagraphs": "DYNASHAPE_CUDAGRAPHS", "fused_gemm": "DYNASHAPE_FUSED_GEMM"}
_CHOICES = {"triton": ("auto", "off", "cpu"), "cudagraphs": ("off", "exact", "buckets"),
            "fused_gemm": ("auto", "on", "off")}
_WATCH = {"trace_dir": tracehook.set_directory}  # knobs that low layers read as a flag
COLLECTIVES_ON = [False]  # enable_compiler_collectives, read on every compiled call


def _collectives(on: bool) -> None:
    COLLECTIVES_ON[0] = on


_WATCH["enable_compiler_collectives"] = _collectives


class Config:
    """Every knob is an attribute; unknown names and wrong types raise."""

    def __init__(self):
        object.__setattr__(self, "_values", {k: d for k, (_, d) in _DEFAULTS.items()})
        for k, env in _ENV.items():
            if os.environ.get(env):
                self._values[k] = _from_env(k, env)
        for k, fn in _WATCH.items():
            fn(self._values[k])

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(_unknown(name)) from None

    def __setattr__(self, name, value):
        if name not in _DEFAULTS:
            raise AttributeError(_unknown(name))
        typ = _DEFAULTS[name][0]
        if typ is float and type(value) is int:
            value = float(value)
        if typ is int and isinstance(value, bool) or not isinstance(value, typ):
            raise TypeError(f"config.{name} takes a {typ.__name__}, got {type(value).__name__} {value!r}")
        if name in _CHOICES and value not in _CHOICES[name]:
            raise ValueError(f"config.{name} takes one of {', '.join(map(repr, _CHOICES[name]))}, got {value!r}")
        self._values[name] = value
        if name in _WATCH:
            _WATCH[name](value)

    def knobs(self) -> dict:
        return dict(self._values)

    def patch(self, **changes):
        """Temporarily set knobs: `with config.patch(recompile_limit=2): ...` or as a decorator."""
        return _Patch(self, changes)


class _Patch(contextlib.ContextDecorator):
    def __init__(self, cfg, changes):
        for k in changes:
            if k not in _DEFAULTS:
                raise AttributeError(_unknown(k))
        self.cfg, self.changes, self.saved = cfg, changes, []

    def __enter__(self):
        self.saved.append({k: self.cfg._values[k] for k in self.changes})
        for k, v in self.changes.items():
            setattr(self.cfg, k, v)
        return self.cfg

    def __exit__(self, *exc):
        for k, v in self.saved.pop().items():
            setattr(self.cfg, k, v)
        return False


def _from_env(knob: str, env: str):
    typ, default = _DEFAULTS[knob]
    if typ is bool:  # bool("0") is True
        text = os.environ[env].strip().lower()
        if text in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return text in ("1", "true", "yes", "on")
    try:
        if typ is bool:
            raise ValueError(env)
        return typ(os.environ[env])
    except ValueError:
        import warnings
        warnings.warn(f"{env}={os.environ[env]!r} is not a {typ.__name__}; using the default {default!r}",
                      RuntimeWarning, stacklevel=3)
        return default


def _unknown(name):
    return f"dynashape.config has no knob {name!r}; valid knobs: {', '.join(sorted(_DEFAULTS))}"


config = Config()

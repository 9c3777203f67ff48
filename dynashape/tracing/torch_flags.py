"""torch's global settings and autograd modes a trace cannot carry into the compiled code.

Settings a traced function may change (`torch.set_float32_matmul_precision`,
`torch.autograd.set_detect_anomaly`, `torch.backends.cudnn.deterministic = True`,
`torch.set_printoptions`...): the compiled code would not change them again on later calls. Read
before and after each trace (tracing/global_state.py): one the trace changed is put back, and the
call runs eagerly, which makes the change as eager does. Forward-mode AD around the call and
torch.func's transforms inside it are graph breaks too.
"""
from __future__ import annotations

import sys
import warnings

import torch

from ..symbolic.userloc import user_location
from .errors import GraphBreak

_C = torch._C


def _pair(getter, setter):
    return (getter, setter) if getter is not None and setter is not None else None


def _flags() -> dict:
    # read through torch._C: `torch.is_anomaly_enabled` and the like are routed to the trace's readers while one
    # runs (tracing/global_state.py), and our own reads before and after it are not the user's
    out = {
        "torch.get_float32_matmul_precision()": _pair(getattr(_C, "_get_float32_matmul_precision", None),
                                                      torch.set_float32_matmul_precision),
        "torch.is_anomaly_enabled()": _pair(lambda: (_C.is_anomaly_enabled(), _C.is_anomaly_check_nan_enabled()),
                                            lambda v: _C.set_anomaly_enabled(*v)),
        "torch.is_warn_always_enabled()": _pair(getattr(_C, "_get_warnAlways", None), torch.set_warn_always),
        "torch.set_printoptions(...)": _pair(lambda: dict(vars(torch._tensor_str.PRINT_OPTS)),
                                             lambda v: vars(torch._tensor_str.PRINT_OPTS).update(v)),
    }
    for what, name in (("torch.backends.cudnn.enabled", "cudnn_enabled"),
                       ("torch.backends.cudnn.benchmark", "cudnn_benchmark"),
                       ("torch.backends.cudnn.deterministic", "cudnn_deterministic"),
                       ("torch.backends.cudnn.allow_tf32", "cudnn_allow_tf32"),
                       ("torch.backends.mkldnn.enabled", "mkldnn_enabled"),
                       ("torch.backends.cuda.matmul.allow_tf32", "cublas_allow_tf32"),
                       ("torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
                        "cublas_allow_fp16_reduced_precision_reduction"),
                       ("torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
                        "cublas_allow_bf16_reduced_precision_reduction")):
        setter = getattr(_C, f"_set_{name}", None)
        # torch 2.13's cuBLAS reduced-precision getters give (allowed, split-k allowed), their setters two arguments
        out[what] = _pair(getattr(_C, f"_get_{name}", None),
                          setter and (lambda v, setter=setter: setter(*v) if isinstance(v, tuple) else setter(v)))
    out[WARNINGS] = (warnings_state, _put_warnings_back)
    return {k: v for k, v in out.items() if v is not None}


WARNINGS = "warnings.filters"


def warnings_state() -> tuple:
    """The warnings module's filters and where a warning goes (`catch_warnings(record=True)` swaps the
    latter), compared by value: a warning the trace records is replayed under the caller's."""
    return (tuple(warnings.filters), warnings.filters, warnings.showwarning,
            getattr(warnings, "_showwarnmsg_impl", None), sys.stdout, sys.stderr)


def _put_warnings_back(v) -> None:
    entries, filters, warnings.showwarning, impl, sys.stdout, sys.stderr = v
    filters[:] = entries
    warnings.filters = filters
    if impl is not None:
        warnings._showwarnmsg_impl = impl
    warnings._filters_mutated()


FLAGS = _flags()


def now() -> dict:
    out = {}
    for name, (getter, _) in FLAGS.items():
        try:
            out[name] = getter()
        except Exception:  # noqa: BLE001 - a setting this build does not have
            pass
    return out


def changed(before: dict) -> list:
    after = now()
    return [name for name, v in before.items() if after.get(name) != v]


def put_back(before: dict) -> None:
    after = now()
    for name, v in before.items():
        if after.get(name) != v:
            FLAGS[name][1](v)


def refuse_forward_ad() -> None:
    """A trace inside `fwAD.dual_level()`: the compiled code would drop the tangents (guarded)."""
    if torch.autograd.forward_ad._current_level != -1:
        raise GraphBreak("a call inside forward-mode AD (fwAD.dual_level())", None,
                         "What to do: call the function without compiling it there.")


def refuse_transformed(t) -> None:
    """A tensor of vmap's, jvp's... met by the trace (a real tensor it would take for a constant)."""
    if _C._functorch.is_functorch_wrapped_tensor(t):
        raise GraphBreak("torch.func's transforms (vmap, jvp, jacfwd...) inside the compiled function",
                         user_location(), "What to do: compile the function the transform calls, or "
                         "apply the transform to the compiled function from outside.")

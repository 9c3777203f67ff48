"""Python's random numbers inside a compiled function, drawn when the compiled code runs.

`random.random()`, `random.uniform(a, b)`, `random.randint(a, b)`... and numpy.random's scalar
draws (`np.random.rand()`, `np.random.normal(0, 1)`) become calls in the graph: the generated
code calls the real function at that point of every call, so the values are the ones eager
would draw, in eager's order (the trace itself draws nothing, so the generator's state is not
advanced by compiling). In the graph the value is an unbacked symbol (`randint`'s with its
bounds), so it can scale tensors and feed ops as a run-time scalar:

    def f(x):
        return x * random.uniform(0.5, 1.5)     # zu0 = _draw_uniform(0.5, 1.5); mul = x.mul(zu0)

What Python itself decides from the value (a branch, a size, `int(...)`) is a graph break: a call
cannot be run again from its start once it has drawn (`visible_effects`), and the value is not
known before the call. Draws that return containers or change them (`choice`, `shuffle`,
`sample`, numpy's with `size=`) stay graph breaks. A reseed with a plain seed (`random.seed(0)`,
`np.random.seed(0)`) is a call in the graph too, run where eager runs it (not while tracing, so a
call that breaks later runs eagerly from the state it found).
"""
from __future__ import annotations

import functools
import inspect

import torch

from ..symbolic.userloc import user_location
from .errors import GraphBreak
from .symint import SymBase

_FLOATS = {"random", "uniform", "gauss", "normalvariate", "betavariate", "expovariate", "triangular",
           "lognormvariate", "vonmisesvariate", "gammavariate", "paretovariate", "weibullvariate"}
_INTS = {"randint", "randrange", "getrandbits", "binomialvariate"}
_NP_INTS = {"randint", "random_integers", "poisson", "binomial", "negative_binomial", "geometric",
            "hypergeometric", "logseries", "zipf"}
_NP_ARRAYS = {"choice", "multinomial", "dirichlet", "multivariate_normal", "permutation", "shuffle", "bytes"}
_NUMBER = (int, float)


def scalar_kind(owner: str, name: str, fn, args, kwargs):
    """float / int when `fn(*args, **kwargs)` draws one Python number we can replay, "seed" for a
    reseed, else None."""
    if name == "seed" and owner in ("random", "numpy.random"):
        return "seed"
    if owner == "random":
        return float if name in _FLOATS else int if name in _INTS else None
    if owner != "numpy.random" or name in _NP_ARRAYS:
        return None
    if name in ("rand", "randn", "ranf", "sample"):  # (*args): sizes, or nothing for one number
        return float if not args and not kwargs else None
    if not all(type(a) in _NUMBER for a in (*args, *kwargs.values())):
        return None  # an array-like parameter, a dtype: maybe an array
    sig = _signature(fn)
    if sig is None or "size" not in sig.parameters:
        return None
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return None  # eager raises: the call runs eagerly
    if bound.arguments.get("size") is not None or "dtype" in bound.arguments:
        return None
    return int if name in _NP_INTS else float


@functools.lru_cache(maxsize=256)
def _signature(fn):
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


class _Draw:
    """The graph's call of the real function (its value is eager's next draw)."""

    def __init__(self, fn, what: str):
        self.fn, self.what = fn, what
        self.__name__ = what.replace(".", "_")
        self._codegen_name = "_draw_" + what.rsplit(".", 1)[-1]

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"{self.what}"


def _bounds(name: str, args, kwargs):
    if name == "randint" and len(args) == 2 and all(type(a) is int for a in args):
        return args[0], args[1]
    if name == "randrange" and args and all(type(a) is int for a in args) and len(args) <= 2 and not kwargs:
        lo, hi = (0, args[0]) if len(args) == 1 else args
        return (lo, hi - 1) if hi > lo else (None, None)
    if name == "getrandbits" and len(args) == 1 and type(args[0]) is int:
        return 0, 2 ** args[0] - 1
    return None, None


def draw(tracer, owner: str, name: str, fn, args, kwargs, pytype):
    """The symbolic value of `owner.name(*args, **kwargs)`, drawn at run time (`pytype` "seed": a
    reseed, None); GraphBreak where the arguments are not plain values."""
    loc = user_location()
    plain = (int, float, bool, str, bytes, type(None))
    if any(isinstance(a, SymBase) or not isinstance(a, plain) for a in (*args, *kwargs.values())):
        raise GraphBreak(f"{owner}.{name}() with arguments computed in the trace (or not plain values)", loc,
                         "What to do: pass plain numbers, or draw it outside and pass the value in.")
    what = f"{owner}.{name}"
    if not tracer.visible_effects:  # a call cannot be re-run from its start once it has drawn
        tracer.visible_effects.append(f"{what}() draws a random number before it (at {loc})"
                                      if pytype != "seed" else f"{what}() reseeds before it (at {loc})")
    if pytype == "seed":  # no value: the graph reseeds where eager does
        tracer.graph.call(_Draw(fn, what), tuple(args), dict(kwargs), None, loc, torch.is_grad_enabled(),
                          name_hint=name)
        return None
    lo, hi = _bounds(name, args, kwargs) if pytype is int else (None, None)
    v = tracer.new_unbacked(size_like=False, lo=lo, hi=hi, description=f"{what}()", pytype=pytype)
    node = tracer.graph.call(_Draw(fn, what), tuple(args), dict(kwargs), tracer.to_ir(v), loc,
                             torch.is_grad_enabled(), name_hint=name)
    tracer.bind_unbacked(v, node, "value", None)
    return v

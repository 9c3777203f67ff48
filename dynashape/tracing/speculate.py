"""Speculation on data-dependent branches: the branch this call takes, guarded inside the graph.

The first call of a path has real inputs. At a condition on tensor data
(`if t.any():`, `if t.item() > 0:`, `while err > tol:`) the tracer computes the
condition for real (`RealValues` runs the graph recorded so far on the call's
inputs), records it as a *data guard* and continues down the branch taken.
When the compiled code runs, a data guard that does not hold raises `SideExit`:
nothing before it was visible outside (speculation refuses otherwise), so the
runtime may run the call again from its start and trace the new path.
"""
from __future__ import annotations

import math
import re

import torch

from ..symbolic.printer import pyexpr
from ..symbolic.userloc import evaluate

_RANDOM = ("rand", "randn", "randint", "randperm", "normal", "bernoulli", "dropout", "multinomial",
           "uniform_", "normal_", "exponential_", "geometric_", "cauchy_", "log_normal_", "random_",
           "poisson", "rrelu", "feature_alpha_dropout", "alpha_dropout")


_CONDITION = re.compile(r"^(?:if|elif|while|assert)\s+(.+?)\s*:?\s*(?:#.*)?$")


class SideExit(Exception):
    """A data guard did not hold: this call takes a path the compiled code has not seen."""

    def __init__(self, description: str, expected):
        super().__init__(description)
        self.description = description
        self.expected = expected

    def reason(self) -> str:
        """`x.sum() > 0 was False at model.py:12; the compiled path assumed True`."""
        return self.description.replace("{actual}", str(not self.expected) if isinstance(self.expected, bool)
                                        else "different").replace("{expected}", str(self.expected))


def data_guard(cond, expected, description: str):
    """A data guard in straight-line code: the condition must come out as when it was traced."""
    if bool(cond) is not expected:
        raise SideExit(description, expected)


data_guard._codegen_name = "ds_data_guard"


def describe_condition(location, fallback: str) -> str:
    """What the user wrote: `x.sum() > 0` from `if x.sum() > 0:  # note` (else `fallback`)."""
    m = _CONDITION.match(getattr(location, "code", "") or "")
    return m.group(1) if m else fallback


def guard_text(cond: str, location) -> str:
    """The side-exit reason with {actual}/{expected} left to fill in."""
    at = f" at {location.short()}" if location is not None else ""
    return f"{cond} was {{actual}}{at}; the compiled path assumed {{expected}}"


def random_op(target, args=(), kwargs=None) -> bool:
    """Does the call draw from the random generator (dropout only when training)?"""
    name = getattr(target, "__name__", "") or ""
    if not any(name == r or name == r + "_" or name.endswith("_" + r) for r in _RANDOM):
        return False
    if "dropout" in name:
        kwargs = kwargs or {}
        train = kwargs.get("train", kwargs.get("training", args[2] if len(args) > 2 else True))
        return train is not False
    return True


class RealValues:
    """The values of a graph's nodes on the call's real inputs, computed on demand in order.

    Runs with torch functions undisturbed by the trace (no TorchFunctionMode), without
    autograd. Nodes already decided (data guards) are skipped."""

    def __init__(self, graph, L):
        self.graph = graph
        self.L = L
        self.values: dict = {}
        self.symbols: dict = {}  # symbol name -> value
        self.pos = 0
        self._exprs: dict = {}

    def value(self, node):
        self._run_to_end()
        return self.values[node]

    def expr(self, expr, pytype=int):
        """A sympy expression over bound symbols (None when one is not bound yet)."""
        self._run_to_end()
        if any(str(s) not in self.symbols for s in expr.free_symbols):
            return None
        return self._eval(expr, pytype)

    def _eval(self, expr, pytype):
        """`expr` on the symbols bound so far; never runs nodes (a node's argument is evaluated in the
        middle of the run: running on from there would reach nodes that read the one not yet done)."""
        src = pyexpr(expr, str, integer=pytype is int) if pytype is int else pyexpr(expr, str)
        code = self._exprs.get(src)
        if code is None:
            code = self._exprs[src] = compile(src, "<dynashape-speculate>", "eval")
        return eval(code, {"math": math, "torch": torch}, self.symbols)

    # ------------------------------------------------------------------
    def _run_to_end(self) -> None:
        nodes = self.graph.nodes
        if self.pos >= len(nodes):
            return
        with torch._C.DisableTorchFunction(), torch.no_grad():
            while self.pos < len(nodes):
                n = nodes[self.pos]
                self.values[n] = self._one(n)
                self.pos += 1  # only once it has a value: a node that raised raises again, as eager would

    def _one(self, n):
        g = self.graph
        if n.kind == "input":
            if n.args:
                return n.args[0]
            return evaluate(n.target.code(), {**self.graph.namespace, "L": self.L})
        if n.kind == "const":
            return n.target
        if n.kind == "symbol":
            of, how, index = n.args
            v = self.values[of]
            if how == "size":
                r = v.size(index)
            elif how == "stride":
                r = v.stride(index)
            elif how == "affine":
                dim, a, b = index
                r = (v.size(dim) - b) // a
            elif how == "item":
                r = v.item()
            elif how == "index":
                r = v
                for i in index:
                    r = r[i]
            else:
                r = v
            self.symbols[str(n.target)] = r
            return r
        if n.kind == "call":
            if n.target is data_guard:
                return None

            def real(a):
                if isinstance(a, g.Node):
                    return self.values[a]
                unbound = sorted(str(s) for s in a.expr.free_symbols if str(s) not in self.symbols)
                if unbound:  # the graph reads a symbol before the node that binds it
                    raise RuntimeError(f"{n.name} reads {', '.join(unbound)} before it is bound")
                return self._eval(a.expr, a.pytype)
            args = g.map_args(n.args, real)
            kwargs = g.map_args(n.kwargs, real)
            return n.target(*args, **kwargs)
        return None

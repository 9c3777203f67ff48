"""Python code generation: a graph becomes a readable function over `L` (the arguments).

    def forward(L):
        x = L['x']
        s0 = x.size(0)
        cat = torch.cat([x, y])  # model.py:3 'z = torch.cat([x, y])'
        del x, y
        return cat.mul(2)

Each call carries a comment with the user's line; the source is registered
with `linecache` so tracebacks show it; values are freed after their last use.
"""
from __future__ import annotations

import builtins
import dis
import itertools
import linecache
import math
import sys
import types

import torch

from ..symbolic.printer import pyexpr
from ..tracing.names import target_name
from .graph import Graph, Node, SymExpr, _nodes_in, map_args, node_inputs
from .modes import exit_modes, switch_modes

_counter = itertools.count()
_SIMPLE = (int, float, bool, str, type(None))
_TENSOR_BASES = (torch.Tensor, torch._C.TensorBase)


_FUNCTIONAL = "torch.nn.functional."
_resolved: dict = {}  # torch callee -> the dotted name that finds it


class _Emitter:
    def __init__(self, g: Graph):
        self.g = g
        self.ns: dict = {"torch": torch, "math": math}
        # torch.nn.functional.linear is written F.linear, as users write it: two attribute reads fewer
        # per call (16 calls of an 8-layer MLP: 0.4 us)
        self.functional = "F." if all(n.name != "F" for n in g.nodes) else _FUNCTIONAL
        self._const_of: dict = {}  # id(value) -> its name in ns
        self._indexed = 0  # len(ns) when _const_of last took in the names of ns it did not write
        self.pinned: dict = {}  # a pinned parameter's input node -> the global name generate() gave it
        # a symbol's variable is its binding node's, whose name may differ from the symbol's: an
        # int argument named `s1` takes the name `s1`, and the node binding symbol s1 is `s1_1`
        self.sym_vars = {n.target: n.name for n in g.nodes if n.kind == "symbol"}

    def const(self, value, hint="c") -> str:
        name = self._const_of.get(id(value))
        if name is not None and self.ns.get(name) is value:
            return name
        if len(self.ns) != self._indexed:  # names added besides ours (G, C, a fused region's call): looked up
            for k, v in self.ns.items():
                if k.startswith("_"):
                    self._const_of.setdefault(id(v), k)
            self._indexed = len(self.ns)
            name = self._const_of.get(id(value))
            if name is not None and self.ns.get(name) is value:
                return name
        name = f"_{hint}{len(self.ns)}"
        self.ns[name] = value
        self._const_of[id(value)] = name
        self._indexed += 1
        return name

    def sym_name(self, sym) -> str:
        return self.sym_vars.get(sym, str(sym))

    def arg(self, a) -> str:
        if isinstance(a, Node):
            return self.pinned.get(a, a.name) if self.pinned else a.name
        if isinstance(a, SymExpr):
            return pyexpr(a.expr, self.sym_name, integer=a.pytype is int)
        if isinstance(a, tuple):
            inner = ", ".join(self.arg(x) for x in a)
            return f"({inner}{',' if len(a) == 1 else ''})"
        if isinstance(a, list):
            return "[" + ", ".join(self.arg(x) for x in a) + "]"
        if isinstance(a, dict):
            return "{" + ", ".join(f"{k!r}: {self.arg(v)}" for k, v in a.items()) + "}"
        if isinstance(a, slice):
            return f"slice({self.arg(a.start)}, {self.arg(a.stop)}, {self.arg(a.step)})"
        if a is Ellipsis:
            return "..."
        if type(a) is float and not math.isfinite(a):
            return f"float({str(a)!r})"
        if type(a) in _SIMPLE:  # exactly: a numpy scalar's repr (`np.float64(2.0)`) is no Python here
            return repr(a)
        if isinstance(a, torch.dtype):
            return str(a)
        if isinstance(a, torch.device):
            return f"torch.device({str(a)!r})"
        return self.const(a, "k")

    def index(self, a) -> str:
        """An index expression written as Python subscript syntax: `x[0:s0, None]`."""
        def one(i):
            if isinstance(i, slice):
                parts = ["" if p is None else self.arg(p) for p in (i.start, i.stop, i.step)]
                return f"{parts[0]}:{parts[1]}" + (f":{parts[2]}" if i.step is not None else "")
            return self.arg(i)
        if isinstance(a, tuple):
            return ", ".join(one(i) for i in a) + ("," if len(a) == 1 else "") if a else "()"
        return one(a)

    def callee(self, target) -> str:
        if hasattr(target, "_codegen_name"):
            return self.const(target, target._codegen_name)
        if getattr(builtins, getattr(target, "__name__", ""), None) is target:
            return target.__name__  # print, len, ...
        name = _dotted_name(target)
        if name is None:
            return self.const(target, "f")
        if name.startswith(_FUNCTIONAL) and self.functional == "F.":
            self.ns["F"] = torch.nn.functional
            return "F." + name[len(_FUNCTIONAL):]
        return name


def _dotted_name(target) -> str | None:
    """`torch.nn.functional.linear` when evaluating that name gives the target, else None."""
    try:
        return _resolved[target]
    except (KeyError, TypeError):
        pass
    name = target_name(target)
    try:
        obj = eval(name, {"torch": torch})
    except Exception:
        obj = None
    if obj is not target:
        return None  # not cached: it may be the user's (kept alive by nothing of ours)
    try:
        _resolved[target] = name
    except TypeError:  # unhashable: resolved again next time
        pass
    return name


def _method_name(target) -> str | None:
    """The name of a torch.Tensor method/property, or None."""
    objclass = getattr(target, "__objclass__", None)
    if objclass is not None and issubclass(objclass, _TENSOR_BASES):
        return target.__name__
    owner = getattr(target, "__self__", None)  # a property's __get__: method-wrapper bound to a getset
    if isinstance(owner, types.GetSetDescriptorType) and issubclass(owner.__objclass__, _TENSOR_BASES):
        return "@" + owner.__name__
    if isinstance(owner, property):
        for klass in (torch.Tensor,):
            for attr, v in vars(klass).items():
                if v is owner:
                    return "@" + attr
    qual = getattr(target, "__qualname__", "")
    if getattr(target, "__module__", None) == "torch._tensor" and qual.startswith("Tensor."):
        return qual.split(".", 1)[1]
    return None


def generate(g: Graph, name: str = "forward") -> tuple[str, dict]:
    """Python source of the graph as `def name(L)` and the namespace to exec it in."""
    em = _Emitter(g)
    em.ns.update(g.namespace)
    for n in g.nodes:  # parameters the guards pin: read as the function's globals, no local, no del
        if n.kind == "input" and n.args:
            var = n.name if n.name not in em.ns and not hasattr(builtins, n.name) else None
            if var is None:
                var = em.const(n.args[0], "p")
            else:
                em.ns[var] = n.args[0]
            em.pinned[n] = var
    used_symbols = g.free_symbols_used()
    last_use: dict[Node, int] = {}
    readers: dict[Node, int] = {}  # how many statements read each value (an unused symbol's too)
    for i, n in enumerate(g.nodes):
        read = set(node_inputs(n))
        for u in read:
            readers[u] = readers.get(u, 0) + 1
        if n.kind == "symbol" and n.target not in used_symbols:
            continue
        for u in read:
            last_use[u] = i
    outputs = set(_nodes_in(g.output_node.args)) if g.output_node else set()
    em.read_once = {u for u, k in readers.items() if k == 1 and u not in outputs}
    dies_at: dict[int, list] = {}  # node index -> the values last used there (linear, not a scan per node)
    for u, j in last_use.items():
        if u not in outputs and u not in em.pinned:
            dies_at.setdefault(j, []).append(u.name)
    lines = [f"def {name}(L):"]
    switches = ModeSwitches(g, em)
    body: list[str] = []
    for i, n in enumerate(g.nodes):
        if n.kind in ("input", "const", "symbol"):
            stmt = node_statement(em, n, used_symbols) if n not in em.pinned else None
            if stmt is None:
                continue
            body.append(stmt)
        elif n.kind == "call":
            body += switches.before(n)
            body.append(node_statement(em, n, used_symbols))
        elif n.kind == "output":
            body += switches.at_return()
            body.append(f"return {em.arg(n.args[0])}")
            continue
        dead = list(dies_at.get(i, ()))
        if n.kind != "output" and not n.users and n not in outputs and n.kind == "call":
            dead.append(n.name)
        if dead:
            body.append(f"del {', '.join(sorted(set(dead)))}")
    body = switches.wrap(body)
    lines += ["    " + b for b in body]
    return "\n".join(lines) + "\n", em.ns


_UNKNOWN = object()  # the grad mode after a mode switch (leaving inference mode restores its own)


def _inference(modes) -> bool:
    return modes is not None and modes[0]


class ModeSwitches:
    """The lines that put each call under the grad mode, inference mode and autocast it was traced
    under, starting from the modes the code is entered with (`Graph.entry_grad`/`entry_modes`, which
    the guards check), and the `try`/`finally` that gives the caller its own back."""

    def __init__(self, g: Graph, em: "_Emitter"):
        self.em = em
        self.grad = g.entry_grad  # None: assumed on (an exported program runs under the caller's mode)
        self.modes = g.entry_modes
        self.grad_switched = self.mode_switched = self.exit_switched = False
        # `torch.set_grad_enabled(False)` called as a function (not a block) outlives the call in eager
        self.exit_grad = getattr(g, "exit_grad", None) if g.entry_grad is not None else None
        self.entry_grad = g.entry_grad

    def at_return(self) -> list[str]:
        """Before the return: the grad mode eager leaves behind, when the function changed it for good."""
        if self.exit_grad is None or self.exit_grad == self.entry_grad:
            return []
        self.exit_switched = True
        return [f"_grad_exit = {self.exit_grad}"]

    def before(self, n: Node) -> list[str]:
        out = []
        if n.modes != self.modes:
            self.em.ns["_switch_modes"], self.em.ns["_exit_modes"] = switch_modes, exit_modes
            out.append(f"_modes = _switch_modes(_modes, {self.em.arg(n.modes)})")
            if _inference(n.modes) != _inference(self.modes):  # leaving it restores its own grad mode
                self.grad = _UNKNOWN
            self.modes, self.mode_switched = n.modes, True
        if n.grad_enabled is not self.grad and (self.grad is not None or not n.grad_enabled):
            out.append(f"torch._C._set_grad_enabled({n.grad_enabled})")
            self.grad_switched = True
        self.grad = n.grad_enabled
        return out

    def wrap(self, body: list[str]) -> list[str]:
        if not (self.grad_switched or self.mode_switched or self.exit_switched):
            return body
        head, tail = ["_grad0 = torch.is_grad_enabled()"], []
        if self.mode_switched:
            head.append("_modes = None")
            tail.append("    _exit_modes(_modes)")
        if self.exit_switched:  # on an error, the caller's mode (as a trace that fails restores it)
            head.append("_grad_exit = _grad0")
            tail.append("    torch._C._set_grad_enabled(_grad_exit)")
        else:
            tail.append("    torch._C._set_grad_enabled(_grad0)")
        return head + ["try:"] + ["    " + b for b in body] + ["finally:"] + tail


def node_statement(em: _Emitter, n: Node, used_symbols) -> str | None:
    """The statement computing one input, const, symbol or call node (None: an unused symbol)."""
    if n.kind == "input":
        if n.args:  # pinned by the guards (a parameter): no need to read the source again
            return f"{n.name} = {em.const(n.args[0], 'p')}  # {n.target.name()}"
        return f"{n.name} = {n.target.code()}"
    if n.kind == "const":
        return f"{n.name} = {em.const(n.target, 'c')}"
    if n.kind == "symbol":
        of, how, index = n.args
        if n.target not in used_symbols:
            return None  # bound only if some call or the output reads it
        of = em.arg(of)
        if how == "size":
            rhs = f"{of}.size({index})"
        elif how == "stride":
            rhs = f"{of}.stride({index})"
        elif how == "affine":  # a root symbol from a derived size: (size - b) // a
            dim, a, b = index
            rhs = f"({of}.size({dim}) - {b}) // {a}" if b else f"{of}.size({dim}) // {a}"
        elif how == "item":
            rhs = f"{of}.item()"
        elif how == "index":  # an element of a nested list (tolist)
            rhs = of + "".join(f"[{i}]" for i in index)
        else:
            rhs = of
        return f"{n.name} = {rhs}"
    stmt = _call(em, n)
    if n.location is not None:
        stmt += f"  # {n.location}"
    return stmt


_defaults_of: dict = {}  # a torch Python callee -> its keyword defaults that are None, True or False


def _default_flags(target) -> dict:
    """`F.relu`'s {'inplace': False}: keyword defaults a call may leave out (a Python function of torch's
    only; the keyword costs 40 ns a call and says nothing the function does not say)."""
    try:
        return _defaults_of[target]
    except (KeyError, TypeError):
        pass
    code = getattr(target, "__code__", None)
    if not (getattr(target, "__module__", None) or "").startswith("torch."):
        return {}  # torch's own functions only (not cached: the user's would be kept alive)
    kwd = getattr(target, "__kwdefaults__", None) or {}
    out = {}
    if code is not None and getattr(target, "__defaults__", None):
        names = code.co_varnames[:code.co_argcount][-len(target.__defaults__):]
        out = {k: v for k, v in zip(names, target.__defaults__) if v is None or type(v) is bool}
    out.update({k: v for k, v in kwd.items() if v is None or type(v) is bool})
    try:
        _defaults_of[target] = out
    except TypeError:
        pass
    return out


# an activation whose input is new memory that nothing else reads can overwrite it: no allocation
_IN_PLACE = {"relu": ("torch.relu_", False), "sigmoid": ("torch.sigmoid_", True), "tanh": ("torch.tanh_", True)}
_NEW_MEMORY = {"linear", "addmm", "mm", "bmm", "baddbmm", "matmul", "conv1d", "conv2d", "conv3d"}


def _in_place(em: _Emitter, n: Node) -> str | None:
    """`torch.relu_(linear)` for `relu(linear)` when, without autograd recording either call, the
    product's result is read by this call alone and not returned: eager's result, one tensor fewer."""
    if id(n.target) not in _ACTIVATION_IDS or n.grad_enabled or len(n.args) != 1 \
            or set(n.kwargs) - {"inplace"} or any(v is not False for v in n.kwargs.values()):
        return None
    op = _IN_PLACE[n.target.__name__]
    a = n.args[0]
    if not (isinstance(a, Node) and a.kind == "call" and not a.grad_enabled and a.modes == n.modes
            and a in getattr(em, "read_once", ()) and getattr(a.target, "__name__", None) in _NEW_MEMORY
            and target_name(a.target).startswith("torch.") and getattr(a.meta, "dtype", None) is not None
            and (a.meta.dtype.is_floating_point or not op[1])):
        return None
    return f"{n.name} = {op[0]}({em.arg(a)})"


_ACTIVATIONS = (torch.relu, torch.nn.functional.relu, torch.Tensor.relu, torch.sigmoid, torch.Tensor.sigmoid,
                torch.tanh, torch.Tensor.tanh)
_ACTIVATION_IDS = frozenset(map(id, _ACTIVATIONS))  # (module-level objects: alive, so their ids are theirs)


def _call(em: _Emitter, n: Node) -> str:
    fast = _in_place(em, n)
    if fast is not None:
        return fast
    args = [em.arg(a) for a in n.args]
    flags = _default_flags(n.target) if n.kwargs else {}
    kw = [f"{k}={em.arg(v)}" for k, v in n.kwargs.items() if not (k in flags and flags[k] is v)]
    m = _method_name(n.target)
    if m is not None and n.args and isinstance(n.args[0], Node):
        self_ = args[0]
        if m.startswith("@"):
            return f"{n.name} = {self_}.{m[1:]}"
        if m == "__getitem__" and not kw:
            return f"{n.name} = {self_}[{em.index(n.args[1])}]"
        if m == "__setitem__" and not kw:
            return f"{self_}[{em.index(n.args[1])}] = {args[2]}; {n.name} = None"
        return f"{n.name} = {self_}.{m}({', '.join(args[1:] + kw)})"
    return f"{n.name} = {em.callee(n.target)}({', '.join(args + kw)})"


_code_cache: dict = {}  # source text -> code object: a recompile that generates the same code reuses it


def exec_source(src: str, kind: str, ns: dict) -> None:
    """Compile `src` (once per distinct text), register it with linecache for tracebacks, exec in `ns`."""
    code = _code_cache.get(src)
    if code is None:
        filename = f"<dynashape-{kind}-{next(_counter)}>"
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        code = compile(src, filename, "exec")
        if len(_code_cache) > 1024:
            _code_cache.clear()
        _code_cache[src] = code
    check_names(code, ns, src)
    exec(code, ns)


class UndefinedNameError(NameError):
    """Generated code reads a name that neither it nor its namespace defines (a code generator bug,
    caught before the code runs)."""


_LOADS = frozenset(dis.opmap[o] for o in ("LOAD_GLOBAL", "LOAD_NAME"))
_STORES = frozenset(dis.opmap[o] for o in ("STORE_NAME", "STORE_GLOBAL"))
_EXTENDED_ARG = dis.opmap["EXTENDED_ARG"]
_LOAD_GLOBAL = dis.opmap["LOAD_GLOBAL"]
_free_names: dict = {}  # code object -> the global names it reads and does not store (weakly: codes are cached)


def _global_reads(code) -> frozenset:
    """Names the code (and the code nested in it) loads as globals and never stores. A scan of the raw
    bytecode: dis.get_instructions builds an object per instruction and cost 0.5 ms per compile."""
    got = _free_names.get(code)
    if got is not None:
        return got
    loads, stores = set(), set()
    todo = [code]
    while todo:
        c = todo.pop()
        raw, names, arg = c.co_code, c.co_names, 0
        for i in range(0, len(raw), 2):
            op = raw[i]
            arg = arg << 8 | raw[i + 1]
            if op == _EXTENDED_ARG:
                continue
            if op in _LOADS:
                loads.add(names[arg >> 1 if op == _LOAD_GLOBAL and _LOAD_GLOBAL_SHIFT else arg])
            elif op in _STORES:
                stores.add(names[arg])
            arg = 0
        todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    got = frozenset(loads - stores)
    if len(_free_names) > 1024:
        _free_names.clear()
    _free_names[code] = got
    return got


_LOAD_GLOBAL_SHIFT = sys.version_info >= (3, 11)  # 3.11 keeps a push-NULL flag in LOAD_GLOBAL's low bit


def check_names(code, ns: dict, src: str = "") -> None:
    """Every global name the code reads is defined by its namespace, by builtins, or by the code."""
    missing = sorted(n for n in _global_reads(code) if n not in ns and not hasattr(builtins, n))
    if missing:
        raise UndefinedNameError(f"generated code uses {', '.join(missing)}, which it does not define:\n{src}")


def compile_graph(g: Graph, name: str = "forward"):
    """Exec the generated source; the function keeps it as `.source`."""
    src, ns = generate(g, name)
    exec_source(src, "graph", ns)
    fn = ns[name]
    fn.source = src
    return fn


__all__ = ["UndefinedNameError", "check_names", "compile_graph", "exec_source", "generate", "map_args"]

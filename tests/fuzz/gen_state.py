"""Random programs over Python state, and random changes the caller makes to it between calls.

A program is a module: globals (an int `G`, a float `GF`, a bool `FLAG`, a counter `CNT`, a
tensor `GT`), a list `L`, a dict `D`, an object `obj` with attributes, an `nn.Module` `m` (a
parameter, a buffer, a float attribute, the training flag) and a closure cell `c`, then
`f(x, y, n)` made by `make()`, whose statements read and write all of them: branches on a flag or
on a dict's keys, loops over the list, appends, attribute and global rebinding, in-place updates
of state tensors. Between calls the caller changes the state (`Step.change`): a global's value or
type, a list's length, a dict's keys, an attribute deleted, the module put in eval mode, a state
tensor's dtype, size 1 or requires_grad. Every change decides something the compiled function
assumed at trace time: its guards must see it. Another module `h` is read by name too
(`getattr(h, 'SCALE')`, `vars(h)`, an attribute that comes and goes), and generators (a global,
an attribute) are drawn from: eager's draws, from the first call.

With `hidden=True` (the fuzz loop's programs) the module also holds state that is easy to miss
because it is not a plain global or a public attribute: `_`-named attributes of an object and of
an `nn.Module` (`obj._n += 1`, `self._kv.append(...)` in `pm`'s forward), a class's own attributes
(`type(co).count += 1`, a class-level list appended to through an instance), a `__slots__`
object's slots, mutable default arguments of `f` and of helpers (`def f(..., hist=[], memo={})`),
`functools.lru_cache` functions returning a tensor built from a size (`mask(x.shape[0])`) and
reading a global the caller changes (with or without `cache_clear()`), and weak containers
(`WeakValueDictionary`, `WeakSet`) given tensors made in the call, and a parameter's or buffer's own
attributes read in forward (`getattr(self.lin.weight, "flag", 0)`, set, changed and deleted by the
caller between calls). And what a call runs (CALL_* templates, the program's `target`): the harness
compiles `f`, or the module `net` whose forward calls `f` (`ds.compile(net)`, bound to `cnet` in the
compiled copy and `cnet = net` in the eager one), or two `functools.partial`s of one function, or
functions made in a loop (one code object, different defaults or closures); between calls the caller
sets `net.forward` (a bound method or a partial) and deletes it, swaps `net.__class__` or
`net.blk.__class__`, patches `Net.forward`, `Block.forward` or the helper `Block.act`, changes the
partials' `keywords` in place and the defaults the calls leave out (`LOOP[1].__defaults__ = (-0.0,)`),
replaces `f.__code__` (with `f_alt`'s, the same signature), and writes through the wrapper
(`cnet.scale = 2`, `cnet.eval()`, `net.mode = cnet.training`). Those templates are kept in
lists of their own (HIDDEN_*), as gen.py keeps HALF and CATCH: `generate_state(seed)` gives the
programs it gave before.

    >>> p = generate_state(1)
    >>> print(p.source())  # doctest: +SKIP
"""
from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field

B_SIZES = [1, 2, 3, 5]  # the state tensors' length (the inputs' last dim)
A_SIZES = [0, 1, 2, 2, 3, 4, 5, 7, 8]  # the inputs' first dim, per call

# expressions reading state, over a tensor `{v}` of shape (A, B)
READS = [
    "{v} * G", "{v} + GF", "{v} * c", "{v} + GT", "{v} * obj.k", "{v} + obj.t", "m({v})", "{v} * m.scale",
    "{v} + m.buf", "{v} * L[-1]", "{v} * len(L)", "{v} + D['a']", "{v} * D.get('z', 0.5)", "{v} * (CNT % 3 + 1)",
    "{v} * getattr(obj, 'k2', 2)", "{v} + getattr(obj, 'last', GT)", "{v} * GT.shape[0]",
    "{v} * (G if G > 2 else -G)", "{v} * (n + c)", "{v} + D.get('s', 0.0)", "{v} * float(m.training)",
    "{v} * len(D)", "{v} + sum(L)", "{v} * (1 if isinstance(obj.k, int) else 2)", "{v}.to(GT.dtype)",
    "{v} * (3 if GT.requires_grad else 2)", "{v} * m.w.requires_grad", "{v} + L[0] * c",
    "h.scaled({v})", "h.counted({v})", "box.apply({v})", "{v} * h.SCALE", "helper({v})", "{v} * counter()",
    "h.weighted({v})", "{v} * (2 if type(n) is int else 3)", "{v} * s.scale", "{v} + len(acc)",
    "{v} * (acc[-1] if acc else 1)", "{v} + s.t", "scaled_by({v})", "part({v})", "{v} * dq[0]",
    "{v} * next(cnt)", "{v} + len(dq)", "{v} * getattr(h, 'SCALE')", "{v} * vars(h)['SCALE']",
    "{v} * getattr(h, 'EXTRA', 1.5)", "{v} * next(obj.gen)", "{v} + next(gen)",
]
CONDITIONS = [
    "FLAG", "obj.on", "'b' in D", "len(L) > 3", "m.training", "c > 4", "isinstance(obj.k, float)", "G > 2",
    "CNT % 2 == 0", "hasattr(obj, 'last')", "GT.dtype == torch.float64", "n > c", "GT.shape[0] == 1",
    "type(L[-1]) is int", "D.get('b', 0) > 1", "isinstance(L[-1], torch.Tensor)",
    "type(n) is int", "type(G) is float", "type(x) is torch.Tensor", "type(m.w) is torch.nn.Parameter",
    "h.FAST", "type(obj.k) is bool", "s.on", "len(acc) > 2", "s.scale > 1", "hasattr(h, 'EXTRA')",
]
# statements writing state; `{v}` a tensor variable
WRITES = [
    "CNT += 1", "FLAG = not FLAG", "c += 1", "G = G + 1", "L.append(n)", "L.append({v}.sum())",
    "if len(L) > 3:\n    L.pop()", "L[0] = L[0] + 1", "D['s'] = {v}.sum()", "D.pop('s', None)", "D['n'] = n",
    "D['a'] = D['a'] + 1", "obj.last = {v}.mean(0)", "obj.k = obj.k + 1", "obj.on = not obj.on", "GT.add_(0.5)",
    "GT = GT * 0.5 + {v}.mean()", "obj.t = obj.t * 0.5 + {v}.mean(0)", "m.scale = m.scale + 1",
    "m.calls = getattr(m, 'calls', 0) + 1", "m.buf.add_(1)", "x.mul_(2)", "if hasattr(obj, 'last'):\n    del obj.last",
    "setattr(obj, 'k2', n)", "D['b'] = D.get('b', 0) + 1", "L.extend([n, c])",
    "h.SCALE = h.SCALE + 1", "h.CALLS = 0", "box.k = box.k * 2", "s.count = s.count + 1",
    "acc.append({v}.sum())", "acc.append(n)", "s.t = s.t * 0.5 + {v}.mean(0)", "s.on = not s.on",
    "if len(acc) > 3:\n    acc.pop(0)", "dq.rotate(1)", "dq.append(n)", "if len(dq) > 4:\n    dq.popleft()",
    "setattr(h, 'EXTRA', n)",
]
# what the caller changes between calls ({i} an int, {f} a float, {num} either, {b} a bool, {seed} a seed)
_GEN = "generator=torch.Generator().manual_seed({seed})"
CHANGES = [
    "G = {i}", "G = {f}", "GF = {f}", "FLAG = {b}", "FLAG = {i}", "set_c({i})", "set_c({f})", "CNT = {i}",
    "L.append({i})", "L.append({f})", "L.append(torch.tensor({f}))", "del L[1:]", "L.insert(0, {i})", "L[-1] = {num}",
    "D['a'] = {num}", "D.pop('b', None)", "D['b'] = {num}", "D['z'] = {num}", "D.pop('s', None)",
    "D['s'] = torch.tensor({f})", "obj.k = {num}", "obj.k = True", "obj.on = {b}",
    "obj.t = torch.randn(B, " + _GEN + ")", "obj.t = obj.t.double()", "obj.t = obj.t[:1].clone()",
    "obj.__dict__.pop('last', None)", "obj.k2 = {i}", "m.train()", "m.eval()", "m.scale = {num}",
    "m.buf.fill_({f})", "m.buf = torch.zeros(B)", "with torch.no_grad():\n    m.w.mul_(2)",
    "m.w.requires_grad_(False)", "m.w.requires_grad_(True)", "GT = GT.double()",
    "GT = torch.randn(B, " + _GEN + ")", "GT = GT[:1].clone()", "GT.requires_grad_(True)", "GT = GT.detach()",
    "GT.fill_({f})", "GT = GT.float()",
    "h.SCALE = {num}", "h.FAST = {b}", "box.k = {num}", "h.CALLS = {i}", "h.W = torch.randn(B, " + _GEN + ")",
    "h.W.mul_(2)", "reset({i})", "cfg.scale = {num}", "cfg.on = {b}", "acc.clear()", "acc.append({num})",
    "cfg.t = torch.randn(B, " + _GEN + ")", "cfg.count = {i}", "scaled_by.__defaults__ = ({num},)",
    "part.keywords['k'] = {num}", "dq.rotate(-1)", "dq.append({num})", "cnt = itertools.count({i})",
    "h.EXTRA = {num}", "vars(h).pop('EXTRA', None)", "obj.gen = numbers()", "next(gen)",
]
# hidden=True: state behind `_` names, classes, slots, defaults, caches and weak references (the
# module's second part, StateProgram.hidden_source)
HIDDEN_READS = [
    "{v} * obj._n", "{v} + len(obj._hist)", "pm({v})", "{v} * pm._scale", "{v} + pm._steps",
    "co({v})", "{v} * Counted.count", "{v} * co.scale", "{v} + len(co.hist)", "{v} * (co.hist[-1] if co.hist else 1)",
    "{v} * sl.n", "{v} + sl.t", "{v} * getattr(sl, 'extra', 2)", "{v} + len(sl.hist)",
    "{v} * len(hist)", "{v} + memo.get(n, 0.0)", "{v} * (hist[-1] if hist else 1)", "remember({v})", "tally({v})",
    "mask({v}.shape[0]) @ {v}", "{v} + ramp({v}.shape[-1])", "{v} * mask(n % 3 + 1).sum()", "{v} + ramp(B)",
    "{v} * len(WV)", "{v} + len(WS)", "{v} + (WV['y'].sum() if 'y' in WV else 0.0)",
    "fm({v})", "{v} * (2 if getattr(m.w, 'flag', 0) else 1)", "{v} + getattr(m.buf, 'meta', {{'k': [1]}})['k'][0]",
    "{v} * getattr(fm.lin.weight, 'flag', 0.5)",
]
HIDDEN_CONDITIONS = [
    "obj._n % 2 == 0", "pm._steps > 2", "len(pm._kv) > 1", "Counted.count > 2", "len(co.hist) > 2",
    "'scale' in vars(co)", "sl.n > 1", "hasattr(sl, 'extra')", "len(hist) > 2", "n in memo", "'y' in WV",
    "len(WS) > 1", "mask.cache_info().currsize > 1", "getattr(fm.lin.weight, 'flag', 0)", "hasattr(m.w, 'flag')",
]
HIDDEN_WRITES = [
    "obj._n += 1", "obj._hist.append({v}.sum())", "obj._hist.append(n)", "if len(obj._hist) > 3:\n    obj._hist.pop(0)",
    "pm._steps += 1", "pm._kv.append({v}.sum())", "pm._scale = pm._scale * 0.5",
    "type(co).count += 1", "co.hist.append({v}.shape[0])", "Counted.scale = Counted.scale + 0.5",
    "co.scale = co.scale * 2", "if len(co.hist) > 3:\n    co.hist.pop(0)",
    "sl.n += 1", "sl.hist.append({v}.shape[0])", "sl.t = sl.t * 0.5 + {v}.mean(0)", "sl.extra = n",
    "if hasattr(sl, 'extra'):\n    del sl.extra",
    "hist.append({v}.shape[0])", "hist.append(n)", "memo[n] = {v}.sum()", "memo.pop(n, None)",
    "if len(hist) > 3:\n    hist.pop(0)", "mask.cache_clear()", "MASK_K = MASK_K + 0.5",
    "WV['y'] = {v}", "WV['s'] = {v}.sum()", "WS.add({v})",
    "fm.lin.weight.seen = getattr(fm.lin.weight, 'seen', 0) + 1",
]
HIDDEN_CHANGES = [
    "obj._n = {num}", "obj._hist.clear()", "pm._scale = {num}", "pm._kv.clear()", "pm._steps = {i}", "pm.eval()",
    "Counted.count = {i}", "Counted.scale = {num}", "co.scale = {num}", "del co.scale", "co.hist.clear()",
    "Counted.hist = [{i}]", "sl.n = {num}", "sl.t = torch.randn(B, " + _GEN + ")", "sl.t = sl.t.double()",
    "sl.extra = {i}", "del sl.extra", "sl.hist.clear()", "f.__defaults__[0].clear()", "f.__defaults__[1].clear()",
    "f.__defaults__[0].append({i})", "f.__defaults__ = ([], {{}})", "remember.__defaults__[0].clear()",
    "tally.__kwdefaults__['k'][0] = {i}", "mask.cache_clear()", "MASK_K = {num}", "MASK_K = {num}\nmask.cache_clear()",
    "ramp.cache_clear()", "WV.clear()", "WS.clear()", "WV['y'] = GT", "WS.add(GT)",
    "fm.lin.weight.flag = {i}", "m.w.flag = {num}", "del fm.lin.weight.flag", "vars(m.w).pop('flag', None)",
    "fm.scale.meta = {{'k': [{i}]}}", "fm.scale.meta['k'][0] = {i}", "m.buf.meta = {{'k': [{num}]}}",
    "fm.lin.weight.flag = not getattr(fm.lin.weight, 'flag', 0)",
]
# hidden=True: what a call runs (the module's third part, StateProgram.calls_source): f's reads of the module
# `net` (its submodule `blk`, whose class and methods the caller changes), and the caller's changes to what
# the compiled target (StateProgram.target) calls: a module's forward and class, a user class's methods, a
# partial's keywords, defaults left out, a function's code, the compiled module's wrapper
CALL_READS = ["net.blk({v})", "{v} * net.scale", "{v} * net.blk.k", "net.blk.act({v})"]
CALL_CONDITIONS = ["net.training", "type(net.blk) is Block"]
CALL_CHANGES = [
    "net.forward = types.MethodType(forward_alt, net)", "net.forward = functools.partial(forward_alt, net)",
    "vars(net).pop('forward', None)", "net.__class__ = Net2", "net.__class__ = Net", "Net.forward = forward_alt",
    "Net.forward = NET_FORWARD", "Block.act = act_alt", "Block.act = BLOCK_ACT", "Block.forward = block_forward_alt",
    "Block.forward = BLOCK_FORWARD", "net.blk.__class__ = Block2", "net.blk.__class__ = Block",
    "P1.keywords['shift'] = {num}", "P2.keywords['shift'] = {num}", "P2.keywords.pop('shift', None)",
    "run_k.__defaults__ = ({num},)", "run_k.__defaults__ = (-0.0,)", "LOOP[0].__defaults__ = ({num},)",
    "LOOP[1].__defaults__ = ({i},)", "LOOP[1].__defaults__ = (-0.0,)", "f.__code__ = f_alt.__code__",
    "f.__code__ = F_CODE", "cnet.scale = {num}", "cnet.tag = {i}", "cnet.eval()", "cnet.train()", "net.eval()",
    "net.train()", "net.mode = cnet.training", "net.blk.k = {num}",
]
# what the harness compiles (StateProgram.target, a key of the module's CALLED), how often a hidden program
# draws it, and the changes it draws more often (a change is one of these with probability TARGET_BIAS)
TARGETS = {"f": 0.55, "net": 0.2, "parts": 0.12, "loop": 0.13}
_CODE = r"f\.__code__|Block\.|blk\.__class__"
TARGET_CHANGES = {"f": _CODE, "net": r"net|Net|Block|blk|f\.__code__", "parts": r"P1|P2|run_k|f\.__code__",
                  "loop": r"LOOP|f\.__code__"}  # regular expressions over CALL_CHANGES
TARGET_BIAS = 0.4
HIDDEN_RETURNS = ["obj._n", "Counted.count", "len(hist)", "sl.n", "len(WV)", "pm._steps"]
# what a call runs (the caller changes it between calls): a module whose forward calls f, its sibling
# class, a submodule with a helper method, two partials of one function, functions made in a loop
CALLS_SOURCE = """

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.k = 2.0

    def forward(self, v):
        return self.act(v) * self.k

    def act(self, v):
        return v.relu()


class Block2(Block):
    def forward(self, v):
        return self.act(v) - self.k


def act_alt(self, v):
    return v.tanh() + 1


def block_forward_alt(self, v):
    return self.act(v) + v * self.k


BLOCK_FORWARD, BLOCK_ACT = Block.forward, Block.act


class Net(torch.nn.Module):  # compiled as a module (target "net"): its forward calls f
    def __init__(self):
        super().__init__()
        self.blk = Block()
        self.scale = 1.5

    def forward(self, x, y, n, s, acc):
        return f(x, y, n, s, acc) + (self.blk(y) * self.scale * (2 if self.training else 1),)


class Net2(Net):
    def forward(self, x, y, n, s, acc):
        return (self.blk(x) - self.scale,) + f(x, y, n, s, acc)


def forward_alt(self, x, y, n, s, acc):
    return f(y, x, n, s, acc) + (self.scale, self.training)


NET_FORWARD = Net.forward
net = Net()
cnet = net  # the compiled copy's harness binds the compiled module here (target "net")


def run_k(k, x, y, n, s, acc, shift=0.0):  # compiled as two partials (target "parts")
    v = x * k + shift
    return f(v, y, n, s, acc) + (v, shift)


P1 = functools.partial(run_k, 2.0)
P2 = functools.partial(run_k, 3.0, shift=1.0)
LOOP = []  # one code object each, compiled one by one (target "loop")
for _k in (2, 3):
    def _looped(x, y, n, s, acc, k=_k):
        return f(x, y, n, s, acc) + (y * k, k)
    LOOP.append(_looped)


def _closing(k):
    def closed(x, y, n, s, acc):
        return f(x, y, n, s, acc) + (y + k, k)
    return closed


LOOP += [_closing(-0.0), _closing(1.5)]
"""
INTS = [-1, 0, 1, 2, 3, 5, 7]
FLOATS = [-0.0, 0.5, 1.5, 2.0, -3.0, math.inf, math.nan]


def lit(v) -> str:
    """Python source for a constant (nan and inf have no literal)."""
    if isinstance(v, float) and not math.isfinite(v):
        return f"float({str(v)!r})"
    return repr(v)


@dataclass
class Step:
    """One call: the change the caller makes first (source run in the module, or ""), then f(x, y, n)."""
    change: str
    a: int  # the inputs' first dim
    n: int
    seed: int  # the inputs' data


@dataclass
class StateProgram:
    seed: int  # the state tensors' data
    b: int
    start: dict  # initial values of G, GF, FLAG, c, L, D, obj.k, obj.on, m.scale
    body: list  # statements, each a list of lines
    ret: list  # expressions returned
    steps: list = field(default_factory=list)
    hidden: bool = False  # the HIDDEN_* state is in the module (hidden_source), f has mutable defaults
    target: str = "f"  # what the harness compiles and calls each step: a key of the module's CALLED (hidden only)

    def hidden_source(self) -> str:
        """The module's state behind `_` names, classes, slots, defaults, lru_cache and weak references."""
        return f"""

import weakref

# state easy to miss: `_`-named attributes, a class's own attributes, slots, mutable defaults,
# lru_cache functions and weak containers
obj._n = 0
obj._hist = []


class Steps(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self._steps = 0
        self._scale = {lit(self.start['scale'])}
        self._kv = []

    def forward(self, v):
        self._steps += 1
        self._kv.append(v.sum())
        if len(self._kv) > 3:
            self._kv.pop(0)
        return v * self._scale + self._steps + torch.stack(self._kv).mean()


pm = Steps()


class Counted:
    count = 0
    hist = []
    scale = 1.0

    def __call__(self, v):
        type(self).count += 1
        self.hist.append(v.shape[0])
        return v * self.scale + self.count


co = Counted()


class Slotted:
    __slots__ = ("n", "hist", "t", "extra")


sl = Slotted()
sl.n = 0
sl.hist = []
sl.t = torch.randn(B, generator=_g)


def remember(v, seen=[]):
    seen.append(v.shape[0])
    return v * len(seen)


def tally(v, *, k=[0]):
    k[0] += 1
    return v + k[0]


MASK_K = 1.0


@functools.lru_cache(maxsize=2)
def mask(n):
    return torch.tril(torch.ones(n, n)) * MASK_K


@functools.cache
def ramp(n):
    return torch.arange(float(n)) * MASK_K


WV = weakref.WeakValueDictionary()
WS = weakref.WeakSet()


class Flagged(torch.nn.Module):  # reads its parameter's and its buffer's own attributes
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(B, B, bias=False)
        with torch.no_grad():
            self.lin.weight.copy_(torch.randn(B, B, generator=_g))
        self.register_buffer("scale", torch.ones(B))

    def forward(self, v):
        k = 2 if getattr(self.lin.weight, "flag", 0) else 1
        return self.lin(v) * k * self.scale * getattr(self.scale, "meta", {{"k": [1]}})["k"][0]


fm = Flagged()
""" + CALLS_SOURCE

    def source(self) -> str:
        s = self.start
        head = f"""import collections
import functools
import itertools
import math
import types

import torch
import torch.nn.functional as F

_g = torch.Generator().manual_seed({self.seed})
B = {self.b}
G = {lit(s['G'])}
GF = {lit(s['GF'])}
FLAG = {lit(s['FLAG'])}
CNT = 0
L = [{', '.join(map(lit, s['L']))}]
D = {{{', '.join(f'{k!r}: {lit(v)}' for k, v in s['D'].items())}}}
GT = torch.randn(B, generator=_g)


class Obj:
    pass


def numbers():
    k = 0
    while True:
        k += 1
        yield float(k)


gen = numbers()
obj = Obj()
obj.gen = numbers()
obj.k = {lit(s['k'])}
obj.on = {lit(s['on'])}
obj.t = torch.randn(B, generator=_g)


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = {lit(s['scale'])}
        self.w = torch.nn.Parameter(torch.randn(B, generator=_g))
        self.register_buffer("buf", torch.randn(B, generator=_g))

    def forward(self, v):
        return v * self.w + self.buf * self.scale


m = M()

# another module: its globals are read and written by its functions
h = types.ModuleType("ds_state_helpers")
exec('''
import torch
SCALE = 2.0
CALLS = 0
FAST = True
W = torch.ones({self.b})


def scaled(v):
    return v * SCALE


def counted(v):
    global CALLS
    CALLS += 1
    return v * CALLS


def weighted(v):
    return v * W if FAST else v - W


class Box:
    def __init__(self):
        self.k = 2

    def apply(self, v):
        return v * self.k + SCALE
''', h.__dict__)
box = h.Box()
cfg = Obj()  # passed as f's argument s, with the list acc
cfg.scale = {lit(s['scale'])}
cfg.on = {lit(s['on'])}
cfg.count = 0
cfg.t = torch.randn(B, generator=_g)
acc = []


def helper(v):
    return v * GF + G


def scaled_by(v, k=2.0):
    return v * k


part = functools.partial(scaled_by, k=3.0)
dq = collections.deque([1, 2, 3])
cnt = itertools.count()


def counting():
    n = 0

    def counter():
        nonlocal n
        n += 1
        return n

    def reset(v):
        nonlocal n
        n = v
    return counter, reset


counter, reset = counting()
"""
        if self.hidden:
            head += self.hidden_source()
        params = "x, y, n, s, acc" + (", hist=[], memo={}" if self.hidden else "")
        head += f"""

def make():
    c = {lit(s['c'])}

    def f({params}):
        global G, GF, FLAG, CNT, GT{", MASK_K" if self.hidden else ""}
        nonlocal c
"""
        body = "".join(" " * 8 + ln + "\n" for st in self.body for ln in st)
        tail = f"""        return ({', '.join(self.ret)}{',' if len(self.ret) == 1 else ''})

    def set_c(v):
        nonlocal c
        c = v
"""
        if not self.hidden:
            return head + body + tail + "\n    return f, set_c\n\n\nf, set_c = make()\n"
        return head + body + tail + f"""
    def f_alt({params}):  # code of f's signature and closure: `f.__code__ = f_alt.__code__`
        return (x * c + y * G + GT, len(L))

    return f, set_c, f_alt


f, set_c, f_alt = make()
F_CODE = f.__code__
CALLED = {{"f": [f], "net": [net], "parts": [P1, P2], "loop": LOOP}}  # what the harness compiles, by target
"""


def _fill(rng: random.Random, template: str) -> str:
    num = rng.choice([lit(rng.choice(INTS)), lit(rng.choice(FLOATS))])
    return template.format(i=rng.choice(INTS), f=lit(rng.choice(FLOATS)), num=num, b=rng.random() < 0.5,
                           seed=rng.randrange(1000))


def _templates(hidden: bool, exclude: str | None) -> dict:
    """The template lists a program draws from: HIDDEN_* added when `hidden`, those matching the
    regular expression `exclude` left out (to look past a known bug)."""
    pools = {"reads": READS, "conditions": CONDITIONS, "writes": WRITES, "changes": CHANGES,
             "returns": ["len(L)", "CNT", "c", "G", "D.get('s')", "obj.k"]}
    if hidden:
        pools = {"reads": READS + HIDDEN_READS + CALL_READS,
                 "conditions": CONDITIONS + HIDDEN_CONDITIONS + CALL_CONDITIONS,
                 "writes": WRITES + HIDDEN_WRITES, "changes": CHANGES + HIDDEN_CHANGES + CALL_CHANGES,
                 "returns": pools["returns"] + HIDDEN_RETURNS}
    if exclude:
        pools = {k: [t for t in ts if not re.search(exclude, t)] for k, ts in pools.items()}
    return pools


def _statement(rng: random.Random, names: list, k: int, pools: dict | None = None) -> tuple:
    """(lines, new tensor name or None)."""
    pools = pools or _templates(False, None)
    reads = pools["reads"]
    v = rng.choice(names)
    out = f"t{k}"
    r = rng.random()
    if r < 0.45:
        return [f"{out} = " + rng.choice(reads).format(v=v)], out
    if r < 0.65:
        cond = rng.choice(pools["conditions"])
        a, b = rng.sample(reads, 2)
        return [f"if {cond}:", f"    {out} = " + a.format(v=v), "else:", f"    {out} = " + b.format(v=v)], out
    if r < 0.72:
        return [f"{out} = {v}", "for e in L:", f"    {out} = {out} + e"], out
    if r < 0.76:
        return [f"{out} = {v}", "for key, val in D.items():", f"    {out} = {out} + val"], out
    return rng.choice(pools["writes"]).format(v=v).split("\n"), None


def generate_state(seed: int, n_steps: int | None = None, hidden: bool = False,
                   exclude: str | None = None) -> StateProgram:
    """A random program; `hidden`: with the HIDDEN_* and CALL_* state and templates too (the fuzz loop's
    mix), compiled as its drawn `target`;
    `exclude`: a regular expression, templates matching it are not drawn."""
    rng = random.Random(seed)
    pools = _templates(hidden, exclude)
    start = {"G": rng.choice([1, 2, 3, 4]), "GF": rng.choice([0.5, 1.5, -2.0]), "FLAG": rng.random() < 0.5,
             "c": rng.choice([1, 3, 5]), "L": [rng.choice(INTS) for _ in range(rng.randint(1, 4))],
             "D": {"a": rng.choice([1.0, 2, -0.5]), "b": rng.choice([1, 2.5])}, "k": rng.choice([2, 0.5, 3]),
             "on": rng.random() < 0.5, "scale": rng.choice([1.5, 2, -1.0])}
    names, body = ["x", "y"], []
    for k in range(rng.randint(3, 10)):
        lines, out = _statement(rng, names, k, pools)
        body.append(lines)
        if out:
            names.append(out)
    tensors = [nm for nm in names if nm != "x" and nm != "y"] or ["x"]
    ret = rng.sample(tensors, min(len(tensors), rng.randint(1, 2)))
    ret += rng.sample(pools["returns"], rng.randint(0, 2))
    prog = StateProgram(rng.randrange(10 ** 6), rng.choice(B_SIZES), start, body, ret, hidden=hidden)
    if hidden:
        prog.target = rng.choices(list(TARGETS), weights=list(TARGETS.values()))[0]
    own = [t for t in pools["changes"] if t in CALL_CHANGES and re.search(TARGET_CHANGES[prog.target], t)]
    for i in range(n_steps or rng.randint(8, 16)):
        change = ""
        if i and rng.random() < 0.5:
            change = _fill(rng, rng.choice(own if own and rng.random() < TARGET_BIAS else pools["changes"]))
        prog.steps.append(Step(change, rng.choice(A_SIZES), rng.choice(INTS), rng.randrange(10 ** 6)))
    return prog

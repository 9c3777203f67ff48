"""Python functions whose answer must differ inside a trace, patched while one runs.

- `torch.compiler.is_compiling()` is True in the tracing thread, so libraries
  (transformers' mask construction) take the paths they take under a compiler;
  `torch.compiler.is_exporting()` is True while `ds.export` traces, as under
  torch.export.
- `isinstance(n, int)` is True for a symbolic int met in user or library code
  (as under torch.compile: the value *is* an int at run time, and any branch on
  its value adds a guard). dynashape's own code keeps the plain answer. `type(n)` in
  the user's code answers as at run time (`user_type`, put in their modules' globals
  for the trace by runtime/outer.py).
- calls whose value differs on every call (`random`, `numpy.random`, clocks, entropy) made by user
  code are replayed when the compiled code runs or are graph breaks (nondeterministic.py): their
  value would otherwise be baked into the graph as a constant. Not in an export's trace: there
  they are plain calls (constants), as under torch.export.
- `os.environ` reads are recorded; the compiled entry guards them.
- `torch.cond` takes the branch eager takes, decided as `if pred:` is (torch's own would run
  torch.compile inside the trace); in an export, a tensor predicate is an error that says so.
- `torch._check(cond, message)` and its kin (`_check_value`, `_check_index`...) on a
  data-dependent condition become runtime asserts that raise eager's error type with
  eager's message (the user's message when it can be computed while tracing).

Every patch answers differently only in the thread that traces, and is undone
when the outermost trace ends.
"""
from __future__ import annotations

import builtins
import contextlib
import os
import sys
import threading
import types

import torch

from ..symbolic.userloc import is_library_file, user_location
from . import nondeterministic
from .errors import GraphBreak
from .state import current_tracer
from .fake import FakeTensor
from .symint import SymBool, SymFloat, SymInt
from .tensor_attrs import TracedGradFn
from .tree import leaves

_lock = threading.Lock()
_threads: dict = {}  # thread id -> depth of traces running in it
_exporting: dict = {}  # thread id -> depth of export traces running in it
_env_reads: list = []  # one dict per running trace: os.environ key -> value read (None: absent)
_saved: list = []
_orig_isinstance = builtins.isinstance
_PYTYPE = {SymInt: int, SymFloat: float, SymBool: bool}
_OURS = ("dynashape", "logging", "threading", "random", "importlib", "linecache", "traceback", "warnings",
         "inspect", "dis", "sympy")


_LIBS = _OURS + ("torch", "os", "_collections_abc", "posixpath", "genericpath", "sysconfig", "site")


def _caller_is_ours(depth: int = 2) -> bool:
    name = sys._getframe(depth).f_globals.get("__name__", "") or ""
    return name.split(".", 1)[0] in _OURS


_PASSING = ("os", "collections", "_collections_abc")


def _caller_is_user(depth: int = 2, passing=_PASSING) -> bool:
    """Whether the nearest caller outside the modules `passing` the call on (os, collections) and our
    patches of random & co is the user's code (not torch's, not ours, not an import running). `depth`:
    the caller's frame."""
    f = sys._getframe(depth)
    first = None
    while f is not None:
        name = (f.f_globals.get("__name__", "") or "").split(".", 1)[0]
        if name == "importlib":
            return False  # a module being imported
        if first is None and name not in passing and f.f_code not in nondeterministic.WRAPPERS:
            first = name
            if first in _LIBS:
                return False
        f = f.f_back
    return first is not None


def user_call_in_trace(depth: int = 1) -> bool:
    """This thread traces (not for an export) and the frame `depth` above the function asking (1: its
    caller) is the user's code."""
    me = threading.get_ident()
    return me in _threads and me not in _exporting and _caller_is_user(depth + 2)


def _in_trace() -> bool:
    me = threading.get_ident()
    return me in _threads and me not in _exporting


def _isinstance(obj, cls):
    pytype = _PYTYPE.get(type(obj))
    if pytype is None:
        if type(obj) is FakeTensor and threading.get_ident() in _threads and not _caller_is_ours():
            # the tensor the user passed: `isinstance(p, nn.Parameter)` asks Parameter's metaclass, library
            # code to which the stand-in is a FakeTensor (not a Parameter)
            tr = current_tracer()
            real = tr._input_of.get(id(obj)) if tr is not None else None
            if real is not None:
                return _orig_isinstance(real[1], cls)
        return _orig_isinstance(obj, cls)
    if pytype is IteratorStandIn:
        return _orig_isinstance(obj._it, cls)
    if _orig_isinstance(obj, cls):
        return True
    if threading.get_ident() not in _threads or _caller_is_ours():
        return False
    try:
        return issubclass(pytype, cls)
    except TypeError:
        return False


_orig_type = type


class _TypeMeta(type):
    def __call__(cls, *args, **kwargs):
        if len(args) != 1 or kwargs:  # type(name, bases, namespace): a new class
            return _orig_type(*args, **kwargs)
        t = _orig_type(args[0])
        if t is IteratorStandIn:
            return _orig_type(args[0]._it)
        if t is WatchedModule:
            return types.ModuleType
        pytype = _PYTYPE.get(t)
        if pytype is not None:
            return pytype
        if _orig_isinstance(args[0], TracedGradFn):
            return args[0].eager_type()
        if t is FakeTensor:  # the type of the tensor it stands for (a Parameter, a subclass)
            tr = current_tracer()
            real = tr._input_of.get(id(args[0])) if tr is not None else None
            return _orig_type(real[1]) if real is not None else torch.Tensor
        return t

    def __instancecheck__(cls, obj):
        return _orig_isinstance(obj, _orig_type)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, _orig_type)


class user_type(metaclass=_TypeMeta):
    """`type` as the user's code sees it while a trace runs (runtime/outer.py puts it in the globals
    of their modules whose code calls `type`): a symbolic int's type is int and a traced tensor's is
    the type of the tensor it stands for, as when the compiled code runs (`type(n) is int` took the
    other branch). `isinstance(c, type)` and `type(name, bases, ns)` behave as the builtin's."""


class IteratorStandIn:
    """In the place of an iterator that cannot be copied (a generator held in an attribute) while a
    trace runs (runtime/pystate.py): drawing from it breaks the graph before anything is drawn, so
    the eager run that follows draws as eager would. `isinstance` and the user's `type` answer for
    the iterator it stands for."""

    def __init__(self, it, where: str):
        self._it, self._where = it, where

    def __iter__(self):
        return self

    def __next__(self):
        raise GraphBreak(f"the function draws from {self._where}, a {_orig_type(self._it).__name__} whose "
                         "position a compiled call cannot replay", user_location(),
                         "What to do: draw from it outside the compiled function and pass the value.")

    send = throw = lambda self, *a: self.__next__()  # noqa: E731

    def close(self):
        self.__next__()

    def __getattr__(self, name):  # gi_frame, gi_running, __length_hint__...
        return getattr(self._it, name)


_PYTYPE[IteratorStandIn] = IteratorStandIn


class WeakStandIn:
    """In the place of a weak container (WeakValueDictionary, WeakKeyDictionary, WeakSet) the trace can
    reach, while it runs (runtime/pystate.py): what it holds comes and goes with the caller's objects,
    which no guard follows and no replay can rebuild, so any use of it runs the call eagerly."""

    def __init__(self, obj, where: str):
        self._obj, self._where = obj, where

    def _refuse(self, *args, **kwargs):
        raise GraphBreak(f"the function uses {self._where}, a {_orig_type(self._obj).__name__} (what it holds comes "
                         "and goes with the caller's objects, which the compiled code cannot follow)", user_location(),
                         "What to do: use it outside the compiled function, or keep the values in a dict or list.")

    __len__ = __iter__ = __contains__ = __getitem__ = __setitem__ = __delitem__ = __bool__ = _refuse
    __eq__ = __ior__ = __isub__ = _refuse
    __hash__ = None

    def __getattr__(self, name):
        self._refuse()


_PYTYPE[WeakStandIn] = WeakStandIn


def user_setattr(obj, name, value):
    """`setattr` as the user's code calls it while a trace runs: the name is one the code stores
    (`outer.stores`): a store of the value already there leaves no difference to replay, so such a
    name is guarded instead (`setattr(h, "EXTRA", n)` with EXTRA already n, then removed by the caller)."""
    outer = getattr(watchers, "outer", None)
    if outer is not None and type(name) is str:
        outer.stores(name)
    return _orig_setattr(obj, name, value)


def user_delattr(obj, name):
    outer = getattr(watchers, "outer", None)
    if outer is not None and type(name) is str:
        outer.stores(name)
    return _orig_delattr(obj, name)


_orig_setattr, _orig_delattr = builtins.setattr, builtins.delattr
watchers = threading.local()  # .outer: what walks module attribute reads in this thread's trace
ABSENT = object()


class WatchedModule(types.ModuleType):
    """A user's module while a trace runs (runtime/outer.py swaps its class): each attribute read by
    name (`getattr(m, "SCALE")`, `sys.modules[name].SCALE`) is walked (`outer.attribute`) before the
    value is used. Dunder names are the module's machinery, except `__dict__`, through which the
    user's code can read any name (`outer.whole`). The user's `type(m)` is ModuleType."""

    def __getattribute__(self, name):
        outer = getattr(watchers, "outer", None)
        if outer is None or name[:2] == "__" and name != "__dict__":
            return types.ModuleType.__getattribute__(self, name)
        try:
            v = types.ModuleType.__getattribute__(self, name)
        except AttributeError:
            outer.attribute(self, name, ABSENT)
            raise
        if name == "__dict__":
            if not is_library_file(sys._getframe(1).f_code.co_filename):  # (inspect's, dataclasses': not reads)
                outer.whole(self)
        else:
            outer.attribute(self, name, v)
            v = outer.instead.get(id(v), v)  # what the trace uses in its place (an lru_cache function's stand-in)
        return v


def user_globals():
    """`globals()` as the user's code sees it while a trace runs: what is read through the dict
    (`globals()["SCALE"]`) bypasses the guards on the names the code loads, so the call runs eagerly."""
    raise GraphBreak("globals() inside a compiled function (what is read through the dict is not guarded)",
                     user_location(), "What to do: read the global by its name, or pass the value as an argument.")


def _compiling(orig):
    def is_compiling() -> bool:
        return threading.get_ident() in _threads or orig()
    is_compiling.__wrapped__ = orig
    is_compiling._dynashape = True
    return is_compiling


def _exporting_fn(orig):
    def is_exporting() -> bool:
        return threading.get_ident() in _exporting or orig()
    is_exporting.__wrapped__ = orig
    is_exporting._dynashape = True
    return is_exporting


_CHECK_DEFAULT = ("Expected cond to be True, but got False. (Could this error message be improved? If so, "
                  "please report an enhancement request to PyTorch.)")


def _holds_trace_value(v) -> bool:
    return any(isinstance(x, (SymInt, SymFloat, SymBool)) or getattr(x, "ds_node", None) is not None
               for x in leaves(v))


def _check_message(message):
    """What eager's failing check says: its default text, or the user's message when computing it
    now reads no trace value (one that formats a symbolic value is known only when the code runs)."""
    if message is None:
        return _CHECK_DEFAULT
    if not callable(message):
        return None
    try:
        cells = [c.cell_contents for c in (getattr(message, "__closure__", None) or ())]
        code = getattr(message, "__code__", None)
        glb = getattr(message, "__globals__", {})
        if code is None or _holds_trace_value(cells) or \
                _holds_trace_value([glb.get(n) for n in code.co_names]):
            return None
        return str(message())
    except Exception:
        return None


def _checking(orig):
    def _check_with(error_type, cond, message=None):
        if threading.get_ident() in _threads and isinstance(cond, SymBool) and \
                _orig_isinstance(error_type, type) and issubclass(error_type, Exception) and \
                not issubclass(error_type, Warning):
            node, tracer = cond.node, current_tracer()
            if tracer is not None and node.hint is None and node.env.hint(node.expr) is None:  # data-dependent
                tracer.runtime_assert(cond, _check_message(message), error=error_type, exact=True)
                return
        return orig(error_type, cond, message)
    _check_with.__wrapped__ = orig
    _check_with._dynashape = True
    return _check_with


def _cond(orig):
    """`torch.cond(pred, true_fn, false_fn, operands)` in a trace: the branch eager's call takes, decided
    as `if pred:` is (a guard on a symbolic bool; on a tensor, a data branch the compiled entry checks at
    run time). torch's own runs torch.compile on the spot, which cannot trace our values."""
    def cond(pred, true_fn, false_fn, operands=()):
        me = threading.get_ident()
        if me not in _threads:
            return orig(pred, true_fn, false_fn, operands)
        tracer = current_tracer()
        if me in _exporting and getattr(pred, "ds_node", None) is not None and getattr(tracer, "real", None) is None:
            raise GraphBreak("torch.cond on a tensor: export traces one graph, and dynashape's graphs hold one "
                             "branch (torch.export keeps both as a subgraph)", user_location(),
                             "What to do: export with record_branches=True (the example's branch, checked on "
                             "each call), or compute both sides and pick with torch.where.")
        ops = tuple(operands) if isinstance(operands, (tuple, list)) else (operands,)
        return (true_fn if pred else false_fn)(*ops)
    cond.__wrapped__ = orig
    cond._dynashape = True
    return cond


def _env_getitem(orig):
    def __getitem__(self, key):
        try:
            value = orig(self, key)
        except KeyError:
            if threading.get_ident() in _threads and _env_reads and _caller_is_user():
                    _env_reads[-1].setdefault(key, None)
            raise
        if threading.get_ident() in _threads and _env_reads and _caller_is_user():
            _env_reads[-1].setdefault(key, value)
        return value
    __getitem__._dynashape = True
    return __getitem__


def _patches():
    out = [(torch.compiler, "is_compiling", _compiling(torch.compiler.is_compiling)),
           (torch.compiler, "is_exporting", _exporting_fn(torch.compiler.is_exporting)),
           (torch, "_check_with", _checking(torch._check_with)),
           (builtins, "isinstance", _isinstance),
           (torch, "cond", _cond(torch.cond)),
           (os._Environ, "__getitem__", _env_getitem(os._Environ.__getitem__))]
    return out + nondeterministic.patches(_in_trace, _caller_is_user)


_made: list = []  # [numpy or None, (owner, name, original, patch), ...]: the last _patches() and what they wrap


def _current_patches() -> list:
    """`_patches()`, made again only when an original changed (a user's monkeypatch, numpy imported)."""
    np = sys.modules.get("numpy")
    if _made and _made[0] is np and all(owner.__dict__.get(name, _MISSING) is orig
                                        for owner, name, orig, _ in _made[1:]):
        return [(owner, name, fn) for owner, name, _, fn in _made[1:]]
    fresh = _patches()
    _made[:] = [np] + [(owner, name, owner.__dict__.get(name, _MISSING), fn) for owner, name, fn in fresh]
    return fresh


_MISSING = object()


def _caller_saved_tensors_hooks() -> list:
    """The caller's `saved_tensors_hooks` (activation offloading around the call), taken off while the
    trace runs: its meta ops would pack FakeTensors through them. The compiled code runs under them."""
    out = []
    top = torch._C._autograd._top_saved_tensors_default_hooks
    while (hooks := top(True)) is not None:
        out.append(hooks)
        torch._C._autograd._pop_saved_tensors_default_hooks()
    return out


@contextlib.contextmanager
def trace_environment(export: bool = False):
    """Install the patches (once, for the outermost trace of any thread); yields the dict of
    os.environ reads of this trace. `export`: an export's trace (is_exporting() is True,
    Python's random and time calls are plain calls)."""
    me = threading.get_ident()
    reads: dict = {}
    with _lock:
        if not _threads:
            for owner, name, fn in _current_patches():  # (absent: an inherited method, deleted after)
                _saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
                setattr(owner, name, fn)
        _threads[me] = _threads.get(me, 0) + 1
        if export:
            _exporting[me] = _exporting.get(me, 0) + 1
        _env_reads.append(reads)
    hooks = _caller_saved_tensors_hooks()
    try:
        yield reads
    finally:
        for pack, unpack in reversed(hooks):
            torch._C._autograd._push_saved_tensors_default_hooks(pack, unpack)
        with _lock:
            del _env_reads[next(i for i, r in enumerate(_env_reads) if r is reads)]
            _threads[me] -= 1
            if not _threads[me]:
                del _threads[me]
            if export:
                _exporting[me] -= 1
                if not _exporting[me]:
                    del _exporting[me]
            if not _threads:
                for owner, name, fn in reversed(_saved):
                    if fn is _MISSING:
                        delattr(owner, name)
                    else:
                        setattr(owner, name, fn)
                _saved.clear()

"""Guards of one compiled entry: one generated Python predicate over the arguments `L`.

It checks, in order of cost: each tensor input's type, dtype, device,
requires_grad, rank and static sizes; the constants the trace specialized on;
the shape guards of the ShapeEnv (over sizes bound to locals once); grad mode
and module flags. No sympy runs at call time.

`entry.guards` lists the same checks in PyTorch's notation, and `explain(L)`
says in words which one failed.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import operator
from dataclasses import dataclass, field

import torch

from ..ir.codegen import exec_source
from ..symbolic.guard_output import ShapeGuard, explain_failure, produce_guard_spellings
from ..symbolic.printer import pyexpr
from ..symbolic.sources import SizeSource, Source
from ..tracing.inputs import TensorInput, ValueInput
from ..tracing.meta.common import canonical_strides
from ..tracing.meta_cache import autocast_state
from . import module_epoch, native

_DTYPE = lambda d: str(d).replace("torch.", "")  # noqa: E731


@dataclass
class GuardSet:
    fn: object  # fn(L) -> bool
    source: str  # its generated code
    readable: list  # `guards`, each a str or a function that writes it (when first asked)
    tensors: list[TensorInput]
    values: list[ValueInput]
    shape_guards: list[ShapeGuard]
    ns: dict = field(default_factory=dict)
    extra: list = field(default_factory=list)  # (code over L/G/C, readable text)
    state_guard: object = None  # the Python-state checks (None when they hold), see runtime/pystate.py
    shape_at: tuple | None = None  # (lines, index of the shape line, spell, index in guards): with_env

    @property
    def guards(self) -> list[str]:
        """The checks in PyTorch's notation, human-readable."""
        out = self.__dict__.get("_guards")
        if out is None:
            out = self.__dict__["_guards"] = [x() if callable(x) else x for x in self.readable]
        return out

    def with_env(self, env) -> "GuardSet | None":
        """The same checks with the shape guards of `env` (symbolic/widen.py's wider ranges), or None."""
        if self.shape_at is None:
            return None
        lines, at, spell, first = self.shape_at
        shape_guards, fast = produce_guard_spellings(env, None, spell)
        lines = list(lines)
        lines[at] = "if not (" + " and ".join(f"({g.code})" for g in fast) + "): return False" if fast else "pass"
        readable = list(self.readable)  # (the texts not written yet stay so)
        readable[first:first + len(self.shape_guards)] = [g.code for g in shape_guards]
        ns, src = {k: v for k, v in self.ns.items() if k != "guard"}, _source(lines)
        exec_source(src, "guards", ns)
        native.adopt(ns)  # (a stand-in copied from self.ns is replaced here too when the extension loads)
        return dataclasses.replace(self, fn=ns["guard"], source=src, readable=readable,
                                   shape_guards=shape_guards, ns=ns, shape_at=(lines, at, spell, first))

    def __call__(self, L) -> bool:
        return self.fn(L)

    def explain(self, L) -> list[str]:
        """Plain-words reasons why these guards reject `L` (empty when they accept it)."""
        ns = dict(self.ns, L=L)
        if self.state_guard is not None:
            failed = self.state_guard(L)
            if failed is not None:
                if failed < 0:
                    return ["the Python state the trace read could not be read again"]
                text = self.state_guard.texts[failed]
                return [text(L) if callable(text) else f"{text} failed"]
        for t in self.tensors:
            why = _explain_tensor(t, ns)
            if why:
                return [why]
        for v in self.values:
            why = _explain_value(v, ns)
            if why:
                return [why]
        why = explain_failure(self.shape_guards, L, ns.get("G"), ns.get("C"))
        if why:
            return [why]
        for code, text, actual in self.extra:
            try:
                ok = eval(code, ns)
            except Exception:
                ok = False
            if not ok:
                try:
                    now = f" ({actual[0]} = {eval(actual[1], ns)!r})" if actual else ""
                except Exception:
                    now = ""
                return [f"{text} failed{now}"]
        return []


def build_guards(tracer, env, *, globals_=None, closure=None, modules=(), grad_enabled=True,
                 symbolic_attributes=frozenset(), state_guard=None) -> GuardSet:
    """`symbolic_attributes`: (id(module), name) of int attributes traced as SymInts (their
    ValueInputs check the type; the module-state check leaves their value free).
    `state_guard`: the Python-state checks (runtime/pystate.py): its lines are inlined here, those
    over module dicts with the module checks below, and it explains a miss."""
    ns = {"torch": torch, "math": math, "G": globals_ if globals_ is not None else {}, "C": closure or ()}
    local_of: dict[Source, str] = {}
    shape_of: dict[Source, str] = {}
    # first: a TorchFunctionMode of the caller's sees, and may change, every torch call, the guard's
    # reads of a tensor's attributes too; the call runs eagerly (runtime/compile.py)
    ns["_tf_mode"] = torch._C._is_torch_function_mode_enabled
    lines: list[str] = ["if _tf_mode(): return False"]
    readable: list[str] = []
    if state_guard is not None:
        for k, v in state_guard.ns.items():
            if ns.setdefault(k, v) is not v:
                raise AssertionError(f"the state guard's name {k} is taken")
        lines += state_guard.lines

    def const(v, hint="k"):
        name = f"_{hint}{len(ns)}"
        ns[name] = v
        return name

    member_checks: list[str] = []
    pinned: list = []  # (parameter, (requires_grad, shape, dtype, device)): checked together, in C, on every call
    for i, t in enumerate(tracer.tensor_inputs):
        v = f"t{i}"
        local_of[t.source] = v
        shape_of[t.source] = f"{v}s"
        tt = const(t.tensor_type, "type")
        if t.example is None:
            lines.append(f"{v} = {t.source.code()}")
        device = f"{v}.is_cpu" if t.device.type == "cpu" else f"{v}.device == {const(t.device, 'dev')}"  # no device made
        full = (f"{v}.__class__ is {tt} and {v}.dtype is {const(t.dtype, 'dt')} "
                f"and {v}.requires_grad is {t.requires_grad} and {device}")
        if t.example is not None and None not in t.sizes:
            # a parameter/buffer read as a constant by the graph: it must be the same object (checked
            # with the module state, when a module's dict changed), with the same requires_grad, shape,
            # dtype and device (these change in place: `p.requires_grad_()`, `p.data = p.data.double()`,
            # torch.utils.swap_tensors, so they are checked on every call)
            pv = const(t.example, "p")
            member_checks.append(f"if {t.source.code()} is not {pv}: return False")
            pinned.append((t.example, (t.requires_grad, torch.Size(t.sizes), t.dtype, t.device)))
            readable.append(functools.partial(_tensor_text, t, False, param=True))
            continue
        lines.append(f"if not ({full}): return False")
        lines.append(f"{v}s = {v}.shape")
        checks = [f"len({v}s) != {len(t.sizes)}"] + [f"{v}s[{d}] != {s}" for d, s in enumerate(t.sizes)
                                                     if s is not None]
        lines.append(f"if {' or '.join(checks)}: return False")
        if tracer.strides_observed:
            if t.contiguous and t.strides == canonical_strides(t.example_shape):
                # exactly the strides torch.empty(shape) has (is_contiguous() ignores the strides of
                # size-1 dims and of empty tensors, which the trace may have read)
                ns["_canonical_strides"] = canonical_strides
                lines.append(f"if {v}.stride() != _canonical_strides({v}s): return False")
            else:
                lines.append(f"if {v}.stride() != {t.strides!r}: return False")
        if tracer.offsets_observed:
            lines.append(f"if {v}.storage_offset() != {t.storage_offset}: return False")
        readable.append(functools.partial(_tensor_text, t, tracer.strides_observed, tracer.offsets_observed))

    alias_extra = _aliasing_guards(tracer, local_of, lines, readable, ns)
    alias_extra += _input_fact_guards(tracer, lines, readable, const)
    if pinned:
        tensors = ns["_pinned"] = tuple(p for p, _ in pinned)
        given = [st for _, st in pinned]
        names = ("requires_grad", "shape", "dtype", "is_cpu", "device")
        getters = tuple(getattr(torch._C.TensorBase, k) for k in names)
        direct = all(getattr(tp, k, None) is g for tp in {type(p) for p in tensors}  # (once per class)
                     for k, g in zip(names, getters))
        # in Python (on the CPU: is_cpu, which makes no device object) where the guard extension
        # cannot be loaded, and while it loads (a stand-in, replaced in ns when it is loaded)
        cpu = all(dev.type == "cpu" for *_, dev in given)
        rg_shape = ns["_rg_shape"] = operator.attrgetter(*names[:3], "is_cpu" if cpu else "device")
        state = ns["_pinned_state"] = [(rg, shape, dt, True if cpu else dev) for rg, shape, dt, dev in given]
        same = native.same(tensors, [(rg, tuple(shape), dt, True if dev.type == "cpu" else dev)
                                     for rg, shape, dt, dev in given],
                           getters if direct else None,  # else a subclass redefines one: looked up
                           ns=ns, key="_pinned_same", fallback=lambda: list(map(rg_shape, tensors)) == state)
        if same is not None:  # the same getters, called in C: 1.8 us for 16 parameters, 3.6 us in Python
            lines.append("if not _pinned_same(): return False")
        else:
            lines.append("if list(map(_rg_shape, _pinned)) != _pinned_state: return False")
    for v in tracer.value_inputs:
        code, text = _value_check(v, const)
        if code:
            lines.append(f"if not ({code}): return False")
            readable.append(text)

    def spell(src: Source) -> str:
        if isinstance(src, SizeSource) and src.base in shape_of:
            return f"{shape_of[src.base]}[{src.dim}]"
        return src.name()

    shape_guards, fast = produce_guard_spellings(env, None, spell)
    for src, expr in tracer.derived_sizes:  # sizes declared as expressions of other symbols
        name_of = {sym: ss for sym in expr.free_symbols for ss in env.sources_of(sym)[:1]}
        if all(sym in name_of for sym in expr.free_symbols):
            shape_guards.append(ShapeGuard(f"{src.name()} == {pyexpr(env.substitute(expr), lambda s: name_of[s].name())}",
                                           [src] + list(name_of.values())))
            fast.append(ShapeGuard(f"{spell(src)} == {pyexpr(env.substitute(expr), lambda s: spell(name_of[s]))}"))
    shape_at = None if tracer.derived_sizes else (len(lines), len(readable))
    lines.append("if not (" + " and ".join(f"({g.code})" for g in fast) + "): return False" if fast else "pass")
    readable += [g.code for g in shape_guards]

    extra = alias_extra
    lines.append(f"if torch.is_grad_enabled() is not {grad_enabled}: return False")
    lines.append("if _fwad._current_level != -1: return False")  # (forward-mode AD: traced outside it)
    ns["_fwad"] = torch.autograd.forward_ad
    inference = torch.is_inference_mode_enabled()
    if not grad_enabled:  # inference mode turns grad off: with grad on, the line above rules it out
        lines.append(f"if torch.is_inference_mode_enabled() is not {inference}: return False")
        extra.append((f"torch.is_inference_mode_enabled() is {inference}",
                      f"inference mode is {'on' if inference else 'off'}", None))
        readable.append(f"torch.is_inference_mode_enabled() == {inference}")
    # the default dtype decides factories' and Python scalars' dtypes, read or not
    flags = {"torch.get_default_dtype()": (torch.get_default_dtype, torch.get_default_dtype())}
    flags.update(tracer.flag_reads)
    for text, (getter, value) in flags.items():
        g, v = const(getter, "flag"), const(value, "v")
        if not (text == "torch.is_inference_mode_enabled()" and not grad_enabled and value == inference):
            lines.append(f"if {g}() != {v}: return False")  # (else checked above already)
        readable.append(f"{text} == {value!r}")
        extra.append((f"{g}() == {v}", f"{text} == {value!r}", (text, f"{g}()")))
    ns["_autocast_state"], ns["_autocast0"] = autocast_state, autocast_state()
    ns["_any_autocast"] = torch._C._is_any_autocast_enabled
    if any(on for on, _ in ns["_autocast0"]):
        lines.append("if _autocast_state() != _autocast0: return False")
    else:  # the common case: one cheap C call
        lines.append("if _any_autocast(): return False")
    extra.append(("_autocast_state() == _autocast0", f"autocast state == {ns['_autocast0']}", None))
    extra.append(("not _tf_mode()", "no TorchFunctionMode is active", None))
    extra.append((f"torch.is_grad_enabled() is {grad_enabled}", f"grad mode is {'on' if grad_enabled else 'off'}",
                  None))
    readable.append(f"torch.is_grad_enabled() == {grad_enabled}")
    lines += _module_guards(modules, member_checks, state_guard, symbolic_attributes, const, ns, extra, readable)
    lines.append("return True")

    src = _source(lines)
    exec_source(src, "guards", ns)
    if state_guard is not None:
        readable += state_guard.listed
    return GuardSet(ns["guard"], src, readable, list(tracer.tensor_inputs), list(tracer.value_inputs),
                    shape_guards, ns, extra, state_guard,
                    None if shape_at is None else (lines, shape_at[0], spell, shape_at[1]))


def _source(lines: list[str]) -> str:
    # a guard that cannot be evaluated (a size it divides by is 0, a source that is gone) fails
    return ("def guard(L):\n    try:\n" + "".join(f"        {ln}\n" for ln in lines)
            + "    except Exception:\n        return False\n")


def _module_guards(modules, member_checks, state_guard, symbolic_attributes, const, ns, extra, readable):
    """The checks of module state, run when a dict it lives in was written since they last passed
    (guards/native.py; without the extension, on every call): the state guard's module checks,
    the pinned parameters' identity, the `training` flags and plain attributes of modules the state
    guard did not walk, and the hooks. Returns the guard's lines."""
    walked = list(state_guard.modules) if state_guard is not None else []
    gated = list(state_guard.module_lines) if state_guard is not None else []
    seen = {id(m) for m in walked}
    if not all(id(m) in seen for _, m in modules):
        # else implied: a pinned parameter's path runs from a root checked on every call through the
        # walked modules' dicts, whose keys and members the state guard checks by identity
        gated += member_checks
    for src, m in modules:
        if id(m) in seen:  # checked, listed and explained by the state guard (its "module attributes")
            continue
        mv = const(m, "m")
        attrs = [(a, val) for a, val in _module_state(m) if (id(m), a) not in symbolic_attributes]
        conds = [f"{mv}.training is {m.training}"] + [f"{mv}.{a} == {const(val, 'a')}" for a, val in attrs]
        gated.append(f"if not ({' and '.join(conds)}): return False")
        for a, val, cond in [("training", m.training, conds[0])] + [(a, v, c) for (a, v), c in zip(attrs, conds[1:])]:
            extra.append((cond, f"{src.name()}.{a} == {val!r}", (f"{src.pretty()}.{a}", f"{mv}.{a}")))
        readable.append(" and ".join(f"{src.name()}.{a} == {val!r}" for a, val in [("training", m.training)] + attrs))
    lines = []
    dicts = None
    if modules:  # hooks added or removed since the trace
        dicts = module_epoch.hook_dicts(m for _, m in modules)
        full = tuple(d for d in dicts if d)
        ns["_chain"] = itertools.chain.from_iterable
        cond = f"not any({const(tuple(d for d in dicts if not d), 'hooks')})"
        if full:
            cond += f" and tuple(_chain({const(full, 'hooks')})) == {const(tuple(k for d in full for k in d), 'hk')}"
        gated.append(f"if not ({cond}): return False")
        extra.append((cond, "module hooks == the ones the trace ran (one was registered or removed since)", None))
    if not gated:
        return lines
    owners = list({id(m): m for m in [m for _, m in modules] + walked}.values())
    same = dicts is not None and [id(m) for m in owners] == [id(m) for _, m in modules]  # (then its hook dicts)
    watched = module_epoch.state_dicts(owners, dicts if same else None)
    watched += tuple(getattr(state_guard, "class_dicts", ()))  # user classes' (runtime/pystate_classes.py)
    tensors = tuple(getattr(state_guard, "tensors", ())) if state_guard is not None else ()
    if tensors:  # the parameters' and buffers' own attributes (runtime/pystate_classes.py)
        watched += tuple(t.__dict__ for t in tensors)
        owners += tensors
    ordered = tuple(d for d in watched if type(d) is not dict and d)
    if ordered:  # hooks the trace ran: an OrderedDict is reordered in place without a write (move_to_end)
        ns["_chain"] = itertools.chain.from_iterable
        lines.append(f"if tuple(_chain({const(ordered, 'od')})) != {const(tuple(k for d in ordered for k in d), 'odk')}: "
                     f"return False")
    native.watch(watched, owners, ns=ns, key="_mw")  # one object per call: `_mw` may be replaced meanwhile
    lines += ["if not (_w := _mw)():", "    _ms = _w.snap()"] + [f"    {c}" for c in gated] + ["    _w.commit(_ms)"]
    return lines


_METHOD_FACTS = {"_is_view", "is_inference", "is_conj", "is_neg", "is_pinned", "is_shared"}


def _input_fact_guards(tracer, lines, readable, const) -> list:
    """What the trace read of the caller's tensors beyond dtype and shape (`x.is_leaf`,
    `x._is_view()`): the same value at every call."""
    extra = []
    for (src, attr), value in getattr(tracer, "input_facts", {}).items():
        read = f"{src.code()}.{attr}{'()' if attr in _METHOD_FACTS else ''}"
        if value is None or isinstance(value, bool):
            cond = f"{read} is {value}"
        else:
            cond = f"{read} == {const(value, 'fact')}"
        lines.append(f"if not ({cond}): return False")
        text = f"{src.name()}.{attr}{'()' if attr in _METHOD_FACTS else ''} == {value!r}"
        readable.append(text)
        extra.append((cond, f"{text} (read by the function while tracing)",
                      (f"{src.pretty()}.{attr}", read)))
    return extra


def _aliasing_guards(tracer, local_of, lines, readable, ns) -> list:
    """Which tensor inputs are one object: the trace gave `f(a, a)` one fake for both, so the entry
    is for that call only, and tensors it saw distinct must stay distinct (the function may compare
    them: `x is y`, `{x, y}`, `id(x)`). When the graph mutates in place they also must not share
    memory (the trace did not model a write seen through the other). Returns the checks for
    `explain`."""
    free = [(t.source, local_of[t.source]) for t in tracer.tensor_inputs if t.example is None]
    names = [v for _, v in free]
    extra = []
    if len(names) >= 2:  # (as Dynamo's implicit no-aliasing check, not listed in `guards`; explain names it)
        if len(names) <= 5:
            lines.append("if " + " or ".join(f"{a} is {b}" for a, b in itertools.combinations(names, 2))
                         + ": return False")
        else:
            lines.append(f"if len({{id(_t) for _t in ({', '.join(names)})}}) != {len(names)}: return False")
        for (a, _), (b, _) in itertools.combinations(free, 2):
            extra.append((f"{a.name()} is not {b.name()}", f"{a.pretty()} and {b.pretty()} are different tensors "
                          "(the trace saw them distinct)", None))
    if tracer.mutates_input and len(names) >= 2:  # without in-place ops, overlapping memory reads the same
        ns["_shares_memory"] = shares_memory
        lines.append(f"if _shares_memory({', '.join(names)}): return False")
        readable.append(f"distinct tensors, no shared memory: {', '.join(s.name() for s, _ in free)}")
        extra.append((f"not _shares_memory({', '.join(s.name() for s, _ in free)})",
                      "inputs of a function that mutates in place do not share memory", None))
    for src, first in tracer.aliases:
        lines.append(f"if {src.code()} is not {local_of.get(first) or first.code()}: return False")
        readable.append(f"{src.name()} is {first.name()}")
        extra.append((f"{src.name()} is {first.name()}", f"{src.pretty()} is the same tensor as {first.pretty()} "
                      "(as when traced)", None))
    return extra


def shares_memory(*tensors) -> bool:
    """Whether two of the tensors use one storage (empty storages share nothing)."""
    seen = set()
    for t in tensors:
        st = t.untyped_storage()
        if st.nbytes():
            p = st.data_ptr()
            if p in seen:
                return True
            seen.add(p)
    return False


def _module_state(m: torch.nn.Module):
    """Plain attributes a forward may branch on (ints, floats, bools, strings, None)."""
    out = []
    for k, v in vars(m).items():
        if k.startswith("_") or k == "training":
            continue
        if v is None or isinstance(v, (bool, int, float, str)) or (
                isinstance(v, (tuple, list)) and all(isinstance(x, (bool, int, float, str)) for x in v)):
            out.append((k, list(v) if isinstance(v, list) else v))  # a copy: later mutation is seen
    return out


def _tensor_text(t: TensorInput, strides: bool, offset: bool = False, param: bool = False) -> str:
    sizes = ", ".join("None" if s is None else str(s) for s in t.sizes)
    text = (f"check_{'parameter' if param else 'tensor'}({t.source.name()}, {t.tensor_type.__name__}, {t.dtype}, "
            f"device={str(t.device)!r}, "
            f"requires_grad={t.requires_grad}, size=[{sizes}]")
    if strides:
        text += ", contiguous" if t.contiguous and t.strides == canonical_strides(t.example_shape) \
            else f", stride={list(t.strides)}"
    if offset:
        text += f", storage_offset={t.storage_offset}"
    return text + ")"


def plain_float(v: float) -> bool:
    """Whether a float symbol may stand for `v`: finite, and not -0.0."""
    return math.isfinite(v) and (v != 0.0 or math.copysign(1.0, v) > 0)


def _value_check(v: ValueInput, const):
    name = v.source.name()
    if v.kind in ("symint", "symfloat"):
        t = type(v.value) if v.value is not None else (int if v.kind == "symint" else float)
        tname = t.__name__ if t in (int, float) else const(t, "type")
        if v.kind == "symfloat":
            # a float symbol is a finite real to the engine (`a == a` is true, `a - a` is 0, -0.0 is 0.0):
            # nan, inf and -0.0 must not reach such a graph (fuzz seed 25112707: `a if a == a else 1.0`
            # gave y + nan; copysign(1.0, a) specialized at 0.0 answered 1.0 for -0.0)
            ok = const(plain_float, "plain_float")
            return (f"type({name}) is {tname} and {ok}({name})",
                    f"type({name}) is {t.__name__} and plain_float({name})")
        return f"type({name}) is {tname}", f"type({name}) is {t.__name__}"
    if v.kind == "const":
        val = v.value
        if val is None or isinstance(val, bool):
            return f"{name} is {val}", f"{name} is {val}"
        if isinstance(val, (int, float, str)) or _numpy_scalar(val):
            t = type(val)
            tname = t.__name__ if t in (int, float, str) else const(t, "type")
            plain = val.item() if _numpy_scalar(val) else val
            return f"type({name}) is {tname} and {_same_value(name, plain, const)}", f"{name} == {val!r}"
        return f"{name} == {const(val)}", f"{name} == {val!r}"
    if v.kind == "type":
        code = f"type({name}) is {const(v.value, 'type')}"
        if "len" in v.extra:
            code += f" and len({name}) == {v.extra['len']}"
        if "keys" in v.extra:
            code += f" and tuple({name}) == {v.extra['keys']!r}"
        return code, code.replace(const.__name__, "")
    if v.kind == "id":
        return f"{name} is {const(v.value, 'o')}", f"{name} is <the same {type(v.value).__name__}>"
    raise ValueError(v.kind)


def _numpy_scalar(v) -> bool:
    return type(v).__module__ == "numpy" and getattr(v, "shape", None) == () and hasattr(v, "item")


def _same_value(name: str, val, const) -> str:
    """`name` holds exactly `val`: nan equals nan, -0.0 is not 0.0, inf needs no global name."""
    if isinstance(val, float):
        if val != val:
            return f"{name} != {name}"
        if val == 0.0:  # 1/-0.0 is -inf: the sign shows through copysign
            return f"{name} == 0.0 and {const(math.copysign, 'copysign')}(1.0, {name}) == {math.copysign(1.0, val)}"
        if math.isinf(val) or type(val) is not float:
            return f"{name} == {const(float(val), 'f')}"
    if type(val) not in (int, float, str):  # an int or str subclass (numpy scalars, enums): by value
        return f"{name} == {const(val)}"
    return f"{name} == {val!r}"


def _explain_tensor(t: TensorInput, ns) -> str | None:
    who = f"tensor {t.source.pretty()!r}"
    try:
        x = eval(t.source.name(), ns)
    except Exception as e:
        return f"{who} could not be read ({type(e).__name__}: {e})"
    if not isinstance(x, torch.Tensor) or type(x) is not t.tensor_type:
        return f"{who} type mismatch. expected {t.tensor_type.__name__}, actual {type(x).__name__}"
    if x.dtype != t.dtype:
        return f"{who} dtype mismatch. expected {_DTYPE(t.dtype)}, actual {_DTYPE(x.dtype)}"
    if x.device != t.device:
        return f"{who} device mismatch. expected {t.device}, actual {x.device}"
    if x.requires_grad != t.requires_grad:
        return f"{who} requires_grad mismatch. expected {t.requires_grad}, actual {x.requires_grad}"
    if x.dim() != len(t.sizes):
        return f"{who} rank mismatch. expected {len(t.sizes)}, actual {x.dim()}"
    for d, s in enumerate(t.sizes):
        if s is not None and x.shape[d] != s:
            return f"{who} size mismatch at index {d}. expected {s}, actual {x.shape[d]}"
    return None


def _explain_value(v: ValueInput, ns) -> str | None:
    code, text = _value_check(v, lambda val, hint="k": _stash(ns, val))
    try:
        ok = eval(code, ns)
    except Exception:
        ok = False
    if ok:
        return None
    try:
        actual = eval(v.source.name(), ns)
    except Exception:
        actual = "<missing>"
    return f"{text} failed ({v.source.pretty()} = {actual!r})"


def _stash(ns, val):
    name = f"_x{len(ns)}"
    ns[name] = val
    return name

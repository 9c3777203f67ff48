"""Why a Python-state check of a compiled entry failed, in words (runtime/pystate.py builds the
checks; each of these writes the reason of one kind when a call misses)."""
from __future__ import annotations

_MISSING = object()


def _module_attributes_text(items) -> str:
    """The listed text of the walked modules' plain attributes (written when entry.guards is read)."""
    names = {id(src): src.name() for _, src, _, _ in items}  # a source prints once
    return "module attributes: " + " and ".join(f"{names[id(src)]}.{k} == {x!r}" for _, src, k, x in items)


def _why_modules(items):
    def why(L):
        for d, src, k, x in items:
            now = d.get(k, _MISSING)
            if now is _MISSING:
                return f"{src.name()}.{k} == {x!r} failed ({src.pretty()}.{k} is not set)"
            if type(now) is not type(x) or now != x:
                return f"{src.name()}.{k} == {x!r} failed ({src.pretty()}.{k} = {now!r})"
        return "module attributes changed"
    return why


def _why_keys(walked):
    names = [(m, src, set(vars(m))) for m, src in walked]

    def why(L):
        for m, src, keys in names:
            now = set(vars(m))
            if now != keys:
                added, gone = sorted(map(str, now - keys)), sorted(map(str, keys - now))
                return (f"{src.pretty()} has " + (f"new attributes {added}" if added else "")
                        + (" and " if added and gone else "") + (f"no attributes {gone}" if gone else "")
                        + " since the trace")
        return "a module's attributes changed"
    return why


def _why_replaced(walked):
    saved = [(m, vars(m), src) for m, src in walked]

    def why(L):
        for m, d, src in saved:
            if vars(m) is not d:
                return f"{src.pretty()}.__dict__ is not the dict it was when traced (it was replaced)"
        return "module state changed"
    return why


def _why_dicts(members):
    """members: (module __dict__, name, its dict then, source)."""
    saved = [(d, k, t, src, dict(t)) for d, k, t, src in members]
    what = {"_parameters": "parameters", "_buffers": "buffers", "_modules": "submodules"}

    def why(L):
        for d, k, t, src, before in saved:
            if d.get(k) is not t:
                return f"{src.pretty()}.{k} is not the dict it was when traced (it was replaced)"
            if list(t) != list(before) or any(t[n] is not v for n, v in before.items()):
                names = f" (now {list(t)}, then {list(before)})" if list(t) != list(before) else ""
                return f"the {what[k]} of {src.pretty()} are not the same objects as when traced{names}"
        return "module members changed"
    return why


def _why_attrs(read, src, items):
    """The failure reason of a batch of attribute checks: which attribute, and its value now."""
    def why(L):
        try:
            d = vars(read(L))
        except Exception as e:
            return f"{src.name()} could not be read ({type(e).__name__})"
        for k, x in items:
            now = d.get(k, _MISSING)
            if now is _MISSING:
                return f"{src.name()}.{k} == {x!r} failed ({src.pretty()}.{k} is not set)"
            if type(now) is not type(x) or now != x:
                return f"{src.name()}.{k} == {x!r} failed ({src.pretty()}.{k} = {now!r})"
        return f"the attributes of {src.pretty()} changed"
    why.text = " and ".join(f"{src.name()}.{k} == {x!r}" for k, x in items)
    return why

"""Comparing a compiled function's results with eager's: the fuzzer's oracle (torch only).

`difference` says why two results differ (container type, shape, dtype, values past the
tolerance); `near` arbitrates values past the tolerance with a float64 run of the same program;
`compare` walks two training records (phases.py) and classifies the first difference.
Torch only: `reduce.script` pastes this file into every training reproduction script.

    >>> difference(torch.ones(2), torch.ones(3))
    'out: shape (3,), eager (2,)'
"""
import math

import torch


def difference(want, got, path="out"):
    """Why `got` differs from eager's `want`, or None."""
    if type(want) is not type(got):
        return f"{path}: type {type(got).__name__}, eager {type(want).__name__}"
    if isinstance(want, torch.Tensor):
        if want.shape != got.shape:
            return f"{path}: shape {tuple(got.shape)}, eager {tuple(want.shape)}"
        if want.dtype != got.dtype:
            return f"{path}: dtype {got.dtype}, eager {want.dtype}"
        if want.device != got.device:
            return f"{path}: device {got.device}, eager {want.device}"
        if torch.equal(got, want):  # the usual case, ten times cheaper than assert_close
            return None
        try:
            # a half type: an op's float32 result a rounding apart lands an ulp of the type away
            rtol = {torch.bfloat16: 2 ** -7, torch.float16: 2 ** -10}.get(want.dtype, 1e-4)
            torch.testing.assert_close(got, want, equal_nan=True, rtol=rtol, atol=1e-5)
        except AssertionError as e:
            return f"{path}: values differ: {str(e).splitlines()[0]}"
        return None
    if isinstance(want, (list, tuple)):
        if len(want) != len(got):
            return f"{path}: length {len(got)}, eager {len(want)}"
        for i, (a, b) in enumerate(zip(want, got)):
            d = difference(a, b, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(want, dict):
        if list(want) != list(got):
            return f"{path}: keys {list(got)}, eager {list(want)}"
        for k in want:
            d = difference(want[k], got[k], f"{path}[{k!r}]")
            if d:
                return d
        return None
    if isinstance(want, float):
        same = (math.isnan(want) and math.isnan(got)) or (want == got and math.copysign(1, want) == math.copysign(1, got))
        return None if same else f"{path}: {got!r}, eager {want!r}"
    return None if want == got else f"{path}: {got!r}, eager {want!r}"


def near(want, got, ref) -> bool:
    """Whether float rounding explains `got` differing from eager's `want`, given `ref`, the same
    program run in float64: element by element, the compiled value is as near the exact one as
    eager's (4x eager's own error there, plus twice eager's worst error in the tensor, plus the
    usual tolerance). A sum of layer-normalised values is
    ~0 from cancellation: a kernel summing in another order lands 1e-5 from eager and nearer the
    exact result. A wrong index, size or gradient is off by far more than eager's rounding."""
    if isinstance(want, torch.Tensor):
        if isinstance(ref, torch.Tensor) and isinstance(got, torch.Tensor) and want.shape != got.shape:
            # a size decided by comparing values equal but for rounding (`v[v > 0]` of a sum that is 0 by
            # cancellation: eager's float32 kept an element at 1.2e-7, the kernel's sum was 0; fuzz seed
            # 25112936): eager's size is not the exact one, and ours is, with the exact values
            return ref.shape == got.shape != want.shape and near(ref.to(want.dtype), got, ref)
        if not (isinstance(ref, torch.Tensor) and isinstance(got, torch.Tensor) and ref.shape == want.shape == got.shape):
            return False
        if not want.dtype.is_floating_point:  # an index or a comparison of floats: exact, unless eager's own
            # float32 answer differs from float64's (argmax over values equal but for rounding): rounding decides it
            return torch.equal(want, got) or (ref.dtype == want.dtype and not torch.equal(want, ref))
        r, w, g = ref.double(), want.double(), got.double()
        # eager's worst error in the tensor is rounding's scale there too: where the exact values
        # are ~0 by cancellation (layer_norm's gradient of a row-constant gradient), both results
        # are noise of that size, position by position different (train fuzz seed 25112702)
        e = (w - r).abs()
        floor = 2 * float(e[e.isfinite()].max()) if e.isfinite().any() else 0.0
        ok = (g - r).abs() <= 4 * e + floor + 1e-5 + 1e-4 * r.abs()
        return bool((ok | (g.isnan() & w.isnan()) | (g == w)).all())
    if isinstance(want, (list, tuple)):
        return isinstance(ref, (list, tuple)) and len(ref) == len(want) == len(got) and all(map(near, want, got, ref))
    if isinstance(want, dict):
        return isinstance(ref, dict) and all(near(want[k], got[k], ref.get(k)) for k in want)
    return True  # not a tensor: `difference` compared it exactly already


def find_leak(value, path="out"):
    """A trace-time object (a dynashape FakeTensor or symbolic value, a torch Sym*) in a returned value."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)) or type(value).__module__.startswith("dynashape"):
        return f"{path} is a {type(value).__name__} (a trace-time value)"
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            r = find_leak(v, f"{path}[{i}]")
            if r:
                return r
    if isinstance(value, dict):
        for k, v in value.items():
            r = find_leak(v, f"{path}[{k!r}]")
            if r:
                return r
    return None


def _msg(e):
    return f"{type(e).__name__}: {str(e).strip()}"


def compare(want, got, reference=None, perturbed=None, compiled64=None):
    """(kind, exception types, message) for the first difference between eager's record `want` and
    the compiled function's `got`, or None. Kinds as the inference oracle's: wrong / crash / noraise /
    exc-type / leak. `reference()` gives eager's record in float64; it is asked only when values
    differ past the tolerance, and a difference it explains as rounding (`near`) is not one.
    `perturbed(k)`: eager's record with the inputs scaled by 1 + 1e-6 noise (seed k): an index or
    a comparison that differs is rounding's choice when eager's own answer moves under that noise
    (argmax over values equal but for rounding). `compiled64()`: the compiled function's record in
    float64, asked last, where eager's own float32 result is far from float64's (`_ill_conditioned`)."""
    pending = []  # (index, message): values past the tolerance, for the float64 arbiter
    for i in range(max(len(want), len(got))):
        w = want[i] if i < len(want) else ("the end of the record", None)
        g = got[i] if i < len(got) else ("the end of the record", None)
        if g[0] == "leak":
            return "leak", "", g[1]
        if w[0] == "raised" or g[0] == "raised":
            if w[0] != "raised":
                return "crash", type(g[2]).__name__, f"{g[1]}: {_msg(g[2])}"
            if g[0] != "raised":
                return "noraise", type(w[2]).__name__, f"{w[1]}: eager raised {_msg(w[2])}"
            if type(w[2]) is not type(g[2]):
                return ("exc-type", f"{type(w[2]).__name__}->{type(g[2]).__name__}",
                        f"{g[1]}: {_msg(g[2])} (eager: {_msg(w[2])})")
            break  # both raised alike: nothing after it to compare
        if w[0] != g[0]:
            return "wrong", "", f"the compiled record has {g[0]!r} where eager's has {w[0]!r}"
        d = difference(w[1], g[1], w[0])
        if d is None:
            continue
        if ": values differ:" not in d:
            return "wrong", "", d
        pending.append((i, d))
    if pending:
        ref = reference() if reference is not None else []
        for i, d in pending:
            if perturbed is not None and _rounding_decides(want, i, perturbed):
                continue
            if i < len(ref) and ref[i][0] == want[i][0] and near(want[i][1], got[i][1], ref[i][1]):
                continue
            if perturbed is not None and _noise_explains(want, got, i, perturbed):
                continue
            if compiled64 is not None and i < len(ref) and _ill_conditioned(want, i, ref):
                mine = compiled64()
                if i < len(mine) and mine[i][0] == ref[i][0] and _close64(mine[i][1], ref[i][1]):
                    continue
            return "wrong", "", f"{d}\n  compiled: {_short(got[i][1])}\n  eager:    {_short(want[i][1])}"
    return None


def _rounding_decides(want, i, perturbed, tries=3) -> bool:
    """Whether eager's integer/bool tensors at record `i` change when the inputs move by 1e-6."""
    w = want[i][1]
    if not any(isinstance(t, torch.Tensor) and not t.dtype.is_floating_point for t in _tensors(w)):
        return False
    for k in range(tries):
        rec = perturbed(k)
        if i < len(rec) and rec[i][0] == want[i][0] and difference(w, rec[i][1]) is not None:
            return True
    return False


def _noise_explains(want, got, i, perturbed, tries=3) -> bool:
    """Whether eager's own float result at record `i` moves, when the inputs move by 1e-6, about as far
    as the compiled one differs from it, element by element: the program amplifies rounding there
    (an rms_norm of a sum that cancels to ~0 multiplies float32's noise by 1/sqrt(eps); eager's
    float32 sum may land on exactly 0 where any other order does not: train fuzz seed 25112925,
    where Inductor is farther from eager than ours). The float64 arbiter cannot tell: float64 has
    its own eps. A real error is past eager's own spread by far."""
    ws, gs = list(_tensors(want[i][1])), list(_tensors(got[i][1]))
    if not ws or len(ws) != len(gs) or not all(t.dtype.is_floating_point and t.shape == g.shape
                                                for t, g in zip(ws, gs)):
        return False
    spread = [torch.zeros(t.shape, dtype=torch.float64) for t in ws]
    for k in range(tries):
        rec = perturbed(k)
        if not (i < len(rec) and rec[i][0] == want[i][0]):
            return False
        ps = list(_tensors(rec[i][1]))
        if len(ps) != len(ws) or any(p.shape != t.shape for p, t in zip(ps, ws)):
            return False
        spread = [torch.maximum(s, (p.double() - t.double()).abs().nan_to_num(0.0)) for s, p, t in zip(spread, ps, ws)]
    for g, t, s in zip(gs, ws, spread):
        off = (g.double() - t.double()).abs()
        if not bool(((off <= 2 * s + 1e-5) | (g.isnan() & t.isnan()) | (g == t)).all()):
            return False
    return True


def _ill_conditioned(want, i, ref) -> bool:
    """Whether float32 cannot judge record `i`: eager's own float32 values are off from the float64
    run's by more than 1% of the tensor's scale somewhere (the program amplifies rounding a
    million-fold: train fuzz seed 25112941, a layer_norm of `x + s` with |s| ~ 8000, where eager's
    gradient is off by 60 where the exact one is at most 25)."""
    ws, rs = list(_tensors(want[i][1])), list(_tensors(ref[i][1]))
    if not ws or len(ws) != len(rs):
        return False
    for w, r in zip(ws, rs):
        if w.dtype.is_floating_point and w.shape == r.shape and w.numel():
            w, r = w.double().cpu(), r.double().cpu()
            fin = w.isfinite() & r.isfinite()
            if fin.any() and float((w - r).abs()[fin].max()) > 1e-2 * max(float(r.abs()[fin].max()), 1e-30):
                return True
    return False


def _close64(mine, ref) -> bool:
    """The compiled function's float64 record against eager's: its logic, where float32 rounding
    hides it; float64 leaves the amplified rounding at ~1e-8 of the scale."""
    ms, rs = list(_tensors(mine)), list(_tensors(ref))
    if len(ms) != len(rs):
        return False
    for m, r in zip(ms, rs):
        if m.shape != r.shape:
            return False
        scale = float(r.double().abs().nan_to_num(0.0, 0.0, 0.0).max()) if r.numel() else 0.0
        try:
            torch.testing.assert_close(m.double().cpu(), r.double().cpu(), rtol=1e-6, atol=1e-6 * scale + 1e-9,
                                       equal_nan=True)
        except AssertionError:
            return False
    return True


def _tensors(v):
    if isinstance(v, torch.Tensor):
        yield v
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _tensors(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from _tensors(x)


def _short(v, limit=800):
    text = " ".join(repr(v).split())
    return text if len(text) <= limit else text[:limit] + " ..."

"""The fused backend's matrix products: a graph's linear, addmm, mm and matmul-by-a-matrix calls
run through `gemm.mm` (oneDNN's brgemm), forward and backward, where `gemm.active()`.

`rewrite` replaces such a call's target by one of the functions below, which take torch's
arguments and check at run time what the fast path needs (float32 CPU dense tensors, an input
that is 2-D or contiguous, a weight that is 2-D, a bias that is 1-D, enough work to pay for the
call); anything else, and any error, is torch's own call, so eager's results, errors and
autograd graph stand wherever the fast path does not apply. Under autograd the product is one
`torch.autograd.Function` (`GemmBackward`) that saves what eager's addmm saves (the input where
the weight's gradient is wanted, the weight where the input's is, version-checked alike) and
computes the input's and the weight's gradients by brgemm too, the bias's gradient as the weight
product's by-product (row or column sums, in double). Under `create_graph=True` the backward is
torch's calls, so it can be differentiated again.

    linear = torch.nn.functional.linear(x, w, b)   ->   linear = _f3(x, w, b)   # matmul.linear
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import gemm

_F32 = torch.float32
_STRIDED = torch.strided
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _plain(t) -> bool:
    return type(t) in _PLAIN and t.dtype is _F32 and t.is_cpu and t.layout is _STRIDED


def _as_rows(x):
    """x as a 2-D (rows, K) tensor without a copy (2-D as it is, else contiguous), or None (also when
    empty: view(-1, 0) raises where eager's product returns; train fuzz seed 25112802)."""
    if x.dim() == 2:
        return x
    if x.dim() > 2 and x.is_contiguous() and x.numel():
        return x.view(-1, x.shape[-1])
    return None


def _fast(x, w, b, nk: bool):
    """(x as rows, the (K, N) operand) when x @ w(.t() if nk) + b takes the fast path, else None."""
    if not (_plain(x) and _plain(w) and w.dim() == 2 and (b is None or (_plain(b) and b.dim() == 1))):
        return None
    x2 = _as_rows(x)
    if x2 is None:
        return None
    wkn = w.t() if nk else w
    K, N = wkn.shape
    if x2.shape[1] != K or (b is not None and b.shape[0] != N) or x2.shape[0] * N * K < gemm.min_work[0]:
        return None  # torch's call gives eager's error or its faster small product
    return x2, wkn


def _product(x, b, got):
    """x @ w (+ b) by brgemm from `_fast`'s (x as rows, the (K, N) operand), no autograd; None where
    the library declined."""
    x2, wkn = got
    # the result has its own storage in its own shape: a view of a 2-D one, returned by the autograd
    # Function, could not be changed in place (torch forbids it for views made inside a Function)
    out = torch.empty((*x.shape[:-1], wkn.shape[1]), dtype=_F32)
    rows = out if x.dim() == 2 else out.view(-1, wkn.shape[1])
    return out if gemm.mm(x2, wkn, b, out=rows) is not None else None


def _run(x, w, b, nk: bool, torch_call):
    got = _fast(x, w, b, nk)
    if got is None:
        return torch_call()
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or (b is not None and b.requires_grad)):
        return _Gemm.apply(x, w, b, nk, got)  # `got` in a tuple: not an input autograd tracks
    out = _product(x, b, got)
    return torch_call() if out is None else out


# Each entry point first asks whether the product is too small for the fast path (rows * K * N below
# gemm.min_work, by the cheapest reads there are): such calls, most of a small model's, go straight
# to torch's call (mlp8's 8 linears over 64x32 rows: 3.0 -> 2.0 ms for 60 calls with the checks of
# `_fast` run first). Wrong shapes land on torch's call too, and raise its error.
def linear(input, weight, bias=None):
    if weight.dim() != 2 or input.numel() * weight.shape[0] < gemm.min_work[0]:
        return F.linear(input, weight, bias)
    return _run(input, weight, bias, True, lambda: F.linear(input, weight, bias))


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    if mat2.dim() == 2 and mat1.numel() * mat2.shape[-1] >= gemm.min_work[0] and type(beta) in (int, float) \
            and type(alpha) in (int, float) and beta == 1 and alpha == 1 and mat1.dim() == 2:
        return _run(mat1, mat2, input, False, lambda: torch.addmm(input, mat1, mat2, beta=beta, alpha=alpha))
    return torch.addmm(input, mat1, mat2, beta=beta, alpha=alpha)


def mm(input, mat2):
    if mat2.dim() == 2 and input.numel() * mat2.shape[-1] >= gemm.min_work[0] and input.dim() == 2:
        return _run(input, mat2, None, False, lambda: torch.mm(input, mat2))
    return torch.mm(input, mat2)


def matmul(input, other):
    if other.dim() == 2 and input.numel() * other.shape[-1] >= gemm.min_work[0] and input.dim() >= 2:
        return _run(input, other, None, False, lambda: torch.matmul(input, other))
    return torch.matmul(input, other)


class _Gemm(torch.autograd.Function):
    """x @ w.t() + b (nk: w is (N, K), as linear's) or x @ w + b (w is (K, N)), x as rows."""

    @staticmethod
    def forward(ctx, x, w, b, nk, got):
        # what eager's mm/addmm keeps: x for w's gradient, w for x's, each only where that gradient is
        # wanted (an in-place update of a frozen input's weight before the backward is fine in eager)
        need_x, need_w = ctx.needs_input_grad[:2]
        ctx.save_for_backward(x if need_w else None, w if need_x else None)
        ctx.nk, ctx.x_shape = nk, x.shape
        out = _product(x, b, got)
        if out is None:  # the library declined: torch's result (still our backward, which is exact)
            out = F.linear(x, w, b) if nk else (torch.addmm(b, x, w) if b is not None else torch.matmul(x, w))
        return out

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors  # (None where forward did not keep it: its gradient is not wanted)
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        N = g.shape[-1]
        x2, g2 = x.reshape(-1, x.shape[-1]) if x is not None else None, g.reshape(-1, N)
        wkn = (w.t() if ctx.nk else w) if w is not None else None  # (K, N)
        gx = gw = gb = None
        if torch.is_grad_enabled():  # create_graph: torch's calls, which autograd can differentiate again
            gx = (g2 @ wkn.t()).reshape(ctx.x_shape) if need_x else None
            gw = (g2.t() @ x2 if ctx.nk else x2.t() @ g2) if need_w else None
            gb = g2.sum(0) if need_b else None
            return gx, gw, gb, None, None
        if need_x:
            gx = gemm.mm(g2, wkn.t())
            gx = (g2 @ wkn.t() if gx is None else gx).reshape(ctx.x_shape)
        if need_w:
            # (N, K) = g^T x for linear's weight, (K, N) = x^T g for addmm's; the bias's gradient is g's
            # column sums: the rows of g^T, the columns of g, summed while the product reads them
            gb = torch.empty(N, dtype=g.dtype) if need_b else None
            if ctx.nk:
                gw = gemm.mm(g2.t(), x2, asum=gb)
            else:
                gw = gemm.mm(x2.t(), g2, bsum=gb)
            if gw is None:
                gw = g2.t() @ x2 if ctx.nk else x2.t() @ g2
                gb = g2.sum(0) if need_b else None
        elif need_b:
            gb = g2.sum(0)
        return gx, gw, gb, None, None


_TARGETS = {F.linear: linear, torch._C._nn.linear: linear, torch.addmm: addmm, torch.Tensor.addmm: addmm,
            torch.mm: mm, torch.Tensor.mm: mm, torch.matmul: matmul, torch.Tensor.matmul: matmul,
            torch.Tensor.__matmul__: matmul}


def replacement(n):
    """The function that runs call `n` through brgemm, or None: only float32 products traced
    outside autocast and inference mode, with no `out=`."""
    if n.kind != "call" or n.modes is not None or "out" in n.kwargs:
        return None
    try:
        fn = _TARGETS.get(n.target)
    except TypeError:
        return None
    meta = n.meta
    if fn is None or getattr(meta, "dtype", None) is not _F32 or not getattr(meta, "shape", None):
        return None
    return fn

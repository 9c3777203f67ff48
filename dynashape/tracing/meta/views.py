"""View and shape-manipulation ops: reshape, squeeze, permute, expand, split, cat…

Sizes are computed with SymInt arithmetic. Guards appear only where the op
branches on sizes: divisibility for `-1` inference, the number of outputs of
`split`/`chunk`/`unbind`, equal sizes for `cat`/`stack`. "Is this dim 1?"
(`is_one`) adds no guard for a dynamic size (its range starts at 2); for a
data-dependent size it takes the path that is right for every value, or
checks at run time.

>>> x.view(-1, 4)        # (s0, s1) -> (s0*s1 // 4, 4), guard (s0*s1) % 4 == 0
"""
from __future__ import annotations

import math

import torch

from ...symbolic.errors import DataDependentError
from ...symbolic.symtypes import SymBase, statically_known_true, sym_max, sym_min
from .common import (assert_at_runtime, broadcast, check_equal, in_bounds, is_one, is_tensor, norm_dim, norm_dims,
                     prod, same, shape)
from .registry import lookup, register

T = torch.Tensor


# ------------------------------------------------------------------ helpers
def _size_args(args, kwargs=None, key="size"):
    """`f(2, 3)`, `f((2, 3))`, `f(torch.Size([2, 3]))` or `f(size=(2, 3))` as a list."""
    if kwargs and key in kwargs:
        return list(kwargs[key])
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        return list(args[0])
    return list(args)


def _is_minus_one(s) -> bool:
    """Is this requested size the `-1` to infer? A size known >= 0 (read from a tensor, or ranged)
    never is; a data-dependent one (`x.view(u0, u1)`) is taken as a size, checked >= 0 at run time,
    as torch.export does: deciding `u0 == -1` by data would make every such view unexportable."""
    if isinstance(s, SymBase):  # an int argument may be -1; a size read from a tensor never is
        if statically_known_true(s >= 0):
            return False
        try:
            return bool(s == -1)
        except DataDependentError:
            assert_at_runtime(s >= 0, f"a size computed from data must be >= 0 (it is never inferred as -1): "
                                      f"{s.node.env.describe(s.node.expr)}")
            return False
    return s == -1


def _cancel(a, b):
    """Drop the factors the products of `a` and `b` share (so `s0*s1*s2 == s0*s1*16` guards `s2 == 16`)."""
    ia = prod(x for x in a if not isinstance(x, SymBase))
    ib = prod(x for x in b if not isinstance(x, SymBase))
    sa = [x for x in a if isinstance(x, SymBase)]
    rest_b = []
    for y in (x for x in b if isinstance(x, SymBase)):
        hit = next((i for i, x in enumerate(sa) if statically_known_true(x == y)), None)
        if hit is None:
            rest_b.append(y)
        else:
            del sa[hit]
    g = math.gcd(ia, ib) or 1
    return prod(sa, ia // g), prod(rest_b, ib // g)


def _require_divisible(n, d) -> None:
    """The op needs `d | n` (it held on the example): guard it unless statically known."""
    if isinstance(n, int) and isinstance(d, int):
        return
    if not bool(n % d == 0):
        raise RuntimeError(f"{n} is not divisible by {d}")


def _infer_sizes(sizes, numel):
    """Sizes with one `-1` filled in from `numel`, as `view`/`reshape`/`unflatten` do."""
    sizes = list(sizes)
    holes = [i for i, s in enumerate(sizes) if _is_minus_one(s)]
    if len(holes) > 1:
        raise RuntimeError("only one dimension can be inferred")
    known = [s for s in sizes if not _is_minus_one(s)]
    num, den = _cancel(_as_list(numel), known)
    if holes:
        if isinstance(den, int) and den == 0:
            raise RuntimeError("cannot infer a size with a 0 in the shape")
        _require_divisible(num, den)
        sizes[holes[0]] = num // den
    else:
        check_equal(num, den)
    return tuple(sizes)


def _as_list(numel):
    return numel if isinstance(numel, (list, tuple)) else [numel]


def _same_shape(self, *args, **kwargs):
    return shape(self)


def _min(a, b):
    """min() as an expression; no guard (`Min(s0, s1)` unless one side is statically smaller)."""
    if statically_known_true(a <= b):
        return a
    if statically_known_true(b <= a):
        return b
    return sym_min(a, b)


# ------------------------------------------------------------------ view / reshape
@register(*lookup(T, "view", "reshape"))
def view(self, *args, **kwargs):
    if (len(args) == 1 and isinstance(args[0], torch.dtype)) or "dtype" in kwargs:
        return _view_dtype(self, args[0] if args else kwargs["dtype"])
    return _infer_sizes(_size_args(args, kwargs, "size" if "size" in kwargs else "shape"), list(shape(self)))


@register(*lookup(torch, "reshape"))
def reshape(input, *args, **kwargs):
    return _infer_sizes(_size_args(args, kwargs, "shape"), list(shape(input)))


def _view_dtype(self, dtype):
    old, new = self.dtype.itemsize, dtype.itemsize
    sizes = list(shape(self))
    if old == new:
        return tuple(sizes)
    if old > new:  # one element becomes several: the last dim grows
        sizes[-1] = sizes[-1] * (old // new)
    else:
        _require_divisible(sizes[-1], new // old)
        sizes[-1] = sizes[-1] // (new // old)
    return tuple(sizes)


@register(*lookup(T, "view_as", "reshape_as"))
def view_as(self, other):
    num, den = _cancel(list(shape(self)), list(shape(other)))
    check_equal(num, den)
    return shape(other)


@register(*lookup(torch, "flatten"), *lookup(T, "flatten"))
def flatten(input, start_dim=0, end_dim=-1):
    sizes = shape(input)
    if not sizes:
        return (1,)
    s, e = norm_dim(start_dim, len(sizes)), norm_dim(end_dim, len(sizes))
    return sizes[:s] + (prod(sizes[s:e + 1]),) + sizes[e + 1:]


@register(*lookup(torch, "ravel"), *lookup(T, "ravel"))
def ravel(input):
    return (prod(shape(input)),)


@register(*lookup(torch, "unflatten"), *lookup(T, "unflatten"))
def unflatten(input, dim, sizes):
    shp = shape(input)
    d = norm_dim(dim, len(shp))
    return shp[:d] + _infer_sizes(list(sizes), [shp[d]]) + shp[d + 1:]


# ------------------------------------------------------------------ squeeze / unsqueeze
@register(*lookup(torch, "squeeze"), *lookup(T, "squeeze", "squeeze_"))
def squeeze(input, dim=None):
    sizes = shape(input)
    dims = set(norm_dims(dim, len(sizes))) if sizes else set()
    out = []
    for i, s in enumerate(sizes):
        one = is_one(s) if i in dims else False
        if one is None:  # 1 or not by data: the result's rank depends on data; say so (a graph break)
            one = bool(s == 1)  # raises DataDependentError naming the user's line
        if not one:
            out.append(s)
    return tuple(out)


@register(*lookup(torch, "unsqueeze"), *lookup(T, "unsqueeze", "unsqueeze_"))
def unsqueeze(input, dim):
    sizes = shape(input)
    d = norm_dim(dim, len(sizes) + 1)
    return sizes[:d] + (1,) + sizes[d:]


# ------------------------------------------------------------------ permutations
@register(*lookup(torch, "permute"), *lookup(T, "permute"))
def permute(input, *dims, **kwargs):
    sizes = shape(input)
    order = norm_dims(_size_args(dims, kwargs, "dims"), len(sizes))
    if sorted(order) != list(range(len(sizes))):
        raise RuntimeError("permute: dims must be a permutation")
    return tuple(sizes[i] for i in order)


@register(*lookup(torch, "transpose", "swapaxes", "swapdims"),
          *lookup(T, "transpose", "transpose_", "swapaxes", "swapaxes_", "swapdims", "swapdims_"))
def transpose(input, dim0, dim1):
    sizes = list(shape(input))
    if not sizes:
        return ()
    a, b = norm_dim(dim0, len(sizes)), norm_dim(dim1, len(sizes))
    sizes[a], sizes[b] = sizes[b], sizes[a]
    return tuple(sizes)


@register(*lookup(torch, "t"), *lookup(T, "t", "t_"))
def t(input):
    return tuple(reversed(shape(input))) if len(shape(input)) == 2 else shape(input)


@register(*[getattr(T, p).__get__ for p in ("T", "H") if hasattr(T, p)])
def reverse_dims(input):
    return tuple(reversed(shape(input)))


@register(*[getattr(T, p).__get__ for p in ("mT", "mH") if hasattr(T, p)],
          *lookup(torch, "adjoint"), *lookup(T, "adjoint"))
def swap_last_two(input):
    sizes = shape(input)
    if len(sizes) < 2:
        raise RuntimeError("tensor.mT is only supported on matrices or batches of matrices")
    return sizes[:-2] + (sizes[-1], sizes[-2])


@register(*lookup(torch, "movedim", "moveaxis"), *lookup(T, "movedim", "moveaxis"))
def movedim(input, source, destination):
    sizes = shape(input)
    n = len(sizes)
    src, dst = norm_dims(source, n), norm_dims(destination, n)
    order = [None] * n
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(i for i in range(n) if i not in src)
    order = [next(rest) if o is None else o for o in order]
    return tuple(sizes[i] for i in order)


# ------------------------------------------------------------------ expand / repeat
def _expand(sizes, new):
    new = list(new)
    if len(new) < len(sizes):
        raise RuntimeError("expand: the number of sizes must be >= the tensor's dims")
    lead = len(new) - len(sizes)
    out = []
    for i, n in enumerate(new):
        if i < lead:  # a new leading dim: -1 is not allowed there
            out.append(n)
            continue
        old = sizes[i - lead]
        if _is_minus_one(n):
            out.append(old)
        elif (one := is_one(old)) is None:  # 1 or n by data: the result is n either way
            assert_at_runtime((old == 1) | (old == n), f"expand: size {old} must be 1 or {n}")
            out.append(n)
        elif one:
            out.append(n)
        else:
            check_equal(old, n)
            out.append(n if isinstance(n, int) else old)
    return tuple(out)


@register(*lookup(T, "expand"))
def expand(self, *sizes, implicit=False, **kwargs):
    return _expand(shape(self), _size_args(sizes, kwargs, "size"))


@register(*lookup(T, "expand_as"))
def expand_as(self, other):
    return _expand(shape(self), shape(other))


@register(*lookup(torch, "broadcast_to"), *lookup(T, "broadcast_to"))
def broadcast_to(input, size):
    return _expand(shape(input), size)


@register(*lookup(torch, "broadcast_tensors"), *lookup(torch._C._VariableFunctions, "broadcast_tensors"))
def broadcast_tensors(*tensors):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    out = broadcast(*[shape(t) for t in tensors])
    return [out for _ in tensors]


@register(*lookup(T, "repeat"))
def repeat(self, *repeats, **kwargs):
    reps = _size_args(repeats, kwargs, "repeats")
    sizes = shape(self)
    if len(reps) < len(sizes):
        raise RuntimeError("repeat: the number of repeats must be >= the tensor's dims")
    sizes = (1,) * (len(reps) - len(sizes)) + tuple(sizes)
    return tuple(s * r for s, r in zip(sizes, reps))


@register(*lookup(torch, "tile"), *lookup(T, "tile"))
def tile(input, *dims, **kwargs):
    reps = _size_args(dims, kwargs, "dims")
    sizes = shape(input)
    reps = [1] * (len(sizes) - len(reps)) + reps
    return repeat(input, reps)


# ------------------------------------------------------------------ narrow / select
@register(*lookup(torch, "narrow", "narrow_copy"), *lookup(T, "narrow", "narrow_copy"))
def narrow(input, dim, start, length):
    sizes = list(shape(input))
    sizes[norm_dim(dim, len(sizes))] = length  # the op checks the bounds itself; the shape is `length`
    return tuple(sizes)


@register(*lookup(torch, "select"), *lookup(T, "select"))
def select(input, dim, index):
    sizes = shape(input)
    d = norm_dim(dim, len(sizes))
    if not in_bounds(index, sizes[d]):
        raise IndexError(f"select(): index {index} out of range for tensor of size {list(sizes)} at dimension {d}")
    return sizes[:d] + sizes[d + 1:]


# ------------------------------------------------------------------ split family
def _chunks(sizes, d, lengths):
    return [sizes[:d] + (n,) + sizes[d + 1:] for n in lengths]


def _split_even(n, size):
    """Lengths of `split(size)` along a dim of `n`: the count is guarded, the last length is a formula."""
    if same(size, 0):  # torch allows it on an empty dim only: one empty piece
        check_equal(n, 0)
        return [n]
    count = (n + size - 1) // size
    k = max(int(count), 1)  # the number of outputs is a Python int: guard it
    return [size] * (k - 1) + [n - size * (k - 1)]


@register(*lookup(torch, "split", "unsafe_split"), *lookup(T, "split", "unsafe_split"))
def split(tensor, split_size_or_sections=None, dim=0, split_size=None):
    if split_size_or_sections is None:  # Tensor.split names it `split_size`
        split_size_or_sections = split_size
    sizes = shape(tensor)
    d = norm_dim(dim, len(sizes))
    if isinstance(split_size_or_sections, (list, tuple)):
        return split_with_sizes(tensor, split_size_or_sections, d)
    return _chunks(sizes, d, _split_even(sizes[d], split_size_or_sections))


@register(*lookup(torch, "split_with_sizes", "unsafe_split_with_sizes"),
          *lookup(T, "split_with_sizes", "unsafe_split_with_sizes"))
def split_with_sizes(input, split_sizes, dim=0):
    sizes = shape(input)
    d = norm_dim(dim, len(sizes))
    check_equal(sum(split_sizes, 0), sizes[d])
    return _chunks(sizes, d, list(split_sizes))


@register(*lookup(torch, "chunk", "unsafe_chunk"), *lookup(T, "chunk", "unsafe_chunk"))
def chunk(input, chunks, dim=0):
    sizes = shape(input)
    d = norm_dim(dim, len(sizes))
    n = sizes[d]
    if same(n, 0):  # an empty dim splits into `chunks` empty pieces
        return _chunks(sizes, d, [n] * int(chunks))
    size = (n + chunks - 1) // chunks
    if isinstance(chunks, int) and chunks == 2 and statically_known_true(n >= 2):
        return _chunks(sizes, d, [size, n - size])  # ceil(n / ceil(n/2)) == 2 for every n >= 2
    return _chunks(sizes, d, _split_even(n, size))


@register(*lookup(torch, "tensor_split"), *lookup(T, "tensor_split"))
def tensor_split(input, indices_or_sections=None, dim=0, sections=None, indices=None,
                 tensor_indices_or_sections=None):
    from .indexing import slice_length  # the same clamping as x[a:b]
    indices_or_sections = next(v for v in (indices_or_sections, sections, indices, tensor_indices_or_sections)
                               if v is not None)
    sizes = shape(input)
    d = norm_dim(dim, len(sizes))
    n = sizes[d]
    if is_tensor(indices_or_sections):
        raise NotImplementedError("tensor_split with a tensor of indices reads data")
    if isinstance(indices_or_sections, (list, tuple)):
        bounds = [0, *indices_or_sections, None]
        return _chunks(sizes, d, [slice_length(n, a, b, 1) for a, b in zip(bounds, bounds[1:])])
    s = indices_or_sections
    return _chunks(sizes, d, [(n + s - 1 - i) // s for i in range(int(s))])  # numpy array_split


@register(*lookup(torch, "unbind"), *lookup(T, "unbind"))
def unbind(input, dim=0):
    sizes = shape(input)
    d = norm_dim(dim, len(sizes))
    k = int(sizes[d])  # one output per row: the count is a Python int, so the size is specialized
    return [sizes[:d] + sizes[d + 1:]] * k


# ------------------------------------------------------------------ cat / stack
def _skip_empty(shapes):
    kept = [s for s in shapes if not (len(s) == 1 and isinstance(s[0], int) and s[0] == 0)]
    return kept or shapes[:1]  # legacy: 1-d empty tensors are skipped


@register(*lookup(torch, "cat", "concat", "concatenate"))
def cat(tensors, dim=0, axis=None, out=None):
    return _concat(_skip_empty([shape(t) for t in tensors]), axis if axis is not None else dim)


def _concat(shapes, dim):
    ref = shapes[0]
    d = norm_dim(dim, len(ref))
    total = 0
    for s in shapes:
        if len(s) != len(ref):
            raise RuntimeError("cat: tensors must have the same number of dimensions")
        for i, (a, b) in enumerate(zip(ref, s)):
            if i != d:
                check_equal(a, b)
        total = total + s[d]
    return ref[:d] + (total,) + ref[d + 1:]


@register(*lookup(torch, "stack"))
def stack(tensors, dim=0, out=None):
    ref = shape(tensors[0])
    for t in tensors[1:]:
        s = shape(t)
        if len(s) != len(ref):
            raise RuntimeError("stack expects each tensor to be equal size")
        for a, b in zip(ref, s):
            check_equal(a, b)
    d = norm_dim(dim, len(ref) + 1)
    return ref[:d] + (len(tensors),) + ref[d:]


def _atleast(s, n):
    s = tuple(s)
    if len(s) >= n:
        return s
    if n == 3 and len(s) == 2:
        return s + (1,)
    if n == 3 and len(s) == 1:
        return (1,) + s + (1,)
    return (1,) * (n - len(s)) + s


@register(*lookup(torch, "hstack"))
def hstack(tensors, out=None):
    shapes = [_atleast(shape(t), 1) for t in tensors]
    return _concat(_skip_empty(shapes), 0 if len(shapes[0]) == 1 else 1)


@register(*lookup(torch, "vstack", "row_stack"))
def vstack(tensors, out=None):
    return _concat(_skip_empty([_atleast(shape(t), 2) for t in tensors]), 0)


@register(*lookup(torch, "dstack"))
def dstack(tensors, out=None):
    return _concat(_skip_empty([_atleast(shape(t), 3) for t in tensors]), 2)


# ------------------------------------------------------------------ same-shape ops
register(*lookup(torch, "flip", "fliplr", "flipud", "roll", "tril", "triu"),
         *lookup(T, "flip", "fliplr", "flipud", "roll", "tril", "triu", "tril_", "triu_"))(_same_shape)

# (clone/detach/contiguous live with the pointwise unary ops)
CASTS = "to type_as cpu cuda float double half bfloat16 int long bool short char byte cfloat cdouble".split()
register(*lookup(T, *CASTS))(_same_shape)


@register(*lookup(T, "type"))
def type_(self, dtype=None, non_blocking=False, **kwargs):
    return [] if dtype is None else shape(self)  # `x.type()` returns the type's name, not a tensor


@register(*lookup(torch, "rot90"), *lookup(T, "rot90"))
def rot90(input, k=1, dims=(0, 1)):
    sizes = list(shape(input))
    if k % 2:
        a, b = norm_dims(dims, len(sizes))
        sizes[a], sizes[b] = sizes[b], sizes[a]
    return tuple(sizes)


# ------------------------------------------------------------------ diagonals / windows
def _diag_len(n1, n2, offset):
    m = _min(n1, n2 - offset) if offset >= 0 else _min(n1 + offset, n2)
    return m if statically_known_true(m >= 0) else sym_max(m, 0)


@register(*lookup(torch, "diagonal"), *lookup(T, "diagonal"))
def diagonal(input, offset=0, dim1=0, dim2=1):
    sizes = shape(input)
    a, b = norm_dim(dim1, len(sizes)), norm_dim(dim2, len(sizes))
    rest = tuple(s for i, s in enumerate(sizes) if i not in (a, b))
    return rest + (_diag_len(sizes[a], sizes[b], offset),)


@register(*lookup(torch, "diag"), *lookup(T, "diag"))
def diag(input, diagonal=0):
    sizes = shape(input)
    if len(sizes) == 1:
        n = sizes[0] + abs(diagonal)
        return (n, n)
    return (_diag_len(sizes[0], sizes[1], diagonal),)


@register(*lookup(T, "unfold"))
def unfold(self, dimension, size, step):
    sizes = shape(self)
    if not sizes:
        return (size,)
    d = norm_dim(dimension, len(sizes))
    return sizes[:d] + ((sizes[d] - size) // step + 1,) + sizes[d + 1:] + (size,)


"""Tests for dynashape/tracing/meta/views.py: compiled (dynamic=True) vs eager over many shapes.

Each case list is drawn so that one compile must serve every shape: a rule that
specialized a size, or computed a wrong symbolic shape, fails the oracle (the
tracer also checks each rule's shape against torch's meta run).
"""
import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dynashape as ds
from dynashape.tracing.meta import get_rule
from tests.oracle import check_vs_eager

T = torch.Tensor

def random_shapes(ndim, count=3, seed=0, hi=9):
    """`count` shapes of `ndim` dims, sizes in [2, hi], distinct within a shape (no duck sizing)."""
    rng = random.Random(seed)
    return [tuple(rng.sample(range(2, hi + 1), ndim)) for _ in range(count)]


def cases(ndim=3, count=3, seed=0):
    return [(torch.randn(*s),) for s in random_shapes(ndim, count, seed)]


def pairs(shape_a, shape_b, sizes):
    """Cases of two tensors whose shapes are functions of one varying size."""
    return [(torch.randn(*shape_a(n)), torch.randn(*shape_b(n))) for n in sizes]


def shape_guards(cf):
    return [g for g in cf.entries[0].guards
            if not g.startswith("check_tensor") and not g.startswith("torch.") and "type(" not in g]


def equality_guards(cf):
    return [g for g in shape_guards(cf) if "==" in g]


ONE_COMPILE = {
    # view / reshape
    "view infers -1 from the numel": (lambda x: x.view(-1, 4), [(torch.randn(n, 4),) for n in (3, 5, 7)]),
    "view takes sizes read from the input": (lambda x: x.view(x.shape[0], -1), cases(3)),
    "view takes a torch.Size": (lambda x: x.flatten().view(x.shape), cases(3)),
    "view takes a tuple of symbolic products": (lambda x: x.view((x.size(0) * x.size(1), x.size(2))), cases(3)),
    "view of a static trailing dim cancels the shared sizes": (
        lambda x: x.view(x.shape[0], x.shape[1], 4, 4), [(torch.randn(a, b, 16),) for a, b in ((2, 3), (5, 7))]),
    "view to one dim": (lambda x: x.view(-1), cases(4)),
    "view by keyword": (lambda x: x.view(size=(-1,)), cases(2)),
    "reshape as a method": (lambda x: x.reshape(x.shape[2], -1), cases(3)),
    "torch.reshape with a keyword shape": (lambda x: torch.reshape(x, shape=(-1, x.shape[-1])), cases(3)),
    "reshape of a transposed tensor": (lambda x: x.t().reshape(-1), cases(2)),
    "view as a same-size dtype": (lambda x: x.view(torch.int32), cases(2)),
    "view as a smaller dtype grows the last dim": (lambda x: x.view(torch.int16), cases(2)),
    "view_as": (lambda x: x.view(-1).view_as(x), cases(3)),
    "reshape_as another tensor": (lambda x, y: x.reshape_as(y),
                                  pairs(lambda n: (n, 6), lambda n: (3, 2 * n), (2, 5, 7))),
    "flatten everything": (lambda x: x.flatten(), cases(3)),
    "flatten from a start dim": (lambda x: x.flatten(1), cases(4)),
    "torch.flatten of a middle range": (lambda x: torch.flatten(x, 1, 2), cases(4)),
    "flatten of a 0-d tensor": (lambda x: x.sum().flatten(), cases(2)),
    "ravel": (lambda x: torch.ravel(x.transpose(0, 1)), cases(3)),
    "unflatten into a dynamic size": (lambda x: x.unflatten(-1, (x.shape[-1], 1)), cases(2)),
    "unflatten with -1": (lambda x: x.unflatten(1, (2, -1)), [(torch.randn(a, b),) for a, b in ((3, 4), (5, 8))]),
    # squeeze / unsqueeze
    "squeeze of a dynamic dim keeps it": (lambda x: x.squeeze(0), cases(2)),
    "squeeze of an inserted dim": (lambda x: x.unsqueeze(1).squeeze(1), cases(2)),
    "squeeze of everything drops only the static ones": (lambda x: x.squeeze(), [(torch.randn(1, a, 1, b),)
                                                                             for a, b in ((2, 3), (5, 4))]),
    "squeeze of a tuple of dims": (lambda x: torch.squeeze(x, (0, 2)), [(torch.randn(1, a, b),)
                                                                        for a, b in ((2, 3), (5, 4))]),
    "squeeze in place": (lambda x: x.unsqueeze(0).squeeze_(0) * 2, cases(2)),
    "unsqueeze at a negative dim": (lambda x: x.unsqueeze(-1), cases(3)),
    "unsqueeze in place": (lambda x: x.clone().unsqueeze_(1), cases(2)),
    "unsqueeze of a 0-d tensor": (lambda x: torch.unsqueeze(x.sum(), 0), cases(2)),
    # permutations
    "permute with varargs": (lambda x: x.permute(2, 0, 1), cases(3)),
    "permute with a tuple and negative dims": (lambda x: torch.permute(x, (-1, 0, 1)), cases(3)),
    "transpose": (lambda x: x.transpose(0, -1), cases(3)),
    "swapaxes and swapdims": (lambda x: (torch.swapaxes(x, 0, 1), x.swapdims(1, 2)), cases(3)),
    "transpose in place": (lambda x: x.clone().transpose_(0, 1), cases(2)),
    "t of a matrix and of a vector": (lambda x: (x.t(), torch.t(x[0])), cases(2)),
    "the T property": (lambda x: x.T, cases(2)),
    "the mT property": (lambda x: x.mT, cases(3)),
    "the mH and H properties": (lambda x: (x.mH, x.H), cases(2)),
    "adjoint": (lambda x: torch.adjoint(x), cases(3)),
    "movedim with ints": (lambda x: x.movedim(0, -1), cases(3)),
    "moveaxis with tuples": (lambda x: torch.moveaxis(x, (0, 1), (2, 0)), cases(4)),
    # expand / repeat
    "expand with a new leading dim": (lambda x: x.expand(3, -1, -1), cases(2)),
    "expand a size-1 dim to a dynamic size": (lambda x, y: x.expand(-1, y.shape[1]) + y,
                                              pairs(lambda n: (n, 1), lambda n: (n, n + 2), (2, 5, 7))),
    "expand_as": (lambda x, y: x.expand_as(y), pairs(lambda n: (1, n), lambda n: (n + 1, n), (2, 4, 6))),
    "broadcast_to": (lambda x, y: torch.broadcast_to(x, (2, y.shape[0], x.shape[1])),
                     pairs(lambda n: (1, n), lambda n: (n + 2,), (2, 4, 6))),
    "repeat": (lambda x: x.repeat(2, 1, 3), cases(2)),
    "repeat by a symbolic count": (lambda x: x.repeat(x.shape[1], 1), cases(2)),
    "tile with fewer reps than dims": (lambda x: x.tile((2,)), cases(3)),
    # narrow / select
    "narrow by symbolic bounds": (lambda x: x.narrow(0, 1, x.shape[0] - 1), cases(2)),
    "narrow by an int argument": (lambda x, n: torch.narrow(x, 1, 0, n),
                                  [(torch.randn(*s), k) for s, k in (((3, 6), 2), ((5, 7), 4))]),
    "select a negative index": (lambda x: x.select(1, -1), cases(3)),
    "select by an int argument": (lambda x, i: torch.select(x, 0, i),
                                  [(torch.randn(*s), k) for s, k in (((3, 6), 2), ((5, 7), 4))]),
    # split family
    "split by a size keeps the count": (lambda x: x.split(4), [(torch.randn(n, 2),) for n in (9, 10, 11, 12)]),
    "torch.split by sizes": (lambda x: torch.split(x, [1, x.shape[0] - 1]), cases(2)),
    "split_with_sizes along a dim": (lambda x: x.split_with_sizes([2, x.shape[1] - 2], dim=1), cases(2)),
    "chunk in two": (lambda x: x.chunk(2, -1), cases(2)),
    "chunk in three keeps the count": (lambda x: torch.chunk(x, 3), [(torch.randn(n, 2),) for n in (5, 7, 8, 9)]),
    "tensor_split into sections": (lambda x: x.tensor_split(3, dim=1), cases(2)),
    "tensor_split at indices": (lambda x: torch.tensor_split(x, [1, 2]), cases(2)),
    "unbind a static dim": (lambda x: x.unbind(1), [(torch.randn(n, 3),) for n in (2, 5, 7)]),
    # cat / stack
    "cat along the varying dim": (lambda x, y: torch.cat([x, y], 1),
                                  pairs(lambda n: (n, 3), lambda n: (n, n + 2), (2, 5, 7))),
    "cat skips legacy empty tensors": (lambda x, e: torch.cat([e, x, e]), [(torch.randn(n, 3), torch.empty(0))
                                                                           for n in (2, 5)]),
    "concat and concatenate": (lambda x: (torch.concat((x, x), -1), torch.concatenate([x, x], axis=0)), cases(2)),
    "stack at a new dim": (lambda x: torch.stack([x, x * 2, x], 1), cases(2)),
    "hstack": (lambda x, y: torch.hstack([x, y]), pairs(lambda n: (n, 2), lambda n: (n, n + 1), (3, 5))),
    "hstack of vectors": (lambda x: torch.hstack([x[0], x[1]]), cases(2)),
    "vstack and row_stack": (lambda x: (torch.vstack([x, x[0]]), torch.row_stack([x[1], x])), cases(2)),
    "dstack": (lambda x: torch.dstack([x, x]), cases(2)),
    # same shape
    "flip, roll, tril and triu": (lambda x: (x.flip(0), torch.fliplr(x), torch.flipud(x), x.roll(1, 0),
                                             torch.tril(x), x.triu(1), x.clone().tril_()), cases(2)),
    "rot90 swaps the dims for odd turns": (lambda x: (torch.rot90(x), x.rot90(2, (0, 1))), cases(2)),
    "casts keep the shape": (lambda x: (x.to(torch.float64), x.double(), x.half(), x.bool(), x.long(),
                                        x.int(), x.type(torch.int32), x.to("cpu"), x.bfloat16()),
                             cases(2)),
    "type_as keeps self's shape": (lambda x, y: x.type_as(y), pairs(lambda n: (n, 3), lambda n: (n + 4,), (2, 5))),
    # diagonals / windows
    "diagonal with offsets": (lambda x: (x.diagonal(), torch.diagonal(x, 1), x.diagonal(-1, 1, 0)), cases(3)),
    "diag of a vector and of a matrix": (lambda x: (torch.diag(x[0]), x.diag(1)), cases(2)),
    "unfold windows": (lambda x: x.unfold(0, 2, 1), cases(2)),
}


@pytest.mark.parametrize("name", list(ONE_COMPILE))
def test_view_op_serves_every_shape_with_one_compile(name):
    fn, cs = ONE_COMPILE[name]
    check_vs_eager(fn, cs, compiles=1)


def test_view_to_static_sizes_guards_only_the_dim_they_replace():
    fn, cs = ONE_COMPILE["view of a static trailing dim cancels the shared sizes"]
    cf = check_vs_eager(fn, cs, compiles=1)
    assert equality_guards(cf) == ["L['x'].size()[2] == 16"]


def test_dims_read_from_the_input_add_no_guards():
    for name in ("view takes sizes read from the input", "unflatten into a dynamic size", "chunk in two",
                 "squeeze of a dynamic dim keeps it", "narrow by symbolic bounds", "flatten from a start dim"):
        fn, cs = ONE_COMPILE[name]
        cf = check_vs_eager(fn, cs, compiles=1)
        assert equality_guards(cf) == [], (name, equality_guards(cf))


def test_view_with_minus_one_guards_divisibility():
    cf = check_vs_eager(lambda x: x.view(-1, 6), [(torch.randn(4, 3),), (torch.randn(8, 9),)], compiles=1)
    assert "L['x'].size()[0]*L['x'].size()[1] % 6 == 0" in cf.entries[0].guards


def test_view_of_an_indivisible_size_raises_like_eager():
    cf = ds.compile(lambda x: x.view(-1, 6), dynamic=True)
    cf(torch.randn(4, 3))
    with pytest.raises(RuntimeError, match="invalid for input of size 15"):
        cf(torch.randn(5, 3))


def test_split_recompiles_when_the_number_of_chunks_changes():
    cf = check_vs_eager(lambda x: x.split(4), [(torch.randn(n, 2),) for n in (9, 12, 13, 16, 5)], compiles=3)
    assert any("// 4 ==" in g for g in cf.entries[0].guards)


def test_chunk_recompiles_when_it_yields_fewer_chunks():
    # chunk(3) of 4 rows gives 2 chunks of 2
    check_vs_eager(lambda x: x.chunk(3), [(torch.randn(n, 2),) for n in (5, 7, 4, 6)], compiles=2)


def test_unbind_specializes_the_dim_it_unbinds():
    cf = check_vs_eager(lambda x: x.unbind(0), [(torch.randn(n, 3),) for n in (2, 5, 5)], compiles=2)
    assert "L['x'].size()[0] == 5" in cf.entries[0].guards


def test_cpu_keeps_the_shape():
    check_vs_eager(lambda x: x.cpu() * 2, cases(2), compiles=1)


def test_cat_of_mismatched_sizes_raises_like_eager():
    cf = ds.compile(lambda x, y: torch.cat([x, y]), dynamic=True)
    cf(torch.randn(3, 4), torch.randn(2, 4))
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        cf(torch.randn(3, 4), torch.randn(2, 5))


def test_expand_of_a_dynamic_dim_to_another_size_raises_like_eager():
    cf = ds.compile(lambda x, y: x.expand(y.shape[0], -1), dynamic=True)
    cf(torch.randn(3, 4), torch.randn(3))
    with pytest.raises(RuntimeError):
        cf(torch.randn(3, 4), torch.randn(5))


def test_type_without_arguments_returns_the_type_name():
    cf = ds.compile(lambda x: (x + 1, x.type()), dynamic=True)
    assert cf(torch.randn(3))[1] == "torch.FloatTensor"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(2, 5), min_size=2, max_size=4), st.data())
def test_reshape_to_merged_groups_matches_eager(sizes, data):
    """Merge consecutive dims into groups (one of them -1), from symbolic sizes: one compile for two shapes."""
    n = len(sizes)
    cuts = sorted(data.draw(st.sets(st.integers(1, n - 1), max_size=n - 1)))
    groups = [range(a, b) for a, b in zip([0, *cuts], [*cuts, n])]
    hole = data.draw(st.integers(0, len(groups) - 1))

    def fn(x):
        out = []
        for i, g in enumerate(groups):
            p = 1
            for d in g:
                p = p * x.shape[d]
            out.append(-1 if i == hole else p)
        return x.reshape(out)

    other = [s + 7 + i for i, s in enumerate(sizes)]  # distinct, so duck sizing adds nothing
    check_vs_eager(fn, [(torch.randn(*sizes),), (torch.randn(*other),)], compiles=None)


ALIASES = {
    "view": [T.view, T.reshape, torch.reshape, T.view_as, T.reshape_as],
    "flatten": [torch.flatten, T.flatten, torch.ravel, T.ravel, torch.unflatten, T.unflatten],
    "squeeze": [torch.squeeze, T.squeeze, T.squeeze_, torch.unsqueeze, T.unsqueeze, T.unsqueeze_],
    "permute": [torch.permute, T.permute, torch.transpose, T.transpose, T.transpose_, torch.swapaxes,
                T.swapaxes, T.swapaxes_, torch.swapdims, T.swapdims, T.swapdims_, torch.t, T.t, T.t_,
                T.T.__get__, T.mT.__get__, T.mH.__get__, T.H.__get__, torch.adjoint, T.adjoint,
                torch.movedim, T.movedim, torch.moveaxis, T.moveaxis],
    "expand": [T.expand, T.expand_as, torch.broadcast_to, T.broadcast_to, T.repeat, torch.tile, T.tile],
    "narrow": [torch.narrow, T.narrow, torch.select, T.select],
    "split": [torch.split, T.split, torch.split_with_sizes, T.split_with_sizes, torch.chunk, T.chunk,
              torch.tensor_split, T.tensor_split, torch.unbind, T.unbind],
    "cat": [torch.cat, torch.concat, torch.concatenate, torch.stack, torch.hstack, torch.vstack, torch.dstack],
    "same": [torch.flip, T.flip, torch.roll, T.roll, torch.tril, T.tril, T.tril_, torch.triu, T.triu, T.triu_,
             T.to, T.type, T.type_as, T.float, T.double, T.half, T.bfloat16, T.int, T.long, T.bool, T.cpu,
             T.cuda, T.detach, T.clone, T.contiguous],
    "windows": [torch.diagonal, T.diagonal, torch.diag, T.diag, T.unfold],
}


@pytest.mark.parametrize("family", list(ALIASES))
def test_every_alias_has_a_rule(family):
    missing = [f for f in ALIASES[family] if get_rule(f) is None]
    assert not missing, missing


@pytest.mark.parametrize("dynamic", [None, True, False])
@pytest.mark.parametrize("fn", [
    lambda x: x.chunk(3, -1)[-1],
    lambda x: x.chunk(2, -1)[-1],
    lambda x: [t.shape for t in x.chunk(3, -1)],
    lambda x: [t.shape for t in x.split(2, -1)],
    lambda x: [t.shape for t in x.split(x.size(-1), -1)],
])
def test_chunk_and_split_on_sizes_that_can_be_zero(fn, dynamic):
    check_vs_eager(fn, [(torch.randn(3, n),) for n in (4, 5, 7, 0, 1, 2, 0, 6)], dynamic=dynamic)


def test_a_guard_that_divides_by_a_size_fails_instead_of_raising():
    from dynashape.symbolic.guard_output import compile_guards, ShapeGuard
    fn = compile_guards([ShapeGuard("10 // L['n'] == 2")])
    assert fn({"n": 5}) and not fn({"n": 0}) and not fn({})

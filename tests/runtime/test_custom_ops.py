"""Custom operators (torch.library.custom_op) inside compiled functions, against eager and against
torch.compile's graph counts on the same calls (issue 22: PyTorch's contract where users rely on it)."""
import pytest
import torch

import dynashape as ds
from tests.custom_ops import nofake, rows
from tests.oracle import check_vs_eager, torch_compile_graphs

NS = "ds_test_rt"


@torch.library.custom_op(f"{NS}::positive", mutates_args=())
def positive(x: torch.Tensor) -> torch.Tensor:
    return x[x > 0].clone()


@positive.register_fake
def _(x):
    return x.new_empty(torch.library.get_ctx().new_dynamic_size())


@torch.library.custom_op(f"{NS}::nz", mutates_args=())
def nz(x: torch.Tensor) -> torch.Tensor:
    return x.nonzero()


@nz.register_fake
def _(x):
    return x.new_empty(torch.library.get_ctx().new_dynamic_size(), x.dim(), dtype=torch.int64)


@torch.library.custom_op(f"{NS}::relu", mutates_args=())
def relu(x: torch.Tensor) -> torch.Tensor:
    return x.clamp_min(0)


@relu.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op(f"{NS}::doubled", mutates_args=())
def doubled(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.cat([x, x]), x.sum(0)


@doubled.register_fake
def _(x):
    return x.new_empty(x.shape[0] * 2, *x.shape[1:]), x.new_empty(x.shape[1:])


@torch.library.custom_op(f"{NS}::scale", mutates_args=())
def scale(x: torch.Tensor, k: float) -> torch.Tensor:
    return x * k


@scale.register_fake
def _(x, k):
    return torch.empty_like(x)


scale.register_autograd(lambda ctx, g: (g * ctx.k * 10, None),  # not the true gradient: shows whose runs
                        setup_context=lambda ctx, inputs, output: setattr(ctx, "k", inputs[1]))


@torch.library.custom_op(f"{NS}::bump", mutates_args=("x",))
def bump(x: torch.Tensor) -> None:
    x.add_(1)


@torch.library.custom_op(f"{NS}::shorter", mutates_args=())
def shorter(x: torch.Tensor) -> torch.Tensor:
    return x[1:].clone()


@shorter.register_fake
def _(x):
    return torch.empty_like(x)  # wrong: the op returns one row fewer


def _vectors(sizes=(5, 7, 9, 4, 6)):
    return [(torch.randn(n),) for n in sizes]


def _matrices(sizes=(5, 7, 9, 4, 6)):
    return [(torch.randn(n, 3),) for n in sizes]


def _same_count_as_torch(fn, cases, dynamic=None, **kw):
    ours = check_vs_eager(fn, cases, dynamic=dynamic, **kw)
    # torch.compile graph-breaks on data-dependent output sizes unless told to capture them; we capture
    # them by default (README: data-dependent shapes), so the peer is asked to as well
    theirs = torch_compile_graphs(fn, [tuple(a.clone() for a in c) for c in cases], dynamic=dynamic,
                                  dynamo_config={"capture_dynamic_output_shape_ops": True})
    assert ours.stats.compiles == theirs, (ours.stats.compiles, theirs, ours.stats.recompile_reasons)
    return ours


def test_a_custom_filter_with_a_size_from_data_is_an_unbacked_size_as_nonzero():
    def f(x):
        y = positive(x)
        return y.sum() + y.numel(), torch.cat([y, y])

    cf = _same_count_as_torch(f, _vectors())
    assert "f32[u0] = torch.ops.ds_test_rt.positive.default(%x)" in str(cf.entries[0].graph)


def test_a_custom_row_filter_feeds_view_sum_and_cat():
    def f(x):
        y = rows(x)
        return y.view(-1, x.shape[1]).sum(0), y.view(-1) * 2, torch.cat([y, x])

    cf = _same_count_as_torch(f, _matrices() + [(-torch.ones(3, 3),)])
    assert "f32[u0, 3]" in str(cf.entries[0].graph)


def test_a_custom_nonzero_called_through_its_packet_returns_its_size():
    def f(x):
        i = torch.ops.ds_test_rt.nz(x)
        return i.shape[0], i + 1

    _same_count_as_torch(f, _matrices())


def test_a_custom_op_with_a_plain_fake_keeps_its_input_dynamic():
    # its shape comes from the fake, traced symbolically: no specialization (was 3 compiles here)
    def f(x):
        return relu(x) + 1

    cf = _same_count_as_torch(f, _vectors())
    assert cf.stats.fallbacks == []


def test_size_arithmetic_in_a_fake_gives_symbolic_shapes():
    def f(x):
        a, b = doubled(x)
        return a * 2 + 1, b.sum()

    cf = _same_count_as_torch(f, _matrices(), dynamic=True)
    assert "f32[2*s0, s1]" in str(cf.entries[0].graph)


def test_a_custom_op_runs_its_own_registered_backward():
    def f(x):
        return scale(x, 3.0).relu().sum()

    check_vs_eager(f, [(torch.randn(n, 3, requires_grad=True),) for n in (5, 7, 9)], dynamic=None, compiles=2,
                   grad=True)


def test_a_custom_op_that_changes_its_argument_is_not_run_again_by_speculation():
    # the call may not re-run from its start after the op changed x (it ran twice: x + 2)
    def f(x):
        bump(x)
        if x.sum() > 0:
            return x * 2
        return x - 1

    cf = ds.compile(f)
    for v, n in ((1.0, 4), (-5.0, 4), (1.0, 5), (-5.0, 6)):
        x, x2 = torch.full((n,), v), torch.full((n,), v)
        torch.testing.assert_close(cf(x), f(x2))
        torch.testing.assert_close(x, x2)
    assert "changes an input" in cf.stats.graph_breaks[0]


def test_a_custom_op_that_only_changes_its_argument_needs_no_fake_and_stays_dynamic():
    def f(x):
        bump(x)
        return x * 2

    cf = _same_count_as_torch(f, _vectors())
    assert cf.stats.fallbacks == []


def test_a_custom_op_that_changes_one_of_two_aliased_arguments_matches_eager():
    @torch.library.custom_op(f"{NS}::accumulate", mutates_args=("y",))
    def accumulate(x: torch.Tensor, y: torch.Tensor) -> None:
        y.add_(x)

    def f(x, y):
        accumulate(x, y)
        return y * 2 + x

    cf = ds.compile(f)
    for same in (False, True, False):
        x, y = torch.ones(4), torch.ones(4)
        x2, y2 = x.clone(), y.clone()
        if same:
            x, x2 = y, y2
        torch.testing.assert_close(cf(x, y), f(x2, y2))
        torch.testing.assert_close(y, y2)


def test_a_custom_op_without_a_fake_is_a_graph_break_that_says_to_register_one():
    def f(x):
        return nofake(x) + 1

    cf = ds.compile(f)
    for (x,) in _vectors((5, 7)):
        torch.testing.assert_close(cf(x), f(x))
    reason = cf.stats.graph_breaks[0]
    assert "torch.ops.ds_test.nofake.default has no fake implementation" in reason
    assert 'register a fake with torch.library.register_fake("ds_test::nofake")' in reason
    with pytest.raises(ds.GraphBreakError, match="register a fake with torch.library.register_fake"):
        ds.compile(f, fullgraph=True)(torch.randn(3))


def test_a_library_op_without_a_meta_kernel_is_a_graph_break_too():
    lib = torch.library.Library(NS, "FRAGMENT")
    lib.define("triple(Tensor x) -> Tensor")
    lib.impl("triple", lambda x: x * 3, "CPU")

    def f(x):
        return torch.ops.ds_test_rt.triple(x) - 1

    cf = ds.compile(f)
    x = torch.randn(4)
    torch.testing.assert_close(cf(x), f(x))
    assert 'torch.library.register_fake("ds_test_rt::triple")' in cf.stats.graph_breaks[0]


def test_a_fake_that_disagrees_with_its_op_raises_instead_of_answering():
    def f(x):
        return shorter(x).sum() + shorter(x).numel()  # the fake's numel would be wrong by 3

    cf = ds.compile(f)
    with pytest.raises(RuntimeError, match=r"ds_test_rt::shorter returned a tensor of shape \(4, 3\).*its fake said "
                                           r"\(5, 3\).*torch.library.register_fake"):
        cf(torch.randn(5, 3))


@torch.library.custom_op(f"{NS}::nzfake", mutates_args=())
def nzfake(x: torch.Tensor) -> torch.Tensor:
    return x[x > 0].clone()


@nzfake.register_fake
def _(x):
    return x.new_empty(x.nonzero().shape[0])  # a size from data not made by new_dynamic_size()


def test_a_fake_that_sizes_its_output_from_data_another_way_is_a_graph_break():
    def f(x):
        return nzfake(x) * 2

    cf = ds.compile(f)
    for (x,) in _vectors((5, 6)):
        torch.testing.assert_close(cf(x), f(x))
    assert "neither from its arguments nor from new_dynamic_size()" in cf.stats.graph_breaks[0]

"""Export of custom operators (torch.library.custom_op): a fake's new_dynamic_size() is an unbacked
size in range_constraints, the program runs the real op on new shapes, saves and loads by the op's
name; an op without a fake is an error that says to register one, as in torch.export. Oracles: eager,
and torch.export's outcome on the same program."""
import pytest
import torch

import dynashape as ds
from dynashape import Dim
from dynashape.export.allowlist import LoadError, resolve_target
from tests.custom_ops import nofake, rows
from tests.export.common import check_vs_eager

NS = "ds_test_export"


@torch.library.custom_op(f"{NS}::shift", mutates_args=())
def shift(x: torch.Tensor, k: int) -> torch.Tensor:
    return x + k


@shift.register_fake
def _(x, k):
    return torch.empty_like(x)


class Filtered(torch.nn.Module):
    def forward(self, x):
        y = rows(x)
        return y.view(-1, x.shape[1]).sum(0), torch.cat([y, x]) * 2, y.shape[0]


class Shifted(torch.nn.Module):
    def forward(self, x):
        return shift(x, 3).relu()


class NoFake(torch.nn.Module):
    def forward(self, x):
        return nofake(x) + 1


def _torch_export(m, args, dynamic_shapes):
    return torch.export.export(m, args, dynamic_shapes=dynamic_shapes)


def test_a_custom_filter_exports_with_an_unbacked_size_as_in_torch_export():
    x = torch.randn(6, 3)
    spec = {"x": {0: Dim("n")}}
    theirs = _torch_export(Filtered(), (x,), {"x": {0: torch.export.Dim("n")}})
    assert any(str(s).startswith("u") for s in theirs.range_constraints)
    ep = ds.export(Filtered(), (x,), dynamic_shapes=spec)
    assert ep.range_constraints["u0"] == (0, float("inf"))
    check_vs_eager(ep, Filtered(), (x,), extra=[(torch.randn(9, 3),), (-torch.ones(4, 3),)])


def test_a_custom_op_with_a_plain_fake_keeps_the_dim_dynamic():
    x = torch.randn(6, 4)
    _torch_export(Shifted(), (x,), {"x": {0: torch.export.Dim("n")}})
    ep = ds.export(Shifted(), (x,), dynamic_shapes={"x": {0: Dim("n")}})
    assert set(ep.range_constraints) == {"s0"}
    check_vs_eager(ep, Shifted(), (x,), extra=[(torch.randn(11, 4),)])


def test_exporting_a_custom_op_without_a_fake_says_to_register_one():
    with pytest.raises(RuntimeError, match="no fake impl"):
        _torch_export(NoFake(), (torch.randn(4),), None)
    with pytest.raises(ds.GraphBreakError, match=r'register a fake with torch.library.register_fake\("ds_test::nofake"\)'):
        ds.export(NoFake(), (torch.randn(4),))


def test_loading_names_only_custom_ops_this_process_registered_with_a_fake():
    assert resolve_target("torch.ops.ds_test.rows.default") is torch.ops.ds_test.rows.default
    for name in (f"torch.ops.{NS}.missing.default", "torch.ops.ds_test.nofake.default",
                 "torch.ops.load_library.x.default", "torch.ops.profiler._record_function_enter.default"):
        with pytest.raises(LoadError, match="custom operator this process has not registered"):
            resolve_target(name)

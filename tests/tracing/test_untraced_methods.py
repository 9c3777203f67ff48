"""Tensor methods whose binding skips __torch_function__ (torch 2.x's `Tensor.set_`): the
TracingMode never saw them, so they ran on the FakeTensor's meta storage, unrecorded.
tensor_attrs.route_to_mode gives FakeTensor its own method for each; `set_` is then a graph
break naming the user's line, and the call runs as eager."""
import torch

import dynashape as ds
from dynashape.tracing.fake import FakeTensor
from dynashape.tracing.tensor_attrs import NO_TORCH_FUNCTION, classify


class _Seen(torch.overrides.TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.funcs = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.funcs.append(func)
        raise StopIteration  # the call reached the mode: nothing more to learn


def _reaches_the_mode(name) -> bool | None:
    """Whether `x.<name>(...)` dispatches to a TorchFunctionMode (None: no argument list fits)."""
    for args in ((), (1,), (0,), (0, 1), ("x",), ("x", "x"), (1, 1), ([3, 3],), ((3, 3), (3, 1))):
        x = torch.randn(3, 3)
        args = tuple(x.clone() if a == "x" else a for a in args)
        seen = _Seen()
        with seen:
            try:
                if getattr(x, name)(*args) is NotImplemented:
                    continue
            except StopIteration:
                return True
            except Exception:  # noqa: BLE001 - these arguments do not fit: try the next
                if seen.funcs:
                    return True
                continue
        return bool(seen.funcs)
    return None


def test_every_tensor_op_method_reaches_the_mode_or_is_routed_to_it():
    # a new PyTorch whose binding skips __torch_function__ for another op fails here: add it to
    # tensor_attrs.NO_TORCH_FUNCTION
    ops = [n for n in dir(torch.Tensor) if classify(n) == "op" and callable(getattr(torch.Tensor, n))]
    skipped = [n for n in ops if _reaches_the_mode(n) is False]
    assert sorted(skipped) == sorted(NO_TORCH_FUNCTION)
    for name in NO_TORCH_FUNCTION:
        assert name in FakeTensor.__dict__


def _check(fn, make, n_calls=3):
    cf = ds.compile(fn, backend="eager")
    for _ in range(n_calls):
        a, b = make(), make()
        want, got = fn(*a), cf(*b)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(b, a)
    return cf


def test_set_of_a_traced_tensor_is_a_graph_break_naming_the_line():
    def replaced(x, y):
        x.set_(y)
        return x + 0, x.shape

    def written_through(x, y):
        x.set_(y)
        x.mul_(10)  # eager writes y's memory
        return y * 1

    def emptied(x):
        x.set_()
        return x.numel()
    two = lambda: (torch.zeros(4), torch.arange(6.0))  # noqa: E731
    for fn in (replaced, written_through):
        cf = _check(fn, two)
        assert cf.stats.graph_breaks and "Tensor.set_" in cf.stats.graph_breaks[0]
        assert "x.set_(" in cf.stats.graph_breaks[0]  # the user's line
    cf = _check(emptied, lambda: (torch.arange(12.0).reshape(3, 4),))
    assert "Tensor.set_" in cf.stats.graph_breaks[0]

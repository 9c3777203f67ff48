"""A region never spans a call that writes a tensor (schedule._is_barrier asks tracing/writes.py):
running statistics of a training batch_norm, embedding's max_norm renorm, `inplace=True`."""
import torch
import torch.nn.functional as F

import dynashape as ds
from .oracle import regions


def _run(fn, make):
    cf = ds.compile(fn, dynamic=True, backend="fused")
    for n in (3, 5):
        torch.manual_seed(n)
        a = make(n)
        torch.manual_seed(n)
        b = make(n)
        torch.testing.assert_close(cf(*b), fn(*a))
        torch.testing.assert_close(b, a)
    return cf


def test_reads_of_a_running_mean_before_and_after_batch_norm_are_not_one_region():
    def f(x, rm, rv):
        a = (rm * 2).exp()
        y = F.batch_norm(x, rm, rv, training=True, momentum=0.5)
        return y * (a - rm)
    cf = _run(f, lambda n: (torch.randn(n, 4), torch.randn(4), torch.ones(4)))
    assert not any("sub" in r and "exp" in r for r in regions(cf))


def test_reads_of_a_weight_around_embedding_max_norm_are_not_one_region():
    def f(i, w):
        a = (w * 2).exp()
        y = F.embedding(i, w, max_norm=1.0)
        return y.sum(), a - w
    cf = _run(f, lambda n: (torch.randint(0, 6, (n,)), torch.randn(6, 4) * 3))
    assert not any("sub" in r and "exp" in r for r in regions(cf))

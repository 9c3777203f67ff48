"""The Triton kernels of the main region kinds compile for an H100 (sm_90) on this GPU-less machine
(sm90.py): what Triton's interpreter, which runs them here, does not check. Skipped only where
triton or its NVIDIA backend is not installed."""
import pytest
import torch
import torch.nn.functional as F

import dynashape as ds

from . import sm90
from .oracle import check_fused

pytestmark = [pytest.mark.skipif(sm90.available() is not None, reason=f"sm_90 compiles: {sm90.available()}"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]


def _pointwise(x, w):
    return torch.sigmoid(F.silu(x * w) - 0.5).clamp_min(0.1) * x.abs().sqrt()


def _rows(x, w):
    return F.layer_norm(x * 2, x.shape[-1:], w).relu() + x, (x + 1).log_softmax(-1), (x - 1).var(-1)


def _columns(x, w):
    return (x * w).sum(0), (x + 1).mean()


def _xent(x, w):
    t = (x[:, 0].abs() * 3).long() % x.shape[1]
    return F.cross_entropy(x * w, t), F.cross_entropy(x, t, reduction="none", ignore_index=1)


def _int_ops(x, w):
    i = (x * 10).long()
    return (i // 3) % 5 + (i & 6), torch.where(x > 0, x, w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_main_kernel_kinds_compile_for_an_h100(tmp_path, dtype):
    record = sm90.Recorder(str(tmp_path / "launches.jsonl"))
    undo = record.install()
    try:
        with ds.config.patch(triton="cpu", fused_sync=True):
            norm = torch.nn.RMSNorm(40, eps=1e-6, dtype=dtype)  # its eps a float symbol: a float32 argument
            for f in (_pointwise, _rows, _columns, _xent, _int_ops, lambda x, w: norm(x * w) + 1):
                for n, d in ((3, 40), (9, 40)):
                    check_fused(f, [(torch.randn(n, d, dtype=dtype), torch.randn(d, dtype=dtype))], fused=False,
                                rtol=2e-2, atol=2e-2)
    finally:
        undo()
    assert len(record.seen) >= 5, "too few Triton launches were recorded: the kernels ran otherwise"
    failed = sm90.compile_file(record.path)
    assert not failed, "\n\n".join(f"{r['kw']} {r['args']}\n{r['source']}\n{e}" for r, e in failed)


def test_arithmetic_is_not_contracted_into_fused_multiply_adds(tmp_path):
    """Eager rounds x * w and then the sum; one fma rounds once, which can move a comparison or an
    integer cast of the sum off eager's (triton_run.OPTIONS turns Triton's contraction off)."""
    record = sm90.Recorder(str(tmp_path / "launches.jsonl"))
    undo = record.install()
    try:
        with ds.config.patch(triton="cpu", fused_sync=True):
            check_fused(lambda x, w: ((x * w + 1) * x - w * 3 > 0.5, (x * 3 + w).sum(-1)),
                        [(torch.randn(5, 40), torch.randn(40))])
    finally:
        undo()
    assert record.seen
    failed = sm90.compile_file(record.path, forbid=r"fma\.rn")
    assert not failed, [e for _, e in failed]

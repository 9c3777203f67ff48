"""The autocast probe (dynashape/tracing/autocast.py): ops whose composite implementation decides
between `view` and a copy by its inputs' strides are traced under autocast, not graph-broken."""
import pytest
import torch
import torch.nn.functional as F

import dynashape as ds


@pytest.mark.parametrize("gqa", [False, True], ids=["mha", "gqa"])
def test_sdpa_on_transposed_inputs_under_autocast(gqa):
    # HF Llama's attention: q, k, v are (B, T, H, D) viewed and transposed to (B, H, T, D); under
    # CPU autocast sdpa's math path reshapes them for bmm. Probed on stride-0 stand-ins, that
    # reshape took `view`, which the real (transposed) strides refuse: the whole call graph-broke.
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa).sum(-1)

    cf = ds.compile(f, dynamic=True)
    kv_heads = 2 if gqa else 4
    for t in (6, 9, 5):
        q = torch.randn(2, t, 4, 16).transpose(1, 2).requires_grad_()
        k = torch.randn(2, t, kv_heads, 16).transpose(1, 2)
        q_c = q.detach().clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ref = f(q, k, k)
            out = cf(q_c, k, k)
        assert out.dtype == ref.dtype == torch.bfloat16
        torch.testing.assert_close(out, ref, rtol=0, atol=0)
        ref.float().sum().backward()
        out.float().sum().backward()
        torch.testing.assert_close(q_c.grad, q.grad, rtol=0, atol=0)
    assert cf.stats.graph_breaks == []
    assert cf.stats.compiles == 1

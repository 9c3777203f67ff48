"""Devices while tracing on meta: `.to(device)`, `.cpu()` and `.cuda()` run on meta tensors, the
device is remembered apart (FakeTensor.ds_device)."""
from __future__ import annotations

import torch

# .cpu()/.cuda() cannot copy a meta tensor; on meta they are views (the device is tracked apart)
def _move_to(kind):
    """.cpu()/.cuda() on meta: the same tensor when it is there already (as eager), else a copy."""
    def impl(t, *a, **k):
        dev = getattr(t, "ds_device", None)
        return t if dev is not None and dev.type == kind else t.to(copy=True)
    return impl


META_IMPL = {torch.Tensor.cpu: _move_to("cpu"), torch.Tensor.cuda: _move_to("cuda")}


def meta_to(func, args, kwargs, device):
    """`.to(device)`/`.cpu()`/`.cuda()` run on meta: strip the device, remember it."""
    if func is torch.Tensor.cpu:
        return (args[0],), {}, torch.device("cpu")
    if func is torch.Tensor.cuda:
        return (args[0],), {}, torch.device("cuda")
    new = []
    for a in args:
        if isinstance(a, (torch.device, str)) and not isinstance(a, torch.dtype):
            device = torch.device(a)
            a = "meta"
        new.append(a)
    return tuple(new), kwargs, device

"""Custom operators the tests share (torch.library registers a name once per process)."""
import torch

NS = "ds_test"


@torch.library.custom_op(f"{NS}::rows", mutates_args=())
def rows(x: torch.Tensor) -> torch.Tensor:
    """The rows of x whose sum is positive: as many as the data says."""
    return x[x.sum(1) > 0].clone()


@rows.register_fake
def _(x):
    return x.new_empty(torch.library.get_ctx().new_dynamic_size(), x.shape[1])


@torch.library.custom_op(f"{NS}::nofake", mutates_args=())
def nofake(x: torch.Tensor) -> torch.Tensor:
    """An operator registered without a fake."""
    return x * 2

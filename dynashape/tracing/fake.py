"""FakeTensor: a meta tensor of the example's shape that carries symbolic sizes.

It is a real `torch.Tensor` subclass (so `isinstance(x, torch.Tensor)` and nn
code work) whose storage is on the `meta` device: no data, no compute. Its
own `__torch_function__` is disabled; the TracingMode sees every call first.
"""
from __future__ import annotations

import sys

import torch

from ..symbolic.symtypes import SymBase
from ..symbolic.userloc import is_library_file, is_ours


class FakeTensor(torch.Tensor):
    __torch_function__ = torch._C._disabled_torch_function_impl

    # set by `make_fake`:
    #   ds_sizes: tuple[int | SymInt, ...]   symbolic sizes (hint == meta shape)
    #   ds_node:  ir Node                      the graph value this tensor is
    #   ds_device: torch.device                the device the real tensor lives on
    #   ds_view:   (computed tensors) a view of another tensor: its strides follow its base's
    #   ds_may_alias: (computed tensors) False when it is fresh memory (no input's, at any call); inputs
    #              and tensors without the attribute may alias an input
    #   ds_same_as: (computed tensors) the fake an op returned as it is on the example (`x.contiguous()`):
    #              eager returns that very object there, so its autograd state is that fake's
    #   ds_grad_fn: (computed tensors) eager's grad_fn name where the meta run cannot record it
    #              (data-dependent ops)
    #
    # An op's own meta output becomes its fake (`make_fake` changes its class), so the autograd
    # history torch recorded on meta (`grad_fn`, `is_leaf`, `_is_view`, `_base`, `_version`,
    # `output_nr`) is eager's for the same sequence of ops.

    @staticmethod
    def __new__(cls, meta: torch.Tensor, *a, **k):
        return torch.Tensor._make_subclass(cls, meta, meta.requires_grad)

    def __init__(self, meta, sizes, node, device, tracer):
        self.ds_sizes = tuple(sizes)
        self.ds_node = node
        self.ds_device = device
        # (no reference to the tracer: a fake that an autograd node of the trace holds is out of the
        # collector's sight, and a cycle through it kept the tracer and the caller's tensors it holds)

    def __repr__(self) -> str:
        if torch._C._len_torch_function_stack() > 0:  # the user's code prints a tensor mid-trace
            from ..symbolic.userloc import user_location
            from .errors import GraphBreak
            raise GraphBreak("printing a tensor (its values are not known while tracing)", user_location(),
                             "What to do: print outside the compiled function, or return the value.")
        shape = ", ".join(str(s) if not isinstance(s, SymBase) else str(s.node) for s in self.ds_sizes)
        return f"FakeTensor({str(self.dtype).replace('torch.', '')}[{shape}], node=%{self.ds_node.name})"

    __str__ = __repr__

    def _use_count(self):  # not a torch function: the mode never sees it
        from ..symbolic.userloc import user_location
        from .errors import GraphBreak
        raise GraphBreak("Tensor._use_count cannot be answered while tracing (it is the real tensor's)",
                         user_location(), "What to do: read it outside the compiled function.")

    def __format__(self, spec):
        return self.__repr__()

    def __getattr__(self, name):  # (only for what the stand-in does not have: the user's own attributes)
        if name[:2] != "__" and name[:3] != "ds_" and _users_frame(sys._getframe(1)):
            from .errors import GraphBreak
            from ..symbolic.userloc import user_location
            raise GraphBreak(f"`.{name}`, an attribute of your own on a tensor, read while tracing (the trace "
                             "stands in for the caller's tensor, whose attributes are not guarded)", user_location(),
                             "What to do: pass the value as an argument instead of an attribute of the tensor.")
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name, value):
        if name == "_is_param":  # nn.Parameter(t) of a traced value (torch marks a subclass's so)
            from .errors import GraphBreak
            from ..symbolic.userloc import user_location
            raise GraphBreak("an nn.Parameter made in the function (eager's is a new leaf that the gradient "
                             "reaches; the compiled code would make it apart from the graph)", user_location(),
                             "The call runs eagerly (a module that makes its parameters on its first call "
                             "compiles from the next one on).")
        if name[:3] != "ds_" and not hasattr(torch.Tensor, name) and _users_frame(sys._getframe(1)):
            from .errors import GraphBreak
            from ..symbolic.userloc import user_location
            raise GraphBreak(f"`.{name} = ...`, an attribute of your own set on a tensor while tracing (the compiled "
                             "code would not set it on the caller's tensor)", user_location(),
                             "What to do: keep the value elsewhere (a dict, an attribute of a module).")
        torch.Tensor.__setattr__(self, name, value)

    def __hash__(self):  # (torch's Tensor.__hash__ is id(self), with no torch function to intercept)
        if _users_frame(sys._getframe(1)):  # (a library's bookkeeping, or ours, goes on)
            from .identity import refuse_user_hash
            refuse_user_hash()
        return id(self)

    @property
    def __class__(self):
        """`x.__class__` in the user's code is the class of the tensor it stands for, as `type(x)` is
        there (tracing/pyenv.py user_type): `x.__class__ is torch.Tensor` took the other branch, and
        `isinstance(p, nn.Parameter)` asks it too. Library code and ours see FakeTensor."""
        if not _users_frame(sys._getframe(1)):
            return FakeTensor
        from .pyenv import user_type  # (pyenv imports this module)
        return user_type(self)


def _users_frame(f) -> bool:
    name = f.f_code.co_filename
    return not is_library_file(name) and not is_ours(name)


def make_fake(meta: torch.Tensor, sizes, node, device, tracer) -> FakeTensor:
    if meta.device.type != "meta":
        meta = meta.to("meta")
    if type(meta) is torch.Tensor:  # an op's output: it becomes the fake, autograd history and all
        meta.__class__ = FakeTensor
        FakeTensor.__init__(meta, meta, sizes, node, device, tracer)
        return meta
    fake = FakeTensor(meta, sizes, node, device, tracer)
    if isinstance(meta, FakeTensor):  # an op returned its input as it is (on this example)
        fake.ds_same_as = getattr(meta, "ds_same_as", meta)
    return fake


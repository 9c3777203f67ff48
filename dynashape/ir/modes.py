"""Inference mode and autocast in generated code: switched where the traced code switched them.

Each call node records the modes it ran under (`Node.modes`: None, or (inference mode, autocast
state) as `tracing.meta_cache.modes_now` gives). The code a graph compiles to switches them at the
calls where they change, and leaves them as it found them on return (or on an exception):

    _modes = _switch_modes(_modes, (True, ((False, torch.bfloat16), (False, torch.float16))))
    ...
    _exit_modes(_modes)   # in `finally`

Grad mode is switched apart (`torch._C._set_grad_enabled`), after the modes: leaving inference
mode restores the grad mode it was entered with.
"""
from __future__ import annotations

import torch

_DEVICES = ("cpu", "cuda")


_OFF = (False, tuple((False, None) for _ in _DEVICES))


def exit_modes(entered) -> None:
    """Exit the contexts a switch entered, last first: the caller's modes again."""
    if entered:
        for cm in reversed(entered):
            cm.__exit__(None, None, None)


def switch_modes(entered, target):
    """Exit the contexts entered at the last switch (`entered`), then enter those that make the
    modes `target` (None: inference mode and autocast off) from the caller's. Returns what it entered."""
    exit_modes(entered)
    out: list = []
    inference, autocast = target if target is not None else _OFF
    if inference != torch.is_inference_mode_enabled():
        cm = torch.inference_mode(inference)
        cm.__enter__()
        out.append(cm)
    for dev, (on, dtype) in zip(_DEVICES, autocast):
        now_on = torch.is_autocast_enabled(dev)
        if now_on != on or (on and torch.get_autocast_dtype(dev) != dtype):
            cm = torch.autocast(dev, dtype=dtype, enabled=on)
            cm.__enter__()
            out.append(cm)
    return out


def describe(modes) -> str:
    """`[inference_mode, autocast(cpu, bfloat16)]` for printed graphs."""
    if modes is None:
        return ""
    inference, autocast = modes
    parts = ["inference_mode"] if inference else []
    parts += [f"autocast({dev}, {str(dtype).replace('torch.', '')})"
              for dev, (on, dtype) in zip(_DEVICES, autocast) if on]
    return f"  [{', '.join(parts)}]" if parts else ""


__all__ = ["describe", "exit_modes", "switch_modes"]

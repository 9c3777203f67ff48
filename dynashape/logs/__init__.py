"""Loggers under `dynashape.*`, switched on by `DYNASHAPE_LOGS` or `set_logs`; the structured
compile trace (`DYNASHAPE_TRACE=dir`, `trace.py`) and its HTML report (`report.py`).

`DYNASHAPE_LOGS=dynamic,guards` logs symbol creation/guards (INFO) and guard lists;
a leading `+` means DEBUG (`+dynamic`). Known names: dynamic, guards, recompiles,
graph, graph_breaks, pgo.
"""
from __future__ import annotations

import logging
import os
import sys

NAMES = ("dynamic", "guards", "recompiles", "graph", "graph_breaks", "pgo")
_handler: logging.Handler | None = None


def set_logs(spec: str | None = None, **levels) -> None:
    """`set_logs("dynamic,+guards")` or `set_logs(dynamic=True, graph=logging.DEBUG)`."""
    global _handler
    wanted: dict[str, int] = {}
    for part in (spec or "").split(","):
        part = part.strip()
        if not part:
            continue
        level = logging.DEBUG if part.startswith("+") else logging.INFO
        name = part.lstrip("+-")
        if name not in NAMES:
            raise ValueError(f"unknown log name {name!r} in DYNASHAPE_LOGS; known: {', '.join(NAMES)}")
        wanted[name] = level
    for name, v in levels.items():
        if name not in NAMES:
            raise ValueError(f"unknown log name {name!r}; known: {', '.join(NAMES)}")
        if v:
            wanted[name] = logging.INFO if v is True else int(v)
    if _handler is None:
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("[dynashape.%(short)s] %(message)s"))
        _handler.addFilter(_short_name)
    for name in NAMES:
        logger = logging.getLogger(f"dynashape.{name}")
        if name in wanted:
            logger.setLevel(wanted[name])
            if _handler not in logger.handlers:
                logger.addHandler(_handler)
            logger.propagate = False
        elif _handler in logger.handlers:
            logger.removeHandler(_handler)
            logger.setLevel(logging.NOTSET)
            logger.propagate = True


def _short_name(record) -> bool:
    record.short = record.name.split(".", 1)[-1]
    return True


def configure_from_env() -> None:
    from . import trace
    trace.install()  # the trace writes only while config.trace_dir / DYNASHAPE_TRACE is set
    spec = os.environ.get("DYNASHAPE_LOGS")
    if spec:
        set_logs(spec)

"""Fused-backend tests: one kernel cache per session (a kernel compiles once per run, not once
per test) and synchronous compiles, so every call after the first compile runs the kernels."""
import pytest

import dynashape as ds


@pytest.fixture(autouse=True)
def _fused_sync(_kernel_dir):
    with ds.config.patch(fused_sync=True, fused_cache_dir=_kernel_dir):
        yield

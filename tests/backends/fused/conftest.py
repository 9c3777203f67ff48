"""Fused-backend tests: one kernel cache per session (a kernel compiles once per run, not once
per test) and synchronous compiles, so every call after the first compile runs the kernels."""
import pytest

import dynashape as ds


@pytest.fixture(autouse=True)
def _fused_sync(_kernel_dir):
    with ds.config.patch(fused_sync=True, fused_cache_dir=_kernel_dir):
        yield


@pytest.fixture
def gemm_on():
    """Matrix products through brgemm (config.fused_gemm="on"), or the test skipped where there is none."""
    from dynashape.backends.fused import gemm
    if gemm._load() is None:
        pytest.skip("this torch has no float brgemm, or the library does not build")
    with ds.config.patch(fused_gemm="on"):
        yield

"""Shared fixtures: every test gets its own PGO store, so no test reads another's profiles and
the suite never writes profiles into the user's home directory.

DYNASHAPE_TEST_BACKEND=fused runs the whole suite with `ds.compile`'s default backend set to
"fused" (kernels built before the first call returns, one kernel cache for the session); tests
that name a backend keep theirs. DYNASHAPE_TEST_TRITON=cpu runs every fused region of the suite
as a Triton kernel (in Triton's interpreter where there is no GPU); DYNASHAPE_TEST_SM90=FILE records
each Triton launch there for tests/backends/fused/sm90.py to compile for an H100."""
import os
import random
import zlib

import pytest
import torch

import dynashape as ds

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # no GPU: the Triton kernels the suite builds run on CPU tensors

if os.environ.get("DYNASHAPE_TEST_SM90"):  # record every Triton launch, to compile for an H100 after
    from tests.backends.fused.sm90 import Recorder
    Recorder(os.environ["DYNASHAPE_TEST_SM90"]).install()

TEST_BACKEND = os.environ.get("DYNASHAPE_TEST_BACKEND") or ds.config.backend
TEST_TRITON = os.environ.get("DYNASHAPE_TEST_TRITON") or ds.config.triton


def pytest_report_header(config):
    return f"dynashape backend: {TEST_BACKEND}"


@pytest.fixture(scope="session")
def _kernel_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("kernels"))


@pytest.fixture(autouse=True)
def _seeded_by_name(request):
    """Each test's random data from its own name, whichever tests ran before it on its worker (under
    pytest-xdist the order varies from run to run: a test left unseeded saw other data on a CI run)."""
    seed = zlib.crc32(request.node.nodeid.encode())
    torch.manual_seed(seed)
    random.seed(seed)


@pytest.fixture(autouse=True)
def _isolated_pgo_store(tmp_path_factory, _kernel_dir):
    with ds.config.patch(pgo_dir=str(tmp_path_factory.mktemp("pgo")), pgo_remote="", job_id="",
                         backend=TEST_BACKEND, fused_sync=TEST_BACKEND == "fused", fused_cache_dir=_kernel_dir,
                         triton=TEST_TRITON):
        yield


def _find_fake(roots, limit=20000, meta_ok=False):
    """The path to a FakeTensor or symbolic value (or meta tensor, unless `meta_ok`) reachable from
    `roots`, or None."""
    import torch
    from dynashape.symbolic.symtypes import SymBase
    from dynashape.tracing.fake import FakeTensor
    seen, todo = set(), list(roots)
    while todo and len(seen) < limit:
        path, v = todo.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, (FakeTensor, SymBase)) or (
                not meta_ok and isinstance(v, torch.Tensor) and v.device.type == "meta"):
            return path
        if isinstance(v, torch.Tensor) or isinstance(v, (str, bytes, int, float, type)) or path.count(".") > 8:
            continue
        if isinstance(v, (list, tuple, set, frozenset)):
            todo += [(f"{path}[{i}]", x) for i, x in enumerate(v)]
        elif isinstance(v, dict):
            todo += [(f"{path}[{k!r}]", x) for k, x in v.items() if not (isinstance(k, str) and k.startswith("__"))]
        elif hasattr(v, "__dict__") and type(v).__module__ not in ("builtins",) \
                and not type(v).__module__.startswith(("dynashape", "sympy", "torch._")):
            try:
                todo += [(f"{path}.{k}", x) for k, x in vars(v).items()]
            except TypeError:
                pass
    return None


@pytest.fixture(autouse=True)
def _nothing_of_a_trace_escapes(monkeypatch, request):
    """After every compile in the suite: no FakeTensor or symbolic value in what the call returned,
    in its arguments (and the modules and objects they hold), or in the globals the function names."""
    from dynashape.runtime.compile import CompiledFunction
    orig = CompiledFunction._compile_and_run

    def checked(self, L, args, kwargs, **opts):
        out = orig(self, L, args, kwargs, **opts)
        roots = [("output", out)] + [(f"argument {k}", v) for k, v in L.items()]
        roots += [(f"global {n}", self._globals[n]) for n in self._co_names
                  if n in self._globals and not isinstance(self._globals[n], type(pytest))]
        where = _find_fake(roots, meta_ok=request.node.get_closest_marker("meta_device") is not None)
        assert where is None, f"a trace-time value escaped into {where}"
        return out

    monkeypatch.setattr(CompiledFunction, "_compile_and_run", checked)
    yield

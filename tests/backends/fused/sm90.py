"""Compile the Triton kernels a CPU run launched for an H100 (sm_90), with no GPU.

Triton's interpreter, which runs the suite's kernels on CPU tensors, does not check what the GPU
compiler checks (types, layouts, register use): a kernel it runs may still fail to compile on a GPU,
where the launch would raise in the user's call. Triton compiles for a target it is given, with
ptxas from its wheel, on a machine without a GPU; this module does that for recorded launches.

    DYNASHAPE_TEST_SM90=/tmp/k.jsonl DYNASHAPE_TEST_TRITON=cpu pytest tests/backends/fused   # record
    python -m tests.backends.fused.sm90 /tmp/k.jsonl                                        # compile

tests/conftest.py records (one JSON line per distinct kernel source, argument types and block
sizes); test_sm90.py does both for a few kernels in `make test`. Compiles run in child processes
without TRITON_INTERPRET (the interpreter patches triton.language, which the compiler then cannot use).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TARGET = ("cuda", 90, 32)  # an H100: compute capability 9.0, warps of 32


def available() -> str | None:
    """None where Triton can compile for sm_90 here, else why not."""
    try:
        import triton  # noqa: F401
        from triton.backends.nvidia import compiler  # noqa: F401
    except ImportError as e:
        return f"triton or its NVIDIA backend is not installed ({e})"
    return None


class Recorder:
    """Appends each distinct launch (kernel source, argument description, block sizes) to a file."""

    def __init__(self, path: str):
        self.path, self.seen = path, set()

    def install(self):
        """Record every launch of triton_run's kernels from now on (returns the undo)."""
        from dynashape.backends.fused import triton_run
        orig = triton_run.TritonKernel._launch_if_ready

        def launch_if_ready(kernel, args, cfg, *rest):
            self.launch(kernel, args, cfg, all(t.is_contiguous() for t in args[:kernel.spec.n_in]))
            return orig(kernel, args, cfg, *rest)
        triton_run.TritonKernel._launch_if_ready = launch_if_ready
        return lambda: setattr(triton_run.TritonKernel, "_launch_if_ready", orig)

    def launch(self, kernel, args, cfg, contig: bool) -> None:
        from dynashape.backends.fused.triton_compile import Mock, describe
        from dynashape.backends.fused.triton_run import OPTIONS
        n_t = kernel.spec.n_in + kernel.spec.n_out
        mocks = [Mock(t.dtype, t.data_ptr() % 16 == 0) for t in args[:n_t]] + [v if isinstance(v, float) else int(v) for v in args[n_t:]]
        x, r, warps = cfg
        rec = {"source": kernel.spec.source, "args": describe(mocks),
               "kw": {"XBLOCK": x, "RBLOCK": r, "CONTIG": bool(contig), "num_warps": warps, **OPTIONS}}
        key = json.dumps(rec, sort_keys=True)
        if key not in self.seen:
            self.seen.add(key)
            with open(self.path, "a") as f:
                f.write(key + "\n")


def _compile_one(rec: dict, forbid: str | None = None) -> str | None:
    """In a child (no TRITON_INTERPRET): None when `rec` compiles for sm_90 (and its PTX has no match
    of the regex `forbid`), else what went wrong."""
    import importlib.util
    import re

    import torch
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile, make_backend
    from triton.runtime.jit import create_function_from_signature

    from dynashape.backends.fused.triton_compile import Mock
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(rec["source"])
    try:
        spec = importlib.util.spec_from_file_location("dynashape_sm90_kernel", f.name)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        jf = mod.kernel
        target = GPUTarget(*TARGET)
        backend = make_backend(target)
        binder = create_function_from_signature(jf.signature, jf.params, backend)
        args = [Mock(getattr(torch, a[1]), a[2]) if a[0] == "t" else a[1] for a in rec["args"]]
        bound, specialization, options = binder(*args, **rec["kw"])
        options, signature, constexprs, attrs = jf._pack_args(backend, rec["kw"], bound, specialization, options)
        done = compile(ASTSource(jf, signature, constexprs, attrs), target=target, options=options.__dict__)
        found = re.search(forbid, done.asm["ptx"]) if forbid else None
        return f"its PTX has {found.group(0)!r}" if found else None
    except Exception as e:  # noqa: BLE001 - reported with the kernel
        return f"{type(e).__name__}: {str(e).strip()[-2000:]}"
    finally:
        os.unlink(f.name)


def compile_all(records: list[dict], workers: int = 2, forbid: str | None = None) -> list[tuple[dict, str]]:
    """(record, error) for each record that does not compile for sm_90."""
    with ProcessPoolExecutor(workers) as pool:
        errors = list(pool.map(_compile_one, records, [forbid] * len(records)))
    return [(r, e) for r, e in zip(records, errors) if e is not None]


def compile_file(path: str, workers: int = 2, forbid: str | None = None) -> list[tuple[dict, str]]:
    """compile_all over a recorded file, in a fresh interpreter without TRITON_INTERPRET."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT] + sys.path))
    env.pop("TRITON_INTERPRET", None)
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [sys.executable, "-m", "tests.backends.fused.sm90", path, "--json", out, "--workers", str(workers)]
    done = subprocess.run(cmd + (["--forbid", forbid] if forbid else []), env=env, cwd=ROOT,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        with open(out) as f:
            got = json.load(f)
    except ValueError:
        raise RuntimeError(f"the sm_90 compile process ended with status {done.returncode} and no report:\n"
                           f"{done.stderr[-3000:]}") from None
    finally:
        os.unlink(out)
    return [(r, e) for r, e in got]


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", help="recorded launches (DYNASHAPE_TEST_SM90=FILE during the tests)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", help="write [record, error] pairs of the failures here")
    ap.add_argument("--forbid", help="a regex no kernel's PTX may match (e.g. 'fma\\.rn' for contracted arithmetic)")
    a = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        ap.error("unset TRITON_INTERPRET: the interpreter patches triton.language, which the compiler then cannot use")
    why = available()
    if why:
        print(f"sm90: skipped: {why}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump([], f)
        return 0
    with open(a.file) as f:
        records = [json.loads(line) for line in f if line.strip()]
    failed = compile_all(records, a.workers, a.forbid)
    for rec, err in failed:
        head = rec["source"].split("def kernel", 1)[-1].split("\n", 1)[0]
        print(f"FAILED {rec['kw']} args {rec['args']}\n  def kernel{head}\n  {err}\n")
    print(f"sm90: {len(records)} kernel launches compiled for {TARGET}, {len(failed)} failed")
    if a.json:
        with open(a.json, "w") as f:
            json.dump([[r, e] for r, e in failed], f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

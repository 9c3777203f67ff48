"""Triton compiles in a child process, so that they do not stall the calls running meanwhile.

A Triton compile holds the GIL for most of its second (MLIR and LLVM passes called from Python): on
a background thread, the calls that run the region's torch calls meanwhile waited for it (an H100:
60 calls of the pointwise chain took 1.08 s where eager's take 74 ms). The child compiles and
writes Triton's disk cache (the kernel, and the launcher Triton builds with the C compiler); the
parent's own compile of the same kernel and specialization then finds both there in milliseconds. One child serves the process, started at its first compile
(importing torch and triton takes it a second or two) and ended with it; it holds a CUDA context of
its own (some hundreds of MB of GPU memory) meanwhile. Where it fails or dies, the parent compiles in
its thread as before.

    parent: Compiler().compile("/.../t1a2b.py", [("t", "float32", True), ("i", 4096)], {"XBLOCK": 1, ...}, 0)
    child:  python -m dynashape.backends.fused.triton_compile   (one JSON request a line, one reply a line)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading


class Mock:
    """A tensor argument for a compile ahead of the launch: its dtype, and a data pointer as aligned
    as the real one's (Triton specializes on 16-byte alignment)."""

    def __init__(self, dtype, aligned: bool):
        self.dtype, self._ptr = dtype, 0 if aligned else 8

    def data_ptr(self):
        return self._ptr

    @staticmethod
    def ptr_range():
        return 0


def describe(args) -> list:
    """The arguments of a compile as JSON: ("t", dtype name, aligned) for a Mock, ("i", value) else."""
    return [("t", str(a.dtype).replace("torch.", ""), a.data_ptr() == 0) if isinstance(a, Mock) else ("i", a)
            for a in args]


def ready_to_launch(compiled) -> None:
    """Load a compiled kernel and build its launcher now (Triton does both at the first launch, the
    launcher with the C compiler where its disk cache has none: on the calling thread, under the GIL)."""
    init = getattr(compiled, "_init_handles", None)
    if init is not None:
        init()


class Compiler:
    """The parent's end: compile() blocks its (background) thread, not the GIL, until the child is done."""

    def __init__(self):
        self._proc = None
        self._lock = threading.Lock()
        self.failed = False  # the child could not be started or died: compile in-process from now on

    def compile(self, path: str, args: list, kw: dict, device: int) -> str | None:
        """None when the child compiled it (Triton's disk cache has it now), else why not."""
        from . import build
        with self._lock:
            if self.failed:
                return "no compiler process"
            try:
                if self._proc is None:
                    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
                    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root] + sys.path))
                    env.pop("TRITON_INTERPRET", None)
                    self._proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
                    build._compilers.add(self._proc)  # killed at interpreter exit
                self._proc.stdin.write(json.dumps({"path": path, "args": args, "kw": kw, "device": device}) + "\n")
                self._proc.stdin.flush()
                line = self._proc.stdout.readline()
            except OSError as e:
                line, why = "", f"{type(e).__name__}: {e}"
            else:
                why = "the compiler process ended"
            if not line:
                self.failed = True
                build._compilers.discard(self._proc)
                return why
            return json.loads(line).get("error")


def main() -> None:  # the child
    import importlib.util

    import torch
    modules: dict = {}
    for line in sys.stdin:
        req = json.loads(line)
        try:
            mod = modules.get(req["path"])
            if mod is None:
                spec = importlib.util.spec_from_file_location("dynashape_triton_child", req["path"])
                mod = modules[req["path"]] = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
            args = [Mock(getattr(torch, a[1]), a[2]) if a[0] == "t" else a[1] for a in req["args"]]
            with torch.cuda.device(req["device"]):
                ready_to_launch(mod.kernel.warmup(*args, grid=(1,), **req["kw"]))  # the launcher into the cache too
            reply = {}
        except Exception as e:  # noqa: BLE001 - the parent compiles it itself and sees the error there
            reply = {"error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()

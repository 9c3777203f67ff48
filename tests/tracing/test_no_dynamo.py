"""A compile runs torch's Python meta kernels without importing torch._dynamo (~1 s of the first
compile in a process), and torch.compile in the same process still behaves as torch's own."""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = textwrap.dedent("""
    import sys, torch, dynashape as ds
    import torch.nn.functional as F
    def f(x, w):
        h = F.layer_norm(x, (x.size(-1),), w).softmax(-1) + F.gelu(x).std() + x.logsumexp(-1, keepdim=True)
        return (x * 2).sin() + h + torch.where(x > 0, x, x.exp()).mean(-1, keepdim=True)
    x, w = torch.randn(3, 5), torch.randn(5)
    for backend in ("eager", "fused"):
        torch.testing.assert_close(ds.compile(f, backend=backend)(x, w), f(x, w))
    m = torch.nn.Sequential(torch.nn.Linear(5, 5), torch.nn.GELU(), torch.nn.LayerNorm(5))
    def g(x):  # autocast entered inside the trace (our TorchFunctionMode on), and its ops probed
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return m(x).float()
    with torch.autocast("cpu", dtype=torch.bfloat16):  # and around the call
        torch.testing.assert_close(ds.compile(m, dynamic=True)(x), m(x))
    torch.testing.assert_close(ds.compile(g, dynamic=True)(x), g(x))
    print("dynamo imported by our compile:", "torch._dynamo" in sys.modules)
    torch.testing.assert_close(torch.compile(f, backend="aot_eager")(x, w), f(x, w))
    print("torch.compile after it: ok")
""")


def test_a_compile_does_not_import_torch_dynamo_and_torch_compile_still_works(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT, DYNASHAPE_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "dynamo imported by our compile: False" in out.stdout, out.stdout
    assert "torch.compile after it: ok" in out.stdout


IMPORTED_WHILE_TRACING = textwrap.dedent("""
    import torch, dynashape as ds
    import torch.nn.functional as F
    def f(x):
        import torch._dynamo  # torch imports it lazily, maybe in the middle of our trace
        return x * 2
    ds.compile(f, backend="eager", dynamic=True)(torch.randn(3))
    graphs = []
    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    g = torch.compile(lambda x, n: F.pad(x, (n, n)), backend=counting)
    for n in (2, 3):
        g(torch.randn(3), n)
    print("graphs:", len(graphs))
""")


def test_torch_compile_is_unaffected_when_torch_dynamo_is_first_imported_during_a_trace(tmp_path):
    # Dynamo's table of torch functions, built at its import, held our stand-in for
    # torch.are_deterministic_algorithms_enabled: F.pad then graph-broke and compiled no graph
    env = dict(os.environ, PYTHONPATH=ROOT, DYNASHAPE_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", IMPORTED_WHILE_TRACING], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    assert "graphs: 2" in out.stdout, out.stdout

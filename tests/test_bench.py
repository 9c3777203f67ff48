"""The benchmark scripts: most of them need a GPU or minutes to run, so CI checks that each at least
names nothing it never defines (bench/gpu.py once lost its timing helpers in a refactor, and the
one device call of that GPU session would have ended in a NameError)."""
import ast
import builtins
import pathlib

import pytest

BENCH = pathlib.Path(__file__).resolve().parent.parent / "bench"


def undefined_names(source: str) -> set:
    """Names read somewhere in `source` that nothing in it binds (scopes ignored: a cheap check)."""
    tree = ast.parse(source)
    bound = set(dir(builtins)) | {"__file__"}
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(n.name)
        elif isinstance(n, ast.Import):
            bound |= {a.asname or a.name.split(".")[0] for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            bound |= {a.asname or a.name for a in n.names}
        elif isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            bound.add(n.id)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            bound.add(n.name)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound


def test_the_check_finds_a_missing_helper():
    assert undefined_names("def f(x):\n    return steady(x)\n") == {"steady"}


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_bench_script_defines_what_it_uses(path):
    assert not undefined_names(path.read_text()), f"{path.name} uses names it never defines"

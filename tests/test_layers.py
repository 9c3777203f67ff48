"""Imports go downward only (DESIGN.md, Layers): a layer imports nothing listed after it."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "dynashape"
ORDER = ["symbolic", "tracing", "ir", "guards", "runtime", "fleet", "backends", "export", "logs"]


def imported_layers(path: Path):
    """(line, layer) for each dynashape layer a module imports at module or function level."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            parts = list(path.relative_to(ROOT).parts[:-1])
            up = parts[: len(parts) - (node.level - 1)] if node.level - 1 <= len(parts) else []
            target = up + (node.module.split(".") if node.module else [])
            if target:
                yield node.lineno, target[0]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dynashape."):
            yield node.lineno, node.module.split(".")[1]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("dynashape."):
                    yield node.lineno, a.name.split(".")[1]


@pytest.mark.parametrize("layer", ORDER)
def test_a_layer_imports_only_layers_before_it(layer):
    allowed = set(ORDER[: ORDER.index(layer) + 1])
    bad = []
    for path in (ROOT / layer).rglob("*.py"):
        for line, target in imported_layers(path):
            if target in ORDER and target not in allowed:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not bad, bad


def test_symbolic_never_imports_torch():
    for path in (ROOT / "symbolic").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n == "torch" or n.startswith("torch.") for n in names), path

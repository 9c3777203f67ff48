"""ds.save / ds.load: round trips, the allow-list, and damaged files (dynashape/export/serialize.py)."""
import builtins
import io
import json
import random
import zipfile

import pytest
import sympy
import torch

import dynashape as ds
from dynashape import Dim
from dynashape.export import LoadError, SaveError
from dynashape.export.allowlist import make_symbols, parse_expr, resolve_target
from dynashape.symbolic.functions import CeilDiv, FloorDiv, IntTrueDiv, Mod, ToFloat, TruncToInt
from dynashape.symbolic.printer import sympy_str
from tests.export.common import check_vs_eager, roundtrip
from tests.export.test_export import AddShifted, Block


def _programs():
    block = Block().eval()
    with torch.no_grad():
        yield ds.export(block, (torch.randn(2, 5, 16),), dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim("seq", max=99)}}), \
            block, (torch.randn(2, 5, 16),)
    dimx = Dim("dimx", min=3, max=6)
    yield ds.export(AddShifted(), (torch.randn(5), torch.randn(6)), dynamic_shapes=({0: dimx}, {0: dimx + 1})), \
        AddShifted(), (torch.randn(5), torch.randn(6))

    def nested(xs, d, n, scale=0.5):
        return [xs[0][:n] * scale, d["k"].view(2, -1).sum(1)]

    args = ((torch.randn(6, 2), torch.randn(6, 2)), {"k": torch.randn(8)}, 3)
    yield ds.export(nested, args, dynamic_shapes=(({0: Dim.AUTO}, {0: Dim.AUTO}), {"k": (Dim.AUTO,)}, Dim.DYNAMIC)), \
        nested, args


@pytest.mark.parametrize("i", range(3))
def test_save_then_load_gives_the_same_program(i):
    ep, fn, args = list(_programs())[i]
    loaded = roundtrip(ep)
    assert str(loaded.graph) == str(ep.graph)  # print, save, load, print: the same text
    assert loaded.range_constraints == ep.range_constraints
    assert repr(loaded.dynamic_shapes) == repr(ep.dynamic_shapes)
    assert [c.text for c in loaded.checks] == [c.text for c in ep.checks]
    assert set(loaded.state_dict) == set(ep.state_dict)
    with torch.no_grad():
        check_vs_eager(loaded, fn, args, n=3, roundtrip_too=False, atol=1e-5, rtol=1e-5)


def test_save_and_load_take_paths_and_files(tmp_path):
    ep = ds.export(lambda x: x.cumsum(0), (torch.randn(5),), dynamic_shapes=({0: Dim("n")},))
    ds.save(ep, tmp_path / "p.dsp")
    ds.save(ep, str(tmp_path / "q.dsp"))
    x = torch.randn(9)
    for loaded in (ds.load(tmp_path / "p.dsp"), ds.load(str(tmp_path / "q.dsp"))):
        torch.testing.assert_close(loaded(x), x.cumsum(0))
    with pytest.raises(FileNotFoundError):
        ds.load(tmp_path / "missing.dsp")


def test_parameters_stay_parameters():
    model = torch.nn.Linear(3, 2)
    loaded = roundtrip(ds.export(model, (torch.randn(4, 3),)))
    assert isinstance(loaded.state_dict["weight"], torch.nn.Parameter)
    assert set(dict(loaded.module().named_parameters())) == {"weight", "bias"}


_S = make_symbols({"s0": "size", "s1": "size", "u0": "int"})
s0, s1, u0 = _S["s0"], _S["s1"], _S["u0"]
EXPRS = [
    2 * s0 + 1, s0 * s1, s0 - s1, 3 - s0, s0 ** 2, s0 / 2, FloorDiv(s0, 2), Mod(s0 + s1, 8), CeilDiv(s0, 4),
    sympy.Eq(Mod(s0, 2), 0), sympy.Le(s0, 5), sympy.Lt(s0, s1), sympy.Ne(s0, 3), sympy.Ge(u0, 0),
    sympy.And(sympy.Le(s0, 5), sympy.Gt(s1, 2)), sympy.Or(sympy.Le(s0, 5), sympy.Gt(s1, 2)),
    sympy.Max(s0, s1), sympy.Min(s0, 3), IntTrueDiv(s0, 2), ToFloat(s0), TruncToInt(ToFloat(s0) / 2),
    sympy.Abs(s0 - s1), sympy.Integer(7), sympy.Rational(1, 3) * s1 + u0,
]


@pytest.mark.parametrize("expr", EXPRS, ids=sympy_str)
def test_expressions_print_then_parse_to_themselves(expr):
    assert parse_expr(sympy_str(expr), _S) == expr


@pytest.mark.parametrize("text", ["__import__('os')", "s0.__class__", "open('x')", "lambda: 1", "s9 + 1",
                                  "[s0]", "s0 if s1 else 2", "eval('1')", "(s0).real"])
def test_the_expression_reader_knows_only_arithmetic(text):
    with pytest.raises(LoadError):
        parse_expr(text, _S)


@pytest.mark.parametrize("name", ["os.system", "builtins.eval", "torch.load", "torch.save", "torch.from_file",
                                  "torch.Tensor._make_subclass", "torch.hub.load", "subprocess.run", "torch.Tensor",
                                  "torch.nn.Module", "torch.jit.load", "torch._C._nn.linear", "operator.attrgetter",
                                  "torch.Tensor.register_hook", "torch.Tensor.__reduce_ex__", "math.__builtins__",
                                  "torch.serialization.load", "torch.Tensor.tolist", "torch.parse_ir",
                                  "torch.import_ir_module", "torch.fork", "torch.set_num_threads",
                                  "torch.nn.functional.has_torch_function", "torch.nn.functional.handle_torch_function",
                                  "torch.ops.aten.from_file", "torch.ops.aten.mul.out", "torch.ops.aten._to_copy",
                                  "torch.ops.aten.mul.__call__", "torch.ops.aten.mul._op"])
def test_only_torch_operations_are_loaded(name):
    with pytest.raises(LoadError, match="not an allowed torch operation|only the operators dynashape has rules"):
        resolve_target(name)


@pytest.mark.parametrize("name", ["torch.cat", "torch.Tensor.add", "torch.Tensor.__getitem__", "torch.Tensor.shape",
                                  "torch.nn.functional.linear", "torch.nn.functional.max_pool2d", "torch.split",
                                  "torch.einsum", "operator.getitem", "torch.special.erf", "torch.linalg.norm"])
def test_torch_operations_resolve(name):
    assert callable(resolve_target(name))


# ------------------------------------------------------------------ tampered files
def _small():
    return ds.export(lambda x, y: torch.cat([x, y]).relu() * 2, (torch.randn(3, 2), torch.randn(4, 2)),
                     dynamic_shapes=({0: Dim("a")}, {0: Dim("b")}))


def _bytes(ep) -> bytes:
    buf = io.BytesIO()
    ds.save(ep, buf)
    return buf.getvalue()


def _rewrite(data: bytes, edit) -> io.BytesIO:
    """The same zip with program.json edited by `edit(doc)`."""
    src = zipfile.ZipFile(io.BytesIO(data))
    doc = json.loads(src.read("program.json"))
    edit(doc)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("program.json", json.dumps(doc))
        z.writestr("state.pt", src.read("state.pt"))
    out.seek(0)
    return out


def _call_node(doc):
    return next(n for n in doc["graph"] if n["kind"] == "call")


@pytest.mark.parametrize("edit,match", [
    (lambda d: _call_node(d).update(target="os.system"), "not an allowed torch operation"),
    (lambda d: _call_node(d).update(target="torch.load"), "not an allowed torch operation"),
    (lambda d: _call_node(d).update(kwargs={"dict": [["x=1);import os#", 1]]}), "keyword argument names"),
    (lambda d: _call_node(d).update(name="a;b"), "bad node name"),
    (lambda d: d["graph"][1].update(index="0); import os #"), "index"),
    (lambda d: d["symbols"].update({"s0); import os #": "size"}), "bad symbol"),
    (lambda d: d.update(version=3), "format version 3"),
    (lambda d: d.update(version=1), "format version 1, by a dynashape whose programs did not check"),
    (lambda d: d.update(format="something.else"), "not a dynashape exported program"),
    (lambda d: d["graph"].pop(0), "unknown node|bad symbol binding"),
    (lambda d: d["graph"].append({"kind": "output", "name": "out2", "value": None}), "inconsistent"),
    (lambda d: _call_node(d).update(args={"pickle": "cos\nsystem\n"}), "unknown tag"),
    (lambda d: d["inputs"][0][1]["tensor"].update(dims=["__import__('os')", 2]), "expression"),
])
def test_tampered_programs_are_refused_with_a_clear_error(edit, match):
    with pytest.raises(LoadError, match=match):
        ds.load(_rewrite(_bytes(_small()), edit))


def test_text_in_locations_cannot_escape_into_the_generated_code():
    evil = "x'\nimport builtins; builtins.PWNED = 1\n#"

    def edit(doc):
        _call_node(doc)["location"] = ["a.py\nimport builtins; builtins.PWNED = 1\n#", 3, evil, evil]

    loaded = ds.load(_rewrite(_bytes(_small()), edit))
    loaded(torch.randn(5, 2), torch.randn(6, 2))
    assert not hasattr(builtins, "PWNED")


def test_state_that_does_not_fit_the_graph_is_refused():
    model = torch.nn.Linear(3, 2)
    data = _bytes(ds.export(model, (torch.randn(4, 3),)))
    src = zipfile.ZipFile(io.BytesIO(data))
    buf = io.BytesIO()
    torch.save({"weight": torch.randn(5, 5), "bias": torch.randn(2)}, buf)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("program.json", src.read("program.json"))
        z.writestr("state.pt", buf.getvalue())
    out.seek(0)
    with pytest.raises(LoadError, match="'weight' has shape"):
        ds.load(out)


def test_what_is_not_an_exported_program_is_a_load_error():
    for data in [b"", b"hello", b"PK\x03\x04" + bytes(40)]:
        with pytest.raises(LoadError):
            ds.load(io.BytesIO(data))


def test_save_refuses_what_the_format_cannot_hold():
    ep = _small()
    call = next(n for n in ep.graph.nodes if n.kind == "call")
    call.target = lambda *a: a
    with pytest.raises(SaveError, match="cannot be saved"):
        ds.save(ep, io.BytesIO())


def test_truncated_and_bit_flipped_files_always_give_a_clean_error():
    ep = _small()
    data = _bytes(ep)
    rng = random.Random(0)
    x, y = torch.randn(5, 2), torch.randn(6, 2)
    want = ep(x, y)
    cases = [data[:n] for n in sorted(rng.sample(range(len(data)), 150))]
    for _ in range(250):
        b = bytearray(data)
        pos = rng.randrange(len(b))
        b[pos] ^= 1 << rng.randrange(8)
        cases.append(bytes(b))
    loaded_ok = 0
    for blob in cases:
        try:
            loaded = ds.load(io.BytesIO(blob))
        except LoadError as e:
            assert "cannot load" in str(e) and "Traceback" not in str(e)
            continue
        loaded_ok += 1  # a flip in bytes the reader ignores: it must still be the same program
        torch.testing.assert_close(loaded(x, y), want)
    assert loaded_ok < len(cases)


_ODD = [None, True, 0, -1, 7, 2 ** 70, 1.5, "x", "s0", "torch.cat", [], {}, [1, 2], {"node": "x"}, {"sym": "s0"},
        {"tuple": []}, "Eq(s0, 2)", "2**100000000", {"dtype": "float32"}, "\n"]


def _paths(o, path=()):
    if isinstance(o, dict):
        for k, v in o.items():
            yield from _paths(v, path + (k,))
    elif isinstance(o, list):
        for i, v in enumerate(o):
            yield from _paths(v, path + (i,))
    if path:
        yield path


def test_well_formed_zips_with_damaged_contents_give_a_clean_error():
    """Structure-aware fuzz: the zip is valid (so its checksums pass) but program.json is not."""
    rng = random.Random(0)
    data = [_bytes(p[0]) for p in _programs()]
    for i in range(300):
        def edit(doc):
            for _ in range(rng.randint(1, 3)):
                path = rng.choice(list(_paths(doc)))
                parent = doc
                for k in path[:-1]:
                    parent = parent[k]
                if isinstance(parent, dict) and rng.random() < 0.3:
                    del parent[path[-1]]
                else:
                    parent[path[-1]] = rng.choice(_ODD)
        try:
            ds.load(_rewrite(data[i % len(data)], edit))
        except LoadError as e:
            assert "cannot load" in str(e)


def test_runtime_asserts_survive_save_and_load():
    def f(x, n):
        k = n.item()
        ds.check(k >= 1)
        ds.check(k <= x.shape[0], "n must fit in x")
        return x[:k] * 2

    ep = roundtrip(ds.export(f, (torch.randn(8, 3), torch.tensor(3)), dynamic_shapes=({0: Dim("b")}, None)))
    x = torch.randn(10, 3)
    torch.testing.assert_close(ep(x, torch.tensor(4)), x[:4] * 2)
    with pytest.raises(RuntimeError, match="n must fit in x"):
        ep(x, torch.tensor(11))


# ---------------------------------------------------------------------------- hostile files: bounded time and memory
def _nested_pow(levels, base="9"):
    for _ in range(levels):
        base = f"({base}**64)"
    return base


_HOSTILE_EXPRS = {
    "exponent tower of 4": f"s0 <= {_nested_pow(4)}",
    "exponent tower of 5": f"s0 <= {_nested_pow(5)}",
    "degree tower": _nested_pow(3, "s0"),
    "product of powers": "*".join(["(s0**64)"] * 40),
    "huge literal": "s0 <= " + "9" * 4000,
    "deep unary nesting": "-" * 9000 + "s0",
    "deep parentheses": "(" * 400 + "s0" + ")" * 400,
    "deep calls": "Max(" * 300 + "s0" + ", 1)" * 300,
    "float overflow": "s0 <= (1e300**64)",
}


@pytest.mark.parametrize("name", sorted(_HOSTILE_EXPRS))
def test_hostile_check_expressions_are_refused_quickly(name):
    import time
    blob = _rewrite(_bytes(_small()), lambda doc: doc["checks"].append(
        {"expr": _HOSTILE_EXPRS[name], "text": "t", "kind": "guard", "location": None}))
    t = time.monotonic()
    with pytest.raises(LoadError, match="cannot load"):
        ds.load(blob)
    assert time.monotonic() - t < 2.0


def test_shape_expressions_of_real_programs_stay_within_the_reader_s_bounds():
    s = make_symbols({"s0": "size", "s1": "size"})
    assert parse_expr("s0**64 + 2**64", s) == s["s0"] ** 64 + 2 ** 64
    assert parse_expr("2**s1", s) == 2 ** s["s1"]
    assert parse_expr("s0 <= 9223372036854775807", s) is not None


def _zip_with(program: bytes, state: bytes, state_compression=zipfile.ZIP_STORED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("program.json", program)
        z.writestr("state.pt", state, compress_type=state_compression)
    return out.getvalue()


def _declare_size(data: bytes, member: bytes, size: int) -> bytes:
    """The zip with `member`'s uncompressed size rewritten (local and central headers): a lying header."""
    import struct
    b = bytearray(data)
    for sig, name_at, size_at in ((b"PK\x03\x04", 26, 22), (b"PK\x01\x02", 28, 24)):
        i = b.find(sig)
        while i >= 0:
            n = struct.unpack_from("<H", b, i + name_at)[0]
            start = i + (30 if sig == b"PK\x03\x04" else 46)
            if bytes(b[start:start + n]) == member:
                struct.pack_into("<I", b, i + size_at, size)
            i = b.find(sig, i + 4)
    return bytes(b)


def test_zip_bombs_are_refused_before_they_inflate():
    import resource
    import time
    good = zipfile.ZipFile(io.BytesIO(_bytes(_small())))
    state, program = good.read("state.pt"), good.read("program.json")
    bomb = b'{"format": "dynashape.ExportedProgram", "pad": "' + b" " * (20 << 20) + b'"}'
    cases = {
        "declared": _zip_with(bomb, state),
        "lying header": _declare_size(_zip_with(bomb, state), b"program.json", 1000),
        "compressed state": _zip_with(program, b"\0" * (70 << 20), zipfile.ZIP_DEFLATED),
    }
    del bomb
    peak0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for name, blob in cases.items():
        t = time.monotonic()
        with pytest.raises(LoadError, match="inflate|damaged") as e:
            ds.load(io.BytesIO(blob))
        assert time.monotonic() - t < 2.0, name
        assert "cannot load" in str(e.value), name
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak0) / 1024
    assert grown_mb < 50, grown_mb  # nothing was inflated


def test_a_program_json_of_many_tiny_containers_is_refused_before_parsing():
    import time
    good = zipfile.ZipFile(io.BytesIO(_bytes(_small())))
    blob = _zip_with(b'{"format": "dynashape.ExportedProgram", "pad": [' + b"{}," * (2 << 20) + b"{}]}",
                     good.read("state.pt"))
    t = time.monotonic()
    with pytest.raises(LoadError, match="lists and objects"):
        ds.load(io.BytesIO(blob))
    assert time.monotonic() - t < 2.0


def test_autocast_and_inference_mode_blocks_survive_save_and_load(tmp_path):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = self.lin(x)
            with torch.inference_mode():
                z = x * 2
            return y.relu(), z

    m, x = M(), torch.randn(3, 4)
    ep = ds.export(m, (x,))
    path = tmp_path / "m.ds"
    ds.save(ep, str(path))
    for prog in (ep, ds.load(str(path))):
        (y, z), (wy, wz) = prog(x), m(x)
        assert y.dtype == wy.dtype == torch.bfloat16 and z.is_inference() == wz.is_inference()
        torch.testing.assert_close(y, wy)

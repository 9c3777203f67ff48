"""Random pointwise/reduction programs (hypothesis): backend='fused' must equal eager on every
drawn program, on two shapes each, contiguous or transposed inputs."""
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from .oracle import check_fused

UNARY = [torch.sigmoid, torch.tanh, F.gelu, F.silu, torch.relu, torch.exp, lambda v: v.abs().sqrt(),
         lambda v: v * 0.5 + 1, lambda v: v.clamp(-1, 1), torch.neg]
# where's branches meet where the comparison flips (|a - b| either way): a program can compare values
# that are equal mathematically (sqrt(x) * sqrt(x) against x), and eager's float32 sqrt is not
# correctly rounded (the kernel's is), so a discontinuous choice there would compare rounding, not code
BINARY = [torch.add, torch.mul, torch.sub, torch.maximum, lambda a, b: torch.where(a > b, a - b, b - a),
          lambda a, b: a / (b.abs() + 1)]
ROWWISE = [lambda v: v - v.mean(-1, keepdim=True), lambda v: v / (v.std(-1, keepdim=True) + 1),
           lambda v: v.softmax(-1), lambda v: v * v.amax(-1, keepdim=True),
           lambda v: F.layer_norm(v, (v.size(-1),)), lambda v: v + torch.logsumexp(v, -1, keepdim=True)]

steps = st.lists(st.tuples(st.sampled_from(["u", "b", "r"]), st.integers(0, 99), st.integers(0, 99)),
                 min_size=2, max_size=7)


def program(plan):
    def f(x, y):
        vals = [x, y]
        for kind, a, b in plan:
            u, v = vals[a % len(vals)], vals[b % len(vals)]
            if kind == "u":
                vals.append(UNARY[a % len(UNARY)](u))
            elif kind == "b":
                vals.append(BINARY[b % len(BINARY)](u, v))
            else:
                vals.append(ROWWISE[a % len(ROWWISE)](u))
        return vals[-1], vals[-2]
    return f


@settings(max_examples=8, deadline=None)
@given(plan=steps, transposed=st.booleans(), rows=st.integers(2, 9), cols=st.integers(2, 70))
def test_random_programs_match_eager(plan, transposed, rows, cols):
    def make(r, c):
        x = torch.randn(c, r).t() if transposed else torch.randn(r, c)
        return x, torch.randn(r, c)
    check_fused(program(plan), [make(rows, cols), make(rows + 3, cols + 5)], fused=False, compiles=None,
                rtol=1e-4, atol=1e-5)

"""Small programs that the trace and report tests run under DYNASHAPE_TRACE."""
import torch

import dynashape as ds


class TinyModel(torch.nn.Module):  # the demo's model
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x):
        h = self.norm(torch.relu(self.proj(x)))
        if h.size(1) > 1:
            h = h.mean(dim=1)
        return self.head(h).softmax(-1)


def clip_positive(x):
    if x.sum() > 0:  # data-dependent: a graph break
        return x.clamp(max=1)
    return x


def branchy(x):
    y = x * 2
    if x.size(0) > 6:  # a guard on a size, from this line
        y = y + 1
    return y.sum()


def run_demo_like():
    """The demo's model over varying shapes, a branch on a size and a graph break."""
    torch.manual_seed(0)
    model = ds.compile(TinyModel().eval())
    for batch, seq in [(2, 8), (3, 8), (5, 12), (7, 20)]:
        model(torch.randn(batch, seq, 16))
    f = ds.compile(branchy)
    for n in (2, 3, 8):
        f(torch.randn(n, 4))
    ds.compile(clip_positive)(torch.randn(5))
    return model, f

"""guards/module_epoch.py wraps nn.Module.__setattr__ for the whole process: a peer compiler in the
same process (torch.compile) must not see that wrapper's counter."""
import torch

import dynashape as ds
from tests.oracle import torch_compile_graphs


class Cache(torch.nn.Module):
    """Keeps its last hidden state on itself, as a KV or feature cache does."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.last = None

    def forward(self, x):
        h = self.fc(x)
        self.last = h.detach()
        return h.relu()


def test_torch_compile_does_not_recompile_on_our_counter():
    # Dynamo traced our __setattr__ wrapper and guarded on the counter it bumps, which the forward's
    # own attribute write moves: with dynashape imported, torch.compile compiled a graph per call
    torch.manual_seed(0)
    m = Cache()
    xs = [torch.randn(3, 4) for _ in range(5)]
    graphs = torch_compile_graphs(m, [(x,) for x in xs], dynamo_config={"recompile_limit": 64})
    assert graphs == 1
    torch.testing.assert_close(m.last, m.fc(xs[-1]).detach())


def test_attribute_writes_still_reach_a_compiled_module():
    # the counter still moves outside torch.compile: a hook added after the first call runs
    torch.manual_seed(0)
    ref = Cache()
    cm = ds.compile(Cache())
    cm._orig_mod.load_state_dict(ref.state_dict())
    for b in (3, 5):
        x = torch.randn(b, 4)
        torch.testing.assert_close(cm(x), ref(x))
    ref.fc.register_forward_hook(lambda mod, i, o: o * 2)
    cm._orig_mod.fc.register_forward_hook(lambda mod, i, o: o * 2)
    x = torch.randn(4, 4)
    torch.testing.assert_close(cm(x), ref(x))
    torch.testing.assert_close(cm._orig_mod.last, ref.last)

"""Small torchvision-like modules (torchvision/timm do not install with the local CPU torch): the
detection patterns (anchors reassigned in forward, `torch.where(cond)` box filtering) and a ResNet
block with ReLU(inplace=True) trained through the compiled module."""
import torch
import torch.nn as nn

import dynashape as ds


class AnchorGenerator(nn.Module):  # torchvision.models.detection.anchor_utils, reduced
    def __init__(self):
        super().__init__()
        self.cell_anchors = [torch.tensor([[-8.0, -8.0, 8.0, 8.0], [-16.0, -8.0, 16.0, 8.0]])]

    def forward(self, feature):  # (B, C, H, W) -> (H*W*A, 4)
        self.cell_anchors = [a.to(dtype=feature.dtype, device=feature.device) for a in self.cell_anchors]
        h, w = feature.shape[-2:]
        ys = torch.arange(h, dtype=feature.dtype) * 4
        xs = torch.arange(w, dtype=feature.dtype) * 4
        # torchvision uses torch.meshgrid(ys, xs, indexing="ij"), which has no symbolic rule yet (it specializes)
        sy, sx = ys[:, None].expand(h, w), xs[None, :].expand(h, w)
        shifts = torch.stack([sx.reshape(-1), sy.reshape(-1), sx.reshape(-1), sy.reshape(-1)], 1)
        return (shifts[:, None, :] + self.cell_anchors[0][None]).reshape(-1, 4)


def remove_small_boxes(boxes, min_size: float):  # torchvision.ops.boxes
    ws, hs = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    keep = (ws >= min_size) & (hs >= min_size)
    return torch.where(keep)[0]


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Conv2d(3, 8, 3, stride=4, padding=1)
        self.head = nn.Conv2d(8, 8, 1)  # 2 anchors x 4 deltas
        self.anchors = AnchorGenerator()

    def forward(self, images):
        f = self.backbone(images)
        anchors = self.anchors(f)
        deltas = self.head(f).permute(0, 2, 3, 1).reshape(f.shape[0], -1, 4)
        boxes = anchors[None] + deltas * 4
        keep = remove_small_boxes(boxes[0], 14.0)
        return {"boxes": boxes[0][keep], "keep": keep}


def test_detector_with_reassigned_anchors_and_where_filtering_equals_eager_without_breaks():
    torch.manual_seed(0)
    m = Detector().eval()
    cm = ds.compile(m)
    with torch.no_grad():
        for s in (32, 48, 64, 40):
            x = torch.randn(1, 3, s, s)
            want, got = m(x), cm(x)
            assert type(got) is dict and got.keys() == want.keys()
            for k in want:
                assert torch.equal(got[k], want[k])
    assert cm.stats.graph_breaks == [] and cm.stats.compiles <= 2
    anchors = m.anchors.cell_anchors[0]
    assert type(anchors) is torch.Tensor and anchors.device.type == "cpu"  # the module is intact


class BasicBlock(nn.Module):  # torchvision.models.resnet.BasicBlock
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x
        return self.relu(out)


class TinyResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True))
        self.layer = nn.Sequential(BasicBlock(8), BasicBlock(8))
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.layer(self.stem(x)), 1), 1))


def test_resnet_training_step_with_inplace_relu_gives_eagers_gradients_and_running_stats():
    torch.manual_seed(0)
    eager, comp = TinyResNet().train(), TinyResNet().train()
    comp.load_state_dict(eager.state_dict())
    cm = ds.compile(comp)
    for s in (16, 16, 24):
        x, y = torch.randn(4, 3, s, s), torch.randint(0, 10, (4,))
        for model, fn in ((eager, eager), (comp, cm)):
            model.zero_grad()
            nn.functional.cross_entropy(fn(x), y).backward()
        for (n, p), q in zip(eager.named_parameters(), comp.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=n)
        for (n, b), c in zip(eager.named_buffers(), comp.buffers()):
            torch.testing.assert_close(c, b, msg=n)  # BatchNorm running stats updated once per call
    assert cm.stats.graph_breaks == [] and cm.stats.compiles <= 2

"""The conversion of a module to the export form (`mjfl.jobs.convert`), in eager PyTorch.

The runtime's side (the exported programs against eager PyTorch) is in
tests/commands/test_custom_models.py and tests/jobs/test_trainers.py.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from repository import ROOT
from torch import Tensor, nn

from mjfl.errors import ModelError
from mjfl.jobs.convert import EagerForm, ExportForm, dropout_sites, supported_table
from mjfl.jobs.layers import max2, relu_masked


def test_the_docs_table_of_supported_operators_is_the_codes() -> None:
    text = (ROOT / "docs" / "models.md").read_text()
    block = re.search(r"<!-- supported-table: begin -->\n(.*?)<!-- supported-table: end -->", text, re.DOTALL)
    assert block is not None, "docs/models.md has no supported-table block"
    rows = [line for line in block.group(1).splitlines() if line.startswith("| `")]
    assert rows == [f"| {what} | {becomes} |" for what, becomes in supported_table()]


class Net(nn.Module):
    def __init__(self, tail: nn.Module) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), tail)
        self.fc = nn.Linear(4 * 8 * 8, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.features(x).flatten(1))


@pytest.mark.parametrize(
    ("tail", "operator", "advice"),
    [
        (nn.Upsample(scale_factor=1), "nn.Upsample", "no rule yet"),
        (nn.GroupNorm(2, 4), "nn.GroupNorm", "nn.BatchNorm2d"),
        (nn.PReLU(), "nn.PReLU", "nn.LeakyReLU"),
    ],
)
def test_an_operator_without_a_rule_is_one_error_naming_it_its_module_and_what_instead(
    tail: nn.Module, operator: str, advice: str
) -> None:
    model = Net(tail)
    with pytest.raises(ModelError) as info:
        ExportForm(model).check((1, 8, 8), [])
    error = info.value
    assert (error.operator, error.module) == (operator, "features.2")
    assert advice in error.instead
    assert str(error).startswith(f"model operator {operator} in features.2: ") and "; instead: " in str(error)


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda: nn.BatchNorm2d(4, momentum=0.2), "momentum=0.2"),
        (lambda: nn.BatchNorm2d(4, track_running_stats=False), "track_running_stats=False"),
        (lambda: nn.MaxPool2d(2, ceil_mode=True), "ceil_mode"),
    ],
)
def test_a_supported_layer_used_in_a_way_the_runtime_cannot_train_is_refused(make, problem: str) -> None:
    class Pooled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(1, 4, 3, padding=1)
            self.layer = make()
            self.fc = nn.Linear(4, 3)

        def forward(self, x: Tensor) -> Tensor:
            return self.fc(self.layer(self.conv(x)).mean(dim=(2, 3)))

    with pytest.raises(ModelError) as info:
        ExportForm(Pooled()).check((1, 8, 8), [])
    assert info.value.module == "layer" and problem in str(info.value), str(info.value)


def test_a_softmax_before_the_loss_is_refused_with_the_reason() -> None:
    class Softmaxed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(64, 3)

        def forward(self, x: Tensor) -> Tensor:
            return F.softmax(self.fc(x.flatten(1)), dim=1)

    with pytest.raises(ModelError, match="return the logits"):
        ExportForm(Softmaxed()).check((1, 8, 8), [])


class Branches(nn.Module):
    """Two branches concatenated along channels, a residual sum, pooling of every kind, a 1-d batch norm."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(2, 3, 3, padding="same")
        self.b = nn.Conv2d(2, 5, 3, stride=1, padding=2, dilation=2)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.grouped = nn.Conv2d(8, 8, 1, groups=2)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.avg = nn.AvgPool2d(2, stride=1)
        self.head = nn.AdaptiveAvgPool2d(1)
        self.bn = nn.BatchNorm1d(8)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: Tensor) -> Tensor:
        x = torch.cat([self.a(x), self.b(x)], dim=1)
        x = x + F.hardswish(self.grouped(F.silu(self.depthwise(x))))
        x = self.avg(self.pool(F.leaky_relu(x, 0.05)))
        x = self.drop(self.bn(self.head(x).view(x.size(0), -1)))
        return self.fc(torch.tanh(x))


def test_branches_convert_to_the_same_values_gradients_and_statistics_as_eager() -> None:
    torch.manual_seed(0)
    model = Branches().train()
    x = torch.randn(5, 2, 9, 7)
    y = torch.randint(0, 4, (5,))
    eager = EagerForm(model)
    sites = dropout_sites(eager, (2, 9, 7))
    assert sites == [(8,)]
    noise = [torch.rand(5, *s) for s in sites]
    feed = iter(noise)
    want = eager(x, lambda shape: next(feed))
    F.cross_entropy(want, y).backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad()
    got, stats = ExportForm(model).run(x, [u.movedim(0, -1) for u in noise])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    F.cross_entropy(got, y).backward()
    for k, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[k], rtol=1e-4, atol=1e-6, msg=k)
    assert len(stats) == 2  # the one batch norm's mean and variance
    report = ExportForm(model).check((2, 9, 7), sites)
    found = {op for op, _, _ in report.counts()}
    assert {"torch.cat", "+", "nn.MaxPool2d", "nn.AvgPool2d", "nn.AdaptiveAvgPool2d", "x.view", "nn.BatchNorm1d"} <= found


def test_the_masked_operators_route_gradients_as_pytorch_does() -> None:
    a = torch.tensor([1.0, 2.0, 3.0, -1.0], requires_grad=True)
    b = torch.tensor([2.0, 2.0, 1.0, -2.0], requires_grad=True)
    m = max2(a, b)
    assert m.tolist() == [2.0, 2.0, 3.0, -1.0]
    m.sum().backward()
    assert a.grad.tolist() == [0.0, 1.0, 1.0, 1.0]  # tie goes to a
    assert b.grad.tolist() == [1.0, 0.0, 0.0, 0.0]
    x = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    r = relu_masked(x)
    assert r.tolist() == [0.0, 0.0, 2.0]
    r.sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 1.0]

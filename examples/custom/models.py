"""A MobileNet-style network for mjfl: depthwise-separable convolutions, batch norm, ReLU6.

Plain PyTorch: mjfl converts it to a training program phones run
(docs/models.md, "Your own model"). The config names it as
``model = "models.py:TinyMobileNet"`` and passes ``model_args``.
"""

from __future__ import annotations

from torch import Tensor, nn


def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU6(),
    )


class Separable(nn.Module):
    """A depthwise 3x3 convolution, then a pointwise 1x1 one, each with batch norm and ReLU6."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.depthwise = conv_bn(cin, cin, 3, stride, groups=cin)
        self.pointwise = conv_bn(cin, cout, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.pointwise(self.depthwise(x))


class TinyMobileNet(nn.Module):
    def __init__(self, input_shape: tuple[int, int, int], num_classes: int, *, width: int = 16, blocks: int = 3) -> None:
        super().__init__()
        c = input_shape[0]
        layers: list[nn.Module] = [conv_bn(c, width, 3)]
        cin = width
        for i in range(blocks):
            cout = width * 2 ** ((i + 1) // 2)
            layers.append(Separable(cin, cout, stride=2 if i % 2 == 1 else 1))
            cin = cout
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(cin, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool(self.features(x))
        return self.classifier(x.flatten(1))

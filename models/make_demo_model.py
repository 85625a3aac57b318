#!/usr/bin/python3
"""Builds models/demo.onnx: a small deterministic CNN (conv+bn+relu blocks, a residual add, max
pooling, global average pooling, a linear classifier) with a dynamic batch axis.

    /usr/bin/python3 models/make_demo_model.py [OUTPUT]
"""
import pathlib
import sys

import torch
from torch import nn


class DemoNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.pool = nn.MaxPool2d(2)
        self.block = nn.Sequential(
            nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16))
        self.head = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU6())
        self.classifier = nn.Linear(32, 10)

    def forward(self, x):
        x = self.pool(self.stem(x))
        x = torch.relu(x + self.block(x))
        x = self.head(x)
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return self.classifier(x)


def main():
    output = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).with_name("demo.onnx"))
    torch.manual_seed(0)
    model = DemoNet().eval()
    # Non-trivial batch-norm statistics, so the demo exercises them.
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 1.5)
    example = torch.randn(1, 3, 64, 64)
    torch.onnx.export(model, example, str(output), opset_version=13, input_names=["input"],
                      output_names=["logits"], dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    print(f"wrote {output} ({output.stat().st_size} bytes)")


if __name__ == "__main__":
    main()

"""Records the operator traces of real models on the CPU (bench/traces/*.trace).

    PYTHONPATH=python python3 bench/record_traces.py [--out bench/traces] [--only resnet18]

Each model runs one untimed warm-up step (first-call costs, optimizer state),
then one recorded training step: forward, loss, backward, optimizer step, with
tp.record_trace. Times are the CPU's, as measured (compute_scale 1.0 in the
file); the simulator rescales them at replay (tp-sim --compute-scale; the
committed results use 0.01, see bench/results/sim_recorded.md). The recorder
needs torch only (no C++ extension); ResNet-18 needs torchvision
(scripts/install_deps.sh installs torchvision==0.26.0, the release paired with
torch 2.11.0).

Models (small batches, so each trace stays well under a few MB):
  resnet18     torchvision ResNet-18, batch 8, 3x224x224, 1000 classes, SGD momentum
  transformer  torch.nn.TransformerEncoder, 4 layers, d_model 256, 8 heads, batch 8 x 128 tokens, AdamW
  lstm         torch.nn.LSTM, 2 layers, hidden 512, batch 16 x 64 steps, input 128, SGD
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import tensorpager as tp  # noqa: E402


def resnet18():  # noqa: ANN201
    import torchvision

    model = torchvision.models.resnet18(num_classes=1000)
    data = torch.randn(8, 3, 224, 224)
    target = torch.randint(0, 1000, (8,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return model, opt, lambda: nn.functional.cross_entropy(model(data), target)


def transformer():  # noqa: ANN201
    layer = nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024, dropout=0.1, batch_first=True)
    model = nn.Sequential()
    model.add_module("encoder", nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False))
    model.add_module("head", nn.Linear(256, 256))
    data = torch.randn(8, 128, 256)
    target = torch.randn(8, 128, 256)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return model, opt, lambda: nn.functional.mse_loss(model(data), target)


class _Lstm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(input_size=128, hidden_size=512, num_layers=2, batch_first=True)
        self.head = nn.Linear(512, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out)


def lstm():  # noqa: ANN201
    model = _Lstm()
    data = torch.randn(16, 64, 128)
    target = torch.randint(0, 32, (16 * 64,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return model, opt, lambda: nn.functional.cross_entropy(model(data).reshape(-1, 32), target)


MODELS = {"resnet18": resnet18, "transformer": transformer, "lstm": lstm}


def record(name: str, out_dir: str) -> str:
    torch.manual_seed(0)
    model, opt, loss_fn = MODELS[name]()
    model.train()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn().backward()
        opt.step()

    step()  # warm-up: first-call costs, optimizer state
    opt.zero_grad(set_to_none=True)
    path = os.path.join(out_dir, f"{name}.trace")
    with tp.record_trace(path, model=model):
        loss_fn().backward()
        opt.step()
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "traces"))
    parser.add_argument("--only", choices=sorted(MODELS), action="append")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    for name in args.only or list(MODELS):
        path = record(name, args.out)
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
        ops = sum('"type":"op"' in line for line in lines)
        print(f"{name}: {path}: {ops} ops, {os.path.getsize(path) / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

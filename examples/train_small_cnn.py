"""A plain PyTorch training loop: a small CNN on random data.

Nothing in the loop knows about tensorpager. Run it under a budget with no
code change (after ``pip install --no-build-isolation .``)::

    PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,budget:256MiB" python examples/train_small_cnn.py

On a machine without a GPU tensorpager manages the CPU allocator instead (a
simulated device), so the same command shows the budget at work. At the end
the script prints tensorpager's statistics when tensorpager is loaded.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from torch import nn


def make_model(channels: int = 32, classes: int = 10) -> nn.Module:
    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2))

    return nn.Sequential(
        block(3, channels),
        block(channels, 2 * channels),
        block(2 * channels, 4 * channels),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * channels, classes),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=64, help="image height and width")
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = make_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(args.batch, 3, args.size, args.size, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)

    print(f"training on {device}: batch {args.batch}, {args.size}x{args.size} images, {args.steps} steps")
    for step in range(args.steps):
        start = time.perf_counter()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"  step {step}: loss {loss.item():.4f} ({(time.perf_counter() - start) * 1e3:.0f} ms)")

    if "tensorpager" in sys.modules:
        import tensorpager as tp

        if tp.is_installed():
            print(f"\ntensorpager is managing the {tp.device_kind()} allocator: {tp.config()}")
            print(tp.memory_summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())

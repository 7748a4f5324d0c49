"""Trains a torchvision ResNet-18 on random data under half of its first
step's peak memory, and prints what the runtime did.

    python examples/train_under_budget.py [--steps 3] [--batch 32] [--policy lru]

On a machine without a GPU it runs on the CPU adapter (tensorpager's
allocator behind torch's CPU tensors), where the same runtime swaps and
recomputes for real.
"""

from __future__ import annotations

import argparse

import torch
import torchvision

import tensorpager as tp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--ratio", type=float, default=0.5)
    ap.add_argument("--size", type=int, default=128, help="image height and width")
    ap.add_argument("--policy", default=None, choices=["lru", "dtr", "capuchin", "hybrid"],
                    help="default: the configuration's policy key (hybrid)")
    ap.add_argument("--timeline", default=None, help="dump the memory timeline here (.json/.html/.pickle/.txt)")
    args = ap.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tp.install(device=device)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(args.batch, 3, args.size, args.size, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    with tp.budget(args.ratio, policy=args.policy, timeline=args.timeline):
        for step in range(args.steps):
            if step > 0:
                # Optional (the next forward marks the boundary too): here, so
                # that each step prints its own peak. The first step ran
                # unbudgeted, measuring the peak that the ratio is a share of.
                tp.step()
                tp.reset_peak_stats()
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            s = tp.stats()
            print(f"step {step}: loss {loss.item():.4f}, budget {tp.get_budget()}, "
                  f"peak reserved {s['reserved_bytes.all.peak']}")
    s = tp.stats()
    for key in ("offloaded_bytes", "prefetched_bytes", "offloads", "drops", "recomputes", "stalls",
                "stall_ns", "policy_ns", "shared_skips", "floor_bytes"):
        print(f"tensorpager.runtime.{key} = {s['tensorpager.runtime.' + key]}")


if __name__ == "__main__":
    main()

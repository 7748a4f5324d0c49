"""Models and a training loop for the budget tests (test_budget.py) and the
example (examples/train_under_budget.py uses torchvision instead). Run in a
child process: ``python budget_models.py MODEL [HOST_BUDGET]`` trains MODEL unmanaged, then
under every policy at ratios 1.0, 0.6 and 0.4 of the first step's peak, and
prints one JSON line per run."""

from __future__ import annotations

import json
import sys

import torch
import torch.nn as nn

STEPS = 3
POLICIES = ("lru", "dtr", "capuchin", "hybrid")
RATIOS = (1.0, 0.6, 0.4)


class Block(nn.Module):
    """A ResNet basic block: two 3x3 convolutions with BatchNorm, a residual."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + x)


def small_resnet() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        *[Block(16) for _ in range(4)],
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )
    return model, torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))


def small_transformer() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    layers = [nn.TransformerEncoderLayer(64, 4, dim_feedforward=256, dropout=0.1, batch_first=True)
              for _ in range(4)]
    model = nn.Sequential(*layers, nn.Flatten(), nn.Linear(64 * 64, 10))
    return model, torch.randn(32, 64, 64), torch.randint(0, 10, (32,))


def mlp_dropout() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    layers: list[nn.Module] = []
    for _ in range(8):
        layers += [nn.Linear(128, 128), nn.ReLU(), nn.Dropout(0.2)]
    model = nn.Sequential(*layers, nn.Linear(128, 10))
    return model, torch.randn(2048, 128), torch.randint(0, 10, (2048,))


MODELS = {"resnet": small_resnet, "transformer": small_transformer, "mlp": mlp_dropout}


def train(name: str, ratio: float | None, policy: str | None, device: str = "cpu") -> dict:
    """STEPS SGD steps from the same weights, data and RNG; returns the losses,
    gradients and buffers after the last step (batch norm's running
    statistics: a recompute must not count twice in them), as float hex, and
    what the runtime did. The model and data are made on the CPU and moved to
    ``device``, so every device starts from the same values."""
    import tensorpager as tp

    torch.manual_seed(0)
    model, x, y = MODELS[name]()
    model, x, y = model.to(device), x.to(device), y.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.manual_seed(1)
    losses, grads, peaks = [], [], []
    scope = tp.budget(ratio, policy=policy) if ratio is not None else None
    budget = None
    if scope is not None:
        scope.__enter__()
    try:
        for i in range(STEPS):
            if i == 1 and scope is not None:
                tp.step()  # the first step's peak sets the budget (a ratio)
                budget = tp.get_budget()
                tp.reset_peak_stats()
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            losses.append(loss.item().hex())
            grads.append([float(v).hex() for p in model.parameters() for v in p.grad.flatten()[::7].tolist()])
            opt.step()
            peaks.append(tp.stats()["reserved_bytes.all.peak"])
    finally:
        if scope is not None:
            scope.__exit__(None, None, None)
    runtime = {k.rsplit(".", 1)[1]: v for k, v in tp.stats().items() if k.startswith("tensorpager.runtime.")}
    buffers = [float(v).hex() for b in model.buffers() for v in b.flatten().tolist()]
    return {"model": name, "ratio": ratio, "policy": policy, "losses": losses, "grads": grads, "buffers": buffers,
            "budget": budget, "peak_after_first": max(peaks[1:]), "runtime": runtime}


def main() -> None:
    import tensorpager as tp

    torch.set_num_threads(1)
    name = sys.argv[1]
    # A second argument caps the pinned host pool, so that evictions beyond
    # it must drop and recompute (the runtime's host-pool fallback).
    tp.install(device="cpu", **({"host_budget": sys.argv[2]} if len(sys.argv) > 2 else {}))
    print(json.dumps(train(name, None, None)), flush=True)
    for policy in POLICIES:
        for ratio in RATIOS:
            try:
                print(json.dumps(train(name, ratio, policy)), flush=True)
            except torch.OutOfMemoryError as e:
                print(json.dumps({"model": name, "ratio": ratio, "policy": policy, "oom": str(e)}), flush=True)


if __name__ == "__main__":
    main()

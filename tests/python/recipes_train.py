"""Training recipes as users write them, knowing nothing of tensorpager (tests/python/test_recipes.py).

A small convolutional network on seeded random images, trained by one of the
recipes whose first iteration is not a steady one (issue 30 item 3), chosen by
``RECIPE``:

- ``zero_grad_first``: SGD with momentum, ``optimizer.zero_grad()`` just before
  ``loss.backward()`` (PyTorch's ImageNet example): the previous gradients and
  the momentum live through every forward from the second on;
- ``accumulate``: Adam over 4 micro-batches per optimizer step: its state does
  not exist until the first step;
- ``lbfgs``: LBFGS, whose step calls the closure (a forward and a backward)
  several times;
- ``checkpoint`` / ``checkpoint_reentrant``: ``torch.utils.checkpoint`` of each
  block, whose backward runs the block's forward again;
- ``step_in_backward``: PyTorch's "optimizer step in backward" recipe, an Adam
  per parameter stepped by ``register_post_accumulate_grad_hook`` as its
  gradient is accumulated, then its gradient dropped.

It prints one ``loss <iteration> <float.hex>`` line per optimizer step and,
at the end, ``state <sha256>`` of every parameter and optimizer state tensor,
so two runs can be compared bit for bit. With ``EXIT_IN_BACKWARD_AT=<k>`` a
gradient hook calls ``sys.exit(3)`` in iteration k's backward, and an
``atexit`` handler prints ``at exit <sha256>`` of the same state: what a
process that ends mid-step can still save.
"""

import atexit
import hashlib
import os
import sys

import torch
import torch.utils.checkpoint as cp
from torch import nn

RECIPE = os.environ.get("RECIPE", "zero_grad_first")
ITERATIONS = int(os.environ.get("RECIPE_ITERATIONS", "4"))
# 48x48: a peak of 28-46 MiB. At 24x24 (8-10 MiB) half the peak was two or
# three of the allocator's 2 MiB granules, and every recipe was refused at 0.5.
BATCH, SIZE, WIDTH, BLOCKS = 8, 48, 32, 4


class Net(nn.Module):
    def __init__(self, checkpoint: str | None) -> None:
        super().__init__()
        self.checkpoint = checkpoint
        self.stem = nn.Sequential(nn.Conv2d(3, WIDTH, 3, padding=1), nn.BatchNorm2d(WIDTH), nn.ReLU())
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Conv2d(WIDTH, WIDTH, 3, padding=1), nn.BatchNorm2d(WIDTH), nn.ReLU(),
                          nn.Conv2d(WIDTH, WIDTH, 3, padding=1), nn.ReLU())
            for _ in range(BLOCKS))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(WIDTH, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            if self.checkpoint is None:
                x = block(x)
            else:
                x = cp.checkpoint(block, x, use_reentrant=self.checkpoint == "reentrant")
        return self.head(x)


def digest(model: nn.Module, opts: list[torch.optim.Optimizer]) -> str:
    h = hashlib.sha256()
    tensors = [p for p in model.parameters()] + [b for b in model.buffers()]
    for state in (s for opt in opts for s in opt.state.values()):
        tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    for t in tensors:
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    checkpoint = {"checkpoint": "plain", "checkpoint_reentrant": "reentrant"}.get(RECIPE)
    model = Net(checkpoint).to(device)
    if RECIPE == "step_in_backward":
        per_parameter = {p: torch.optim.Adam([p], lr=1e-3, foreach=False) for p in model.parameters()}

        def step_now(p: torch.Tensor) -> None:
            per_parameter[p].step()
            per_parameter[p].zero_grad()

        for p in model.parameters():
            p.register_post_accumulate_grad_hook(step_now)
        opts = list(per_parameter.values())
    elif RECIPE == "accumulate":
        opt: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    elif RECIPE == "lbfgs":
        opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=3, history_size=2)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if RECIPE != "step_in_backward":
        opts = [opt]
    exit_at = int(os.environ.get("EXIT_IN_BACKWARD_AT", "-1"))
    if exit_at >= 0:
        atexit.register(lambda: print(f"at exit {digest(model, opts)}", flush=True))
        iteration = [0]

        def leave(grad: torch.Tensor) -> torch.Tensor:
            if iteration[0] == exit_at:
                sys.exit(3)
            return grad

        model.blocks[1][0].weight.register_hook(leave)  # mid-backward: later blocks done, earlier ones not
    g = torch.Generator().manual_seed(1)
    micro = 4 if RECIPE == "accumulate" else 1

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(BATCH, 3, SIZE, SIZE, generator=g).to(device)
        return x, torch.randint(0, 10, (BATCH,), generator=g).to(device)

    for it in range(ITERATIONS):
        if exit_at >= 0:
            iteration[0] = it
        if RECIPE == "lbfgs":
            x, y = batch()

            def closure() -> torch.Tensor:
                opt.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                return loss

            loss = opt.step(closure)
        elif RECIPE == "step_in_backward":
            x, y = batch()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()  # each parameter's Adam steps as its gradient is ready
        elif RECIPE == "accumulate":
            for _ in range(micro):
                x, y = batch()
                loss = nn.functional.cross_entropy(model(x), y) / micro
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        else:
            x, y = batch()
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()  # just before backward, as PyTorch's ImageNet example does
            loss.backward()
            opt.step()
        print(f"loss {it} {loss.item().hex()}", flush=True)
    print(f"state {digest(model, opts)}", flush=True)


if __name__ == "__main__":
    main()

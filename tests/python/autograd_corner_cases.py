"""The cases of the autograd corner-case matrix (autograd_cases.py runs them; test_autograd_cases.py).

Each case is a small training computation with one of autograd's corner
cases (retain_graph, double backward, checkpoint, in-place changes, shared
weights, ...): it builds its model and data from the seeds set by
autograd_cases.run_case and returns what must come out bit-identical, as
float hex. CASES holds them by name, in the order they are defined; RAISING
names those where autograd raises.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
import torch.nn as nn
import torch.utils.checkpoint as cp

WIDTH, BATCH = 256, 1024  # activations of 1 MiB: every tensor the runtime sees is large


def hexes(ts: Any) -> list[str]:
    out: list[str] = []
    for t in ts if isinstance(ts, (list, tuple)) else [ts]:
        out += [float(v).hex() for v in t.detach().flatten()[::5].tolist()]
    return out


def mlp(depth: int = 6, act: type[nn.Module] = nn.Tanh, dropout: float = 0.0) -> nn.Sequential:
    layers: list[nn.Module] = []
    for _ in range(depth):
        block: list[nn.Module] = [nn.Linear(WIDTH, WIDTH), act()]
        if dropout:
            block.append(nn.Dropout(dropout))
        layers.append(nn.Sequential(*block))
    return nn.Sequential(*layers)


def data(requires_grad: bool = False) -> torch.Tensor:
    return torch.randn(BATCH, WIDTH, requires_grad=requires_grad)


def train_steps(model: nn.Module, step: Callable[[], torch.Tensor], steps: int = 3) -> dict:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = step()
        loss.backward()
        losses.append(loss.item().hex())
        opt.step()
    return {"losses": losses, "params": hexes(list(model.parameters()))}


# --- the cases ------------------------------------------------------------------------
# Each builds its model and data from the seeds set by run_case and returns
# what must come out bit-identical.

def case_plain() -> dict:
    m, x = mlp(), data()
    return train_steps(m, lambda: m(x).square().mean())


def case_retain_graph_twice() -> dict:
    m, x = mlp(), data()
    loss = m(x).square().mean()
    loss.backward(retain_graph=True)
    loss.backward()  # the saved tensors are unpacked a second time
    return {"grads": hexes([p.grad for p in m.parameters()])}


def case_double_backward() -> dict:
    m, x = mlp(), data(requires_grad=True)
    y = m(x).square().sum()
    (g,) = torch.autograd.grad(y, x, create_graph=True)
    g.square().sum().backward()
    return {"grads": hexes([p.grad for p in m.parameters()])}


def case_checkpoint_inside() -> dict:
    m, x = mlp(), data()

    def step() -> torch.Tensor:
        h = cp.checkpoint(m[0:2], x, use_reentrant=False)
        h = cp.checkpoint(m[2:4], h, use_reentrant=True)
        return m[4:](h).square().mean()

    return train_steps(m, step)


def case_eval_sections() -> dict:
    m, x = mlp(dropout=0.1), data()
    evals: list[torch.Tensor] = []

    def step() -> torch.Tensor:
        loss = m(x).square().mean()
        m.eval()
        with torch.no_grad():
            evals.append(m(x[:64]).sum())
        with torch.inference_mode():
            evals.append(m(x[:64]).sum())
        m.train()
        return loss

    out = train_steps(m, step)
    out["evals"] = hexes(evals)
    return out


def case_inplace_parameter() -> dict:
    m, x = mlp(), data()
    loss = m(x).square().mean()
    with torch.no_grad():
        m[3][0].weight.add_(1)
    loss.backward()
    return {"grads": hexes([p.grad for p in m.parameters()])}


def case_inplace_parameter_view() -> dict:
    m, x = mlp(), data()
    loss = m(x).square().mean()
    with torch.no_grad():
        m[3][0].weight[0].mul_(2)
    loss.backward()
    return {"grads": hexes([p.grad for p in m.parameters()])}


def case_inplace_leaf_input() -> dict:
    m, x = mlp(), data(requires_grad=True)
    loss = m(x).square().mean()
    with torch.no_grad():
        x.add_(1)
    loss.backward()
    return {"grads": hexes([p.grad for p in m.parameters()])}


def case_inplace_saved_activation() -> dict:
    m, x = mlp(), data()
    h = m[0:3](x)
    loss = (h * h).mean() + m[3:](h).mean()
    h.add_(1)  # h is saved by the product and by the next Linear
    loss.backward()
    return {"grads": hexes([p.grad for p in m.parameters()])}


def case_numpy_shared_input() -> dict:
    # Changed through NumPy, the tensor's version does not move: PyTorch
    # computes from the changed data, and so must a budget.
    m = mlp()
    array = data().numpy()
    x = torch.from_numpy(array)
    loss = m(x).square().mean()
    array[:] += 1
    loss.backward()
    return {"grads": hexes([p.grad for p in m.parameters()])}


def case_numpy_shared_input_changed_by_torch() -> dict:
    m = mlp()
    x = torch.from_numpy(data().numpy())
    loss = m(x).square().mean()
    x.mul_(2)  # the tensor autograd saved, through torch: its version moves
    loss.backward()
    return {"grads": hexes([p.grad for p in m.parameters()])}


def case_shared_weights() -> dict:
    m, x = mlp(), data()
    m[4][0].weight = m[1][0].weight  # tied: one parameter used twice
    return train_steps(m, lambda: m(x).square().mean())


def case_batchnorm_running_stats() -> dict:
    m = nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.BatchNorm1d(WIDTH), nn.ReLU()) for _ in range(5)])
    x = data()
    out = train_steps(m, lambda: m(x).square().mean())
    out["buffers"] = hexes([b.float() for b in m.buffers()])
    return out


def case_dropout() -> dict:
    m, x = mlp(dropout=0.3), data()
    return train_steps(m, lambda: m(x).square().mean())


def case_lstm() -> dict:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(64, 128, num_layers=2)
            self.head = nn.Linear(128, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.lstm(x)[0])

    m, x = Net(), torch.randn(40, 64, 64)
    return train_steps(m, lambda: m(x).square().mean())


def case_multiple_outputs() -> dict:
    class Split(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(WIDTH, 2 * WIDTH)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            a, b = self.lin(x).chunk(2, dim=1)
            return torch.tanh(a), torch.sigmoid(b)

    m = nn.Sequential(nn.Linear(WIDTH, WIDTH), Split())
    tail = mlp(3)
    x = data()

    def step() -> torch.Tensor:
        a, b = m(x)
        return tail(a * b).square().mean() + b.mean()

    return train_steps(nn.ModuleList([m, tail]), step)


def case_gradient_accumulation() -> dict:
    m, xs = mlp(), [data() for _ in range(3)]
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    for _ in range(2):
        opt.zero_grad()
        for x in xs:
            (m(x).square().mean() / len(xs)).backward()
        opt.step()
    return {"params": hexes(list(m.parameters()))}


def case_autograd_grad() -> dict:
    m, x = mlp(), data()
    grads = torch.autograd.grad(m(x).square().mean(), list(m.parameters()))
    return {"grads": hexes(list(grads))}


def case_output_kept_after_backward() -> dict:
    m, x = mlp(), data()
    kept = m[0:3](x)
    out = m[3:](kept)
    out.square().mean().backward()
    later = (kept * 2).sum() + out.sum()  # the user's tensors, after backward
    return {"grads": hexes([p.grad for p in m.parameters()]), "later": hexes(later)}


def case_inplace_input_of_next_segment() -> dict:
    # Issue 17 item 2: a segment starting with ReLU(inplace=True) changes the
    # previous segment's output; that storage may never be rebuilt by the
    # previous segment's rerun (it would come back from before the ReLU).
    m = nn.Sequential(*[
        nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh(), nn.Linear(WIDTH, WIDTH)) if i % 2 == 0
        else nn.Sequential(nn.ReLU(inplace=True), nn.Linear(WIDTH, WIDTH))
        for i in range(6)
    ])
    x = data()
    return train_steps(m, lambda: m(x).square().mean())


class LogsThenActivatesInPlace(nn.Module):
    """Logs a statistic of a tensor under grad (norm saves the tensor, and
    its graph dies with the statistic), then changes the tensor in place.
    The storage's first save predates the change: a rerun stopped there
    would bring the bytes back from before it (Note [A rerun stops at its
    tensor] in tensorpager/_rerun.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin, self.out = nn.Linear(WIDTH, WIDTH), nn.Linear(WIDTH, WIDTH)
        self.seen = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        self.seen = h.norm().item()
        return self.out(h.tanh_())


def case_saved_then_changed_in_place_in_its_segment() -> dict:
    m, x = nn.Sequential(*[LogsThenActivatesInPlace() for _ in range(6)]), data()
    return train_steps(m, lambda: m(x).square().mean())


CASES: dict[str, Callable[[], dict]] = {
    name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")
}
# The cases where autograd raises.
RAISING = ("inplace_parameter", "inplace_parameter_view", "inplace_leaf_input", "inplace_saved_activation",
           "numpy_shared_input_changed_by_torch")

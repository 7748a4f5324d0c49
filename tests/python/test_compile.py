"""torch.compile under a budget (issue 13; Note [torch.compile] in _compiled.py).

A compiled model must train under ``tp.budget`` with the values the same
compiled model gives without one, warn once that its compiled regions are
beyond the budget's reach, and refuse a budget below their peak with an
out-of-memory error, never wrong values. Both ways of compiling a module are
covered: ``torch.compile(model)`` and ``block.compile()`` in place. The
backend is ``aot_eager``: AOTAutograd saves the tensors for backward exactly
as with inductor, without compiling C++ (CI time).

Why a subprocess: each mode runs in a fresh interpreter: dynamo's caches and the installed allocator
are process-wide, and one compiled mode must not see another's graphs.
"""

from __future__ import annotations

import json

import pytest
from conftest import requires_ext, run_python

pytestmark = requires_ext

CHILD = r"""
import json, warnings, torch, torch.nn as nn
import tensorpager as tp

MODE = __MODE__

def make():
    torch.manual_seed(0)
    m = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.GELU()) for _ in range(4)], nn.Linear(256, 10))
    if MODE == "whole":
        return torch.compile(m, backend="aot_eager")
    for block in m:
        block.compile(backend="aot_eager")
    return m

x = torch.randn(2048, 256)
y = torch.randint(0, 10, (2048,))

def train(m, steps=3):
    losses = []
    for _ in range(steps):
        loss = nn.functional.cross_entropy(m(x), y)
        loss.backward()
        losses.append(loss.item())
    return losses, [p.grad.clone() for p in m.parameters()]

tp.install("device:cpu,sim_capacity:4GiB")
ref_losses, ref_grads = train(make())
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with tp.budget(1.0, policy="lru"):
        losses, grads = train(make())
warned = [str(w.message) for w in caught if "torch.compile'd module" in str(w.message)]
try:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with tp.budget(0.5, policy="lru"):
            train(make())
    low = "trained"
except torch.OutOfMemoryError as e:
    low = "out of memory: " + str(e)[:200]
print(json.dumps({"losses": losses == ref_losses, "grads": all(torch.equal(a, b) for a, b in zip(grads, ref_grads)),
                  "warnings": len(warned), "low": low}))
"""


@pytest.mark.parametrize("mode", ["whole", "blocks"])
def test_a_compiled_model_trains_exactly_under_a_budget_and_says_what_it_cannot_manage(mode: str) -> None:
    out = run_python(CHILD.replace("__MODE__", repr(mode))).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["losses"] and got["grads"], got
    assert got["warnings"] == 1, got
    # Half the peak is below what a compiled region holds at once: refused, never wrong values.
    assert got["low"].startswith("out of memory"), got

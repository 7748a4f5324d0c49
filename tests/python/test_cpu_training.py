"""A small model trains identically with and without tensorpager on the CPU adapter.

Why a subprocess: both runs are fresh interpreters: the managed one is set up by the start-up hook,
which acts only at interpreter start.
"""

from __future__ import annotations

import json

import pytest
from conftest import clean_env, requires_ext, run_python

TRAIN = """
import json, sys, torch
import torch.nn as nn
torch.manual_seed(0)
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
    nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
    nn.Flatten(), nn.Linear(16 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, 10),
)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
data = torch.randn(16, 3, 16, 16)
target = torch.randint(0, 10, (16,))
losses = []
for _ in range(3):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(data), target)
    loss.backward()
    opt.step()
    losses.append(loss.item().hex())
weights = [p.detach().flatten().tolist() for p in model.parameters()]
import tensorpager as tp
# The plain run never loads the extension; the managed one checks it is in charge.
installed = tp.is_installed() if {installed} else "tensorpager._C" in sys.modules
print(json.dumps({{"losses": losses, "weights": weights, "installed": installed,
                  "allocated": tp.stats()["allocated_bytes.all.peak"] if installed else 0}}))
"""


def _train(conf: str | None) -> dict[str, object]:
    env = clean_env(TENSORPAGER_CONF=conf) if conf is not None else clean_env()
    out = run_python(TRAIN.format(installed=conf is not None), env=env, hook=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@requires_ext
@pytest.mark.parametrize("conf", ["budget:1GiB", "budget:1GiB,policy:lru,max_split_size:20MiB"])
def test_three_steps_are_bit_identical_with_and_without_tensorpager(conf: str) -> None:
    plain = _train(None)
    managed = _train(conf)
    assert plain["installed"] is False
    assert managed["installed"] is True
    assert managed["allocated"] > 0  # the model's tensors really went through tensorpager
    assert managed["losses"] == plain["losses"]
    assert managed["weights"] == plain["weights"]

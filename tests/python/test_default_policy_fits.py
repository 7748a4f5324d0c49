"""Issue 33 item 2: the default policy fits wherever another policy fits, in every run.

The issue's decoder (d 128, 4 layers, batch 8 x 128 tokens, AdamW), verbatim but for a line that
prints each loss, under only ``backend:tensorpager,manage:all,budget:0.5`` with the default policy:
before Note [Small requests from large blocks] (allocator/caching_allocator_blocks.cpp) moved small
requests off large granules until the last resort, it ran out of memory after 3 or 4 iterations in
7 runs of 10 (three 512 KiB activations the program held pinned three 2 MiB granules), where
``policy:lru`` trained 10 of 10. Each run here must train to the plain run's losses bit for bit,
with the budget in force. CI runs 5; TP_FIT_RUNS=10 runs the issue's 10. Before, this way (zero-code)
4 runs of 6 trained, so 5 runs in a row passed about one time in eight; with ``tp.budget(0.5)`` 3 of
10 trained. After that it still died in about 1 run in 10 in a late backward (2 MiB asked, the
largest free block of 2.8 to 3.3 MiB among the small pool's holes, left by lent weights and Adam
moments), until a large request came to take a small-pool block as its last resort: 30 runs of 30.

Why subprocesses: the variable is read at interpreter start, and the failure depended on timing,
so each run is a fresh process.
"""

from __future__ import annotations

import os
import re

import pytest
from conftest import clean_env, requires_ext, run_python

pytestmark = requires_ext

DECODER = """
import torch, torch.nn as nn
torch.manual_seed(0)
d, T, B, V = 128, 128, 8, 256
layer = lambda: nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
model = nn.Sequential(nn.Embedding(V, d), *[layer() for _ in range(4)], nn.Linear(d, V))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for i in range(6):
    x = torch.randint(0, V, (B, T))
    loss = nn.functional.cross_entropy(model(x).view(-1, V), x.view(-1))
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    print("loss", i, loss.item().hex(), flush=True)
"""
CONF = "backend:tensorpager,manage:all,budget:0.5"
RUNS = int(os.environ.get("TP_FIT_RUNS", "5"))


@pytest.fixture(scope="module")
def plain_losses() -> str:
    p = run_python(DECODER, env=clean_env(), hook=False)
    assert p.stdout.count("loss ") == 6, p.stdout
    return p.stdout


@pytest.mark.parametrize("run", range(RUNS))
def test_the_issues_decoder_trains_at_half_its_peak_under_the_default_policy(plain_losses: str, run: int) -> None:
    p = run_python(DECODER, env=clean_env(PYTORCH_CUDA_ALLOC_CONF=CONF), hook=True, check=False)
    assert p.returncode == 0, f"run {run} died:\n{p.stderr[-3000:]}"
    assert p.stdout == plain_losses, "the losses under the budget must be the plain run's, bit for bit"
    exit_line = [line for line in p.stderr.splitlines() if line.startswith("tensorpager: manage:all:")]
    assert len(exit_line) == 1, p.stderr
    assert re.search(r"budget [\d.]+ MiB \(\d+ B\) = 0\.5 x ", exit_line[0]), exit_line[0]
    assert ", 6 steps;" in exit_line[0], exit_line[0]
    assert not re.search(r"\(0 offloads\), recomputed 0 B", exit_line[0]), "the budget moved nothing"


def test_below_its_floor_the_decoder_is_refused_at_once_naming_a_ratio_that_trains(plain_losses: str) -> None:
    """Issue 30 item 3 on the same decoder: the floor is a prediction that holds. 0.46 is refused
    before anything runs under it, naming the smallest ratio that could work (0.48 when this test
    was written: 22 MiB, the first step's unevictable bytes in whole granules); that ratio trains,
    bit for bit. Before large requests could take the small pool's free blocks last (Note [Small
    requests from large blocks]) the floor named the same ratio, but 0.48 died of fragmentation in
    2 runs of 10 (30 of 30 trained after)."""
    low = CONF.replace("budget:0.5", "budget:0.46")
    p = run_python(DECODER, env=clean_env(PYTORCH_CUDA_ALLOC_CONF=low), hook=True, check=False)
    assert p.returncode != 0 and "the budget is refused" in p.stderr, p.stderr[-3000:]
    # The ratio is resolved on the measured iterations (Note [A ratio is a share of a steady
    # iteration] in hooks/budget/budget_api.hpp) and refused then, before any iteration ran under
    # it: nothing was moved.
    refused = r"budget none \(ratio 0\.46 of the measured peak, [\d.]+ MiB, was refused\).*offloaded 0 B \(0 offloads\)"
    assert re.search(refused, p.stderr), p.stderr[-3000:]
    named = re.search(r"smallest budget that could work is at least [\d.]+ MiB \(ratio ([\d.]+) of the peak\)",
                      p.stderr)
    assert named, p.stderr[-3000:]
    ratio = float(named.group(1))
    assert 0.46 < ratio <= 0.5, f"the floor named {ratio}; the decoder trains at 0.5"
    at = CONF.replace("budget:0.5", f"budget:{named.group(1)}")
    q = run_python(DECODER, env=clean_env(PYTORCH_CUDA_ALLOC_CONF=at), hook=True, check=False)
    assert q.returncode == 0, f"the ratio the floor named, {ratio}, died:\n{q.stderr[-3000:]}"
    assert q.stdout == plain_losses, "the losses under the budget must be the plain run's, bit for bit"

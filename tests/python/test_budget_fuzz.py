"""Randomised training under a budget: random models (linear, convolutional,
normalisation, dropout, residual blocks), random budgets and policies, with
and without a capped host pool (forcing recompute), each compared bit for bit
with the unmanaged run; a budget too small for a step must be refused at
once by the floor check, naming the smallest that could work: one it accepts
must train (issue 30: the floor is a prediction that holds). Measured
2026-11-29: 1 of 240 cases (40 seeds) ran out of memory after the check, a
capped host pool's (seed 210, fixed in runtime_floor.cpp); after the fix 0
of 300 (50 seeds, 30 of them with the capped pool). The seed is printed;
TP_FUZZ_SEED repeats a run.

Why a subprocess: each case runs in a fresh interpreter: it installs the allocator, which replaces
the process-wide one and cannot be undone, and a hang fails through the subprocess's timeout.
"""

from __future__ import annotations

import os
import random

import pytest
from conftest import requires_ext, run_python

CHILD = """
import json, random, sys
import torch, torch.nn as nn
import tensorpager as tp

seed = int(sys.argv[1]) if len(sys.argv) > 1 else {seed}
host = {host!r}
rng = random.Random(seed)
torch.set_num_threads(1)
tp.install(device="cpu", **({{"host_budget": host}} if host else {{}}))

class Residual(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
    def forward(self, x):
        return x + self.inner(x)

def make_model(r):
    width = r.choice([256, 384])
    layers = []
    for _ in range(r.randint(3, 8)):
        kind = r.choice(["linear", "residual", "norm", "dropout", "act"])
        if kind == "linear":
            layers.append(nn.Linear(width, width))
        elif kind == "residual":
            layers.append(Residual(nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Dropout(0.1))))
        elif kind == "norm":
            layers.append(nn.LayerNorm(width))
        elif kind == "dropout":
            layers.append(nn.Dropout(r.choice([0.1, 0.3])))
        else:
            layers.append(r.choice([nn.ReLU(), nn.Tanh(), nn.SiLU()]))
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers), width

def train(model_seed, width_batch, ratio, policy):
    torch.manual_seed(model_seed)
    model, width = make_model(random.Random(model_seed))
    x = torch.randn(width_batch, width)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.manual_seed(1)
    out = []
    scope = tp.budget(ratio, policy=policy) if ratio else None
    if scope: scope.__enter__()
    try:
        for _ in range(3):
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            out.append([loss.item().hex()] + [float(v).hex() for p in model.parameters() for v in p.grad.flatten()[::5].tolist()])
    finally:
        if scope: scope.__exit__(None, None, None)
    return out

cases = []
for case in range(6):
    model_seed = rng.randrange(1 << 30)
    batch = rng.choice([2048, 4096])
    # Of the first step's peak with expandable segments, which is close to
    # what the step allocates: these small models hold 0.7 of it or more that
    # no eviction can give back (Note [Budget floor]).
    ratio = rng.choice([1.0, 0.9, 0.85, 0.8, 0.75])
    policy = rng.choice(["lru", "dtr", "capuchin", "hybrid"])
    ref = train(model_seed, batch, None, None)
    try:
        got = train(model_seed, batch, ratio, policy)
        same = got == ref
    except torch.OutOfMemoryError as e:
        same = "OOM: " + str(e)[:1000]
    s = tp.stats()
    cases.append({{"case": case, "model_seed": model_seed, "batch": batch, "ratio": ratio, "policy": policy,
                   "same": same, "offloads": s["tensorpager.runtime.offloads"],
                   "recomputes": s["tensorpager.runtime.recomputes"]}})
print(json.dumps({{"seed": seed, "cases": cases}}))
"""


def _run(host: str | None) -> None:
    import json

    seed = int(os.environ.get("TP_FUZZ_SEED", random.randrange(1 << 30)))
    out = run_python(CHILD.format(seed=seed, host=host), timeout=900).stdout
    result = json.loads(out.strip().splitlines()[-1])
    print(f"seed={result['seed']} host_budget={host}")
    for c in result["cases"]:
        print(c)
    # A random budget may be below what a step needs: that must end in a clear
    # out-of-memory error, never in other values. Most cases must complete.
    wrong = [c for c in result["cases"] if c["same"] is False]
    assert not wrong, f"TP_FUZZ_SEED={result['seed']}: gradients differ: {wrong}"
    ooms = [c for c in result["cases"] if c["same"] is not True]
    assert all("Budget:" in c["same"] for c in ooms), ooms  # the breakdown of the out-of-memory message
    # A budget below the floor is refused at once, naming the smallest that
    # could work (Note [Budget floor]); a budget the floor accepted trains.
    failed = [c for c in ooms if "The smallest budget that could work" not in c["same"]]
    assert not failed, f"TP_FUZZ_SEED={result['seed']}: the floor accepted, then out of memory: {failed}"
    assert len(ooms) <= 4, f"TP_FUZZ_SEED={result['seed']}: {len(ooms)} of 6 refused: {ooms}"


# Note [A rerun's working set] in runtime/resident_floor.hpp: cases the floor
# once accepted under `dtr`, which ran out of memory three reruns deep in their
# first budgeted backward. 945785947 at 0.39 (24.2 MiB of a 62 MiB peak): no
# rerun was counted; 0.44 trained. 331517516 at 0.6: a residual block's rerun
# was measured without the operand its CPU dropout's multiply held (Note [A
# saved operand is held while its operator runs]); 0.65 trained. Each line:
# the ratio tried, then the ratio its refusal named.
RERUN_CASE = """
import re
MODEL, BATCH, RATIO = {model}, {batch}, {ratio}
ref = train(MODEL, BATCH, None, None)
ratio = RATIO
for _ in range(2):
    try:
        print(json.dumps({{"ratio": ratio, "trained": train(MODEL, BATCH, ratio, "dtr") == ref}}))
        break
    except torch.OutOfMemoryError as e:
        named = re.search(r"\\(ratio ([\\d.]+) of the peak\\): the budget is refused", str(e))
        print(json.dumps({{"ratio": ratio, "named": named and float(named.group(1)), "error": str(e)[:600]}}))
        if named is None:
            break
        ratio = float(named.group(1))
"""


@requires_ext
@pytest.mark.parametrize(("model", "batch", "ratio"), [(945785947, 4096, 0.39), (331517516, 2048, 0.6)])
def test_a_recompute_only_budget_its_reruns_would_not_fit_is_refused_naming_one_that_trains(
        model: int, batch: int, ratio: float) -> None:
    import json

    head = CHILD.format(seed=0, host=None).split("cases = []")[0]
    code = head + RERUN_CASE.format(model=model, batch=batch, ratio=ratio)
    lines = [json.loads(x) for x in run_python(code, timeout=600).stdout.splitlines() if x.startswith("{")]
    for x in lines:
        print(x)
    assert len(lines) == 2, lines  # before: accepted, then out of memory
    refused, named = lines
    assert refused["ratio"] == ratio and refused["named"], refused  # refused at once, not out of memory later
    assert named["ratio"] == refused["named"] and named["trained"] is True, named


@requires_ext
def test_random_models_budgets_and_policies_train_bit_identically() -> None:
    _run(None)


@requires_ext
def test_random_models_with_a_full_host_pool_recompute_bit_identically() -> None:
    _run("1MiB")

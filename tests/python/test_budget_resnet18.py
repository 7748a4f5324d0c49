"""Issue 14 on a real model: a torchvision ResNet-18 (batch 32, 160x160, plain
SGD) trains on the CPU adapter under tp.budget(0.5) with every policy but `dtr`
(refused there at once, naming 0.52; it trains at 0.55: DTR_WORKS below), losses,
weights and BatchNorm statistics bit-identical to the unmanaged run; budgets
below what the model cannot give back are refused at the first step
boundary, with the figures (Note [Budget floor] in hooks/budget).

Every policy trains in CI: one child process runs the unmanaged reference
and 11 budgeted runs of up to 3 steps (about 50 s on two cores). The size
is the issue's smallest (batch 32, 160x160): ratios do not depend on it,
since activations, and the operands of the layer that sets the floor, grow
together with batch and image size.

Why 0.5, and why 0.3 cannot work: a ratio is of the first step's measured
peak, 434 MiB reserved with expandable segments. At the stem's BatchNorm
backward the step holds the activation gradient coming in and the one going
out, the BatchNorm's input (50 MiB each), its temporaries (40 MiB) and the
input batch (9 MiB, the program's): 200 MiB, 0.46 of the peak, whatever is
evicted. The weights and gradients of the other layers (85 MiB) sit there
too unless they are lent to the runtime (Note [Lending parameters and
gradients] in tensorpager/_lend.py): without lending the floor is 285 MiB
(0.66). At 0.5 (217 MiB) the margin over the floor is 17 MiB, so the free
bytes the reserve cannot unmap (those in granules shared with live blocks)
must stay under it. They did not while a 50 MiB gradient could be carved
1 MiB past a granule boundary, pinning 26 granules instead of 25: `dtr` ran
out of memory in 6 runs of 6 (`hybrid` and `lru` trained). Since a request
of whole granules sits on granule boundaries (Note [Granule-aware carving]),
every policy trained in 64 runs of 64; at 0.48, `dtr` still fails in 3 runs
of 3.

Below 0.5 the stem must be split: tp.split_channels(model) runs it in
channel chunks (Note [Why the split is exact] in tensorpager/techniques/split_chain.py), so
its backward holds the convolution's output gradient (50 MiB), as much again
that the CPU's convolution_backward allocates beside it (measured) and the
input batch (9 MiB): 110 MiB, 0.25 of the unsplit peak. The incoming
gradient (12.5 MiB), which autograd holds through that call, is lent to the
runtime for it (Note [The split lends its incoming gradient]). The budget is
then a share of the unsplit run's peak, in bytes: every policy trains at 0.3
(130 MiB).

Before that, four fixes. The allocator took the cheapest
growth even where unmapping could not pay for it while a dearer one it could
(Note [Plans the budget can pay for]), and the lender gave a weight and its
gradient back side by side, so zero_grad left holes between weights in
granules nothing could unmap (Note [Lending parameters and gradients]):
before those, `hybrid`, `lru` and `capuchin` failed in 3 runs of 14 at 0.3.
`dtr`, which drops where the others swap, then trained at 0.32 once a rerun
stopped at the tensor it rebuilds (Note [A rerun stops at its tensor] in
tensorpager/_rerun.py) and lent again the weights it read
(``Lender.lend_again``). At 0.3 it still failed in 7 runs of 19 in this
file's order, in the stem's convolution_backward, 1.8 MiB short, while the
incoming gradient was resident: it and the input batch (12.5 and 9.4 MiB)
sat off granule boundaries, on 8 and 6 granules, so 6 MiB beside them could
not be unmapped. Where such a block lands depends on what the process
allocated before it (Note [Granule-aware carving]); lending the incoming
gradient made it train there in 9 runs of 9.
"""

from __future__ import annotations

import json
import os

import pytest
from conftest import requires_ext, run_python

HERE = os.path.dirname(os.path.abspath(__file__))
POLICIES = ("lru", "dtr", "capuchin", "hybrid")
WORKS, BELOW_THE_STEM = 0.5, 0.3
# Under `dtr` the floor counts, at the stem's BatchNorm backward, a rerun of the
# stem's convolution (161 MiB on the CPU: its output and the convolution's
# workspace), so 0.5 is refused naming 0.52, though `dtr` trained there in 64
# runs of 64 (it never dropped that output): Note [A rerun's working set] in
# runtime/resident_floor.hpp. DTR_WORKS trains.
DTR_WORKS = 0.55
# With tp.split_channels, of the unsplit run's peak (the module docstring).
SPLIT = 0.3


def _run(args: list[str]) -> list[dict]:
    """budget_resnet18.py in a child: the unmanaged reference, then each RATIO:POLICY."""
    code = (f"import sys, runpy; sys.argv = ['budget_resnet18.py', *{args!r}]; sys.path.insert(0, {HERE!r}); "
            f"runpy.run_path({os.path.join(HERE, 'budget_resnet18.py')!r}, run_name='__main__')")
    proc = run_python(code, timeout=1800)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    return _run([f"{WORKS}:{p}" for p in POLICIES] + [f"{BELOW_THE_STEM}:lru", f"{WORKS}:lru:nolend"]
                + [f"{SPLIT}:{p}:split" for p in POLICIES] + [f"{DTR_WORKS}:dtr"])


@requires_ext
@pytest.mark.parametrize("policy", POLICIES)
def test_resnet18_trains_bit_identical_under_a_budget(runs: list[dict], policy: str) -> None:
    ratio = DTR_WORKS if policy == "dtr" else WORKS
    r = next(x for x in runs if x["policy"] == policy and x.get("ratio") == ratio and x.get("lend")
             and not x.get("split"))
    assert "message" not in r, r.get("message")
    assert r["losses_identical"], (r["losses"], runs[0]["losses"])
    assert r["weights_identical"] and r["batchnorm_identical"]
    assert r["peak_after_first"] <= r["budget"]  # the allocator caps mapped bytes, with no slack
    rt = r["runtime"]
    assert rt["offloads"] + rt["drops"] > 0


@requires_ext
@pytest.mark.parametrize("policy", POLICIES)
def test_resnet18_with_its_stem_split_trains_bit_identical_at_a_third(runs: list[dict], policy: str) -> None:
    r = next(x for x in runs if x["policy"] == policy and x.get("split"))
    assert "message" not in r, r.get("message")
    # Against the unmanaged, unsplit run: the reference of every run here.
    assert r["losses_identical"] and r["weights_identical"] and r["batchnorm_identical"]
    assert r["budget"] == int(SPLIT * runs[0]["first_peak"])  # a share of the unsplit peak
    assert r["peak_after_first"] <= r["budget"]
    assert r["runtime"]["offloads"] + r["runtime"]["drops"] > 0


def _refusal(r: dict) -> float:
    """The smallest workable ratio that a refusal at the first boundary names."""
    assert r.get("refused_at_step") == 1, r  # at the first boundary, before any budgeted work
    msg = r["message"]
    assert "stay reserved between steps" in msg and "The smallest budget that could work is at least" in msg, msg
    return float(msg.split("(ratio ")[-1].split(" ")[0])


@requires_ext
def test_resnet18_below_the_stem_is_refused_at_once(runs: list[dict]) -> None:
    r = next(x for x in runs if x.get("ratio") == BELOW_THE_STEM)
    # The named ratio is rounded up to two places and measured: 0.49 or 0.50 from run to run
    # (2026-11-29); either is at most WORKS, which trains below.
    assert BELOW_THE_STEM < _refusal(r) <= WORKS, r["message"]


@requires_ext
def test_resnet18_under_dtr_at_half_its_peak_is_refused_at_once_naming_a_ratio_that_trains(runs: list[dict]) -> None:
    r = next(x for x in runs if x["policy"] == "dtr" and x.get("ratio") == WORKS and not x.get("split"))
    assert WORKS < _refusal(r) <= DTR_WORKS, r["message"]  # DTR_WORKS trains: the test above


@requires_ext
def test_resnet18_needs_its_parameters_and_gradients_lent(runs: list[dict]) -> None:
    r = next(x for x in runs if x.get("ratio") == WORKS and not x.get("lend"))
    assert _refusal(r) > WORKS, r["message"]  # 85 MiB of weights and gradients stay put


# Issue 17: a torchvision ResNet-18 with forced drops. With a host pool of
# one byte nothing can be swapped, so every eviction drops a storage that its
# module's rerun rebuilds (the stem's ReLU is in place: Note [Recompute
# reproduces one version] in hooks/budget/saved_storage.hpp). Smaller than the runs above (batch 16, 128x128), every policy
# but `dtr` (the test says why),
# about 12 s. With plain segments 0.85 and 0.7 ran out of memory on stranded
# free memory; with expandable segments 0.85 trains, 0.8 does not (19 MiB of
# saved tensors are also held by the program, out of any eviction's reach).
FORCED_DROPS = 0.85


def _forced_drops(policies: list[str]) -> list[dict]:
    runs = _run(["host=1B", "batch=16", "size=128"] + [f"{FORCED_DROPS}:{p}" for p in policies])
    assert [r["policy"] for r in runs[1:]] == policies, runs
    for r in runs[1:]:
        assert "message" not in r, r.get("message")
        assert r["losses_identical"] and r["weights_identical"] and r["batchnorm_identical"], r["policy"]
        assert r["peak_after_first"] <= r["budget"], r["policy"]
        assert r["runtime"]["offloads"] == 0, (r["policy"], r["runtime"])
    return runs[1:]


@requires_ext
def test_resnet18_with_forced_drops_is_bit_identical() -> None:
    # The ratio is a share of a measured peak, which varies with the CPU
    # adapter's timing: once in about ten CI runs a policy (capuchin) was
    # never pressed at 0.85 (no eviction at all). Pressure is the test's
    # precondition, not its claim, so such a policy runs once more; one that
    # was pressed must have dropped and recomputed, and never swapped. Not
    # `dtr`, which drops without being forced (the runs above), and whose floor
    # counts a rerun of the stem's convolution here (Note [A rerun's working
    # set] in runtime/resident_floor.hpp): it is refused at 0.85, naming 0.86
    # to 0.93 as the measured peak varies.
    runs = _forced_drops([p for p in POLICIES if p != "dtr"])
    unpressed = [r["policy"] for r in runs if r["runtime"]["evictions"] == 0]
    runs = [r for r in runs if r["policy"] not in unpressed] + (_forced_drops(unpressed) if unpressed else [])
    for r in runs:
        rt = r["runtime"]
        assert rt["drops"] > 0 and rt["recomputes"] > 0, (r["policy"], rt)

"""Issue 30 item 3: the floor check is a prediction that holds (Note [Budget
floor] in hooks/budget/budget_floor.cpp, Note [Resident floor] in
runtime/resident_floor.hpp).

A ratio budget the check accepts must train; one it refuses is refused at the
boundary that resolves it, naming a ratio that does train. floor_sweep.py
trains each model as its users write it, unmanaged and then under the ratios
here, with the default policy and lending (as ``manage:all``), and follows
each refusal with a run at the ratio it named. Before the floor counted the
bytes stranded at a step's start and whole granules, the ResNet-18 whose
gradients and momentum live through the forward passed the check at 0.66
(0.65 named) and died at the first budgeted iteration's stem convolution,
13 MiB of free memory stranded beside them; and the decoder's check named
0.31, which died for a budget of 11.8 MiB holding only 10 MiB of granules.

Why a subprocess: the budgets need the allocator installed on the CPU adapter, which is
process-wide, and each model's sweep is one interpreter.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import requires_ext, run_python

pytestmark = requires_ext

SCRIPT = Path(__file__).parent / "floor_sweep.py"


@pytest.mark.parametrize(("model", "ratios"), [
    ("resnet_momentum", [0.66]),
    ("decoder", [0.3, 0.5]),
    ("mlp", [0.5]),
])
def test_a_budget_the_floor_accepts_trains_and_the_ratio_it_names_works(model: str, ratios: list[float]) -> None:
    code = f"import runpy, sys\nsys.argv = ['floor_sweep.py', {model!r}, *{[str(r) for r in ratios]!r}]\n" \
           f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n"
    results = [json.loads(line) for line in run_python(code).stdout.splitlines() if line.startswith("{")]
    assert [r["ratio"] for r in results] == ratios
    for r in results:
        print(r)
        assert r["outcome"] != "died", f"the floor check accepted a budget that ran out of memory: {r}"
        if r["outcome"] == "refused":
            assert r["works"] > r["ratio"], r
            assert r["at_works"]["outcome"] == "trained", f"the ratio the refusal named does not train: {r}"
            assert r["at_works"]["identical"], r
        else:
            assert r["identical"], r

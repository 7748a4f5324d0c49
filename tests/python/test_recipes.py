"""Issue 30 item 3: a step is one iteration, and a ratio is a share of a steady one.

recipes_train.py trains by recipes whose first iteration is not a steady one
(zero_grad() just before backward() with SGD momentum, gradient
accumulation with Adam, LBFGS, an optimizer step per parameter inside the
backward, both torch.utils.checkpoint flavours), knowing
nothing of tensorpager. Under only
``backend:tensorpager,manage:all,budget:0.5`` each must train to the plain
run's losses and final state bit for bit, with the budget in force, something
moved, and one step per iteration. The checkpoint flavours may instead be
refused at the boundary that resolves the ratio (before any iteration ran
under it), naming a ratio below 1 that then trains so (Note [Where an
iteration ends] in _steps.py). Before: the ratio was a share
of the first backward's peak, every micro-batch, closure call and checkpoint
recompute was a step, and the momentum recipe died at its second step.

Why a subprocess: each recipe runs in a fresh interpreter: the variable is read, and the budget
entered, at interpreter start.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import clean_env, requires_ext, run_python

pytestmark = requires_ext

SCRIPT = (Path(__file__).parent / "recipes_train.py").read_text(encoding="utf-8")
ITERATIONS = 4
RESOLVED = re.compile(r"budget [\d.]+ \w+ \((?P<budget>\d+) B\) = [\d.]+ x .*? \((?P<peak>\d+) B\)")
REFUSED = re.compile(r"The smallest budget that could work is at least [\d.]+ MiB \(ratio (?P<ratio>[\d.]+) of the"
                     r" peak\): the budget is refused")


def run(recipe: str, conf: str | None = None) -> tuple[int, str, str]:
    env = {"RECIPE": recipe, "RECIPE_ITERATIONS": str(ITERATIONS)}
    if conf is not None:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    p = run_python(SCRIPT, env=clean_env(**env), hook=conf is not None, check=False)
    return p.returncode, p.stdout, p.stderr


# The checkpoint flavours may be refused at 0.5: their peak is the backward's
# rerun of a block, which holds the block's activations and their gradients
# at once, and no eviction gives those back (the floor's message says so).
MAY_BE_REFUSED = ("checkpoint", "checkpoint_reentrant")


@pytest.mark.parametrize("recipe", ["zero_grad_first", "accumulate", "lbfgs", "step_in_backward", "checkpoint",
                                    "checkpoint_reentrant"])
def test_a_recipe_trains_at_half_its_steady_peak_or_is_refused_at_once_naming_a_ratio_that_trains(recipe: str) -> None:
    code, plain, err = run(recipe)
    assert code == 0, err
    ratio = 0.5
    code, managed, err = run(recipe, f"backend:tensorpager,manage:all,budget:{ratio}")
    exit_line = managed_exit_line(err)
    if code != 0:
        assert recipe in MAY_BE_REFUSED, f"{recipe} must train at 0.5:\n{err}"
        refused = REFUSED.search(err)
        assert refused is not None, f"it died of something other than the floor check:\n{err}"
        # Refused when the ratio was resolved: no iteration had finished under a budget.
        assert "was refused" in exit_line, exit_line
        assert managed.count("\nloss ") + managed.startswith("loss ") <= 2, managed
        ratio = float(refused["ratio"])  # rounded up already
        assert 0.5 < ratio < 1, f"the ratio named must lower the peak: {refused[0]}"
        code, managed, err = run(recipe, f"backend:tensorpager,manage:all,budget:{ratio}")
        assert code == 0, f"the ratio the refusal named, {ratio}, must train:\n{err}"
        exit_line = managed_exit_line(err)
    assert managed == plain, "a run under the budget must give the plain run's losses and state bit for bit"
    resolved = RESOLVED.search(exit_line)
    assert resolved is not None and f"= {ratio} x" in exit_line, exit_line
    assert re.search(rf", {ITERATIONS} steps;", exit_line), "one step per iteration"
    assert not re.search(r"\(0 offloads\), recomputed 0 B", exit_line), "the budget moved nothing"


def test_a_process_that_exits_inside_a_budgeted_backward_saves_the_state_plain_pytorch_has() -> None:
    """Issue 30 item 1, "a process exiting": sys.exit(3) from a gradient hook in the third
    iteration's backward, under the budget and with parameters, gradients and momentum lent; the
    atexit handler hashes the model and optimizer state. Both runs exit 3 with the same losses and
    the same hash: nothing was left lent or unreadable on the way out."""
    env = {"RECIPE": "zero_grad_first", "RECIPE_ITERATIONS": str(ITERATIONS), "EXIT_IN_BACKWARD_AT": "2"}
    plain = run_python(SCRIPT, env=clean_env(**env), check=False)
    managed = run_python(SCRIPT, env=clean_env(**env, PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,manage:all,budget:0.5"),
                         hook=True, check=False)
    assert plain.returncode == managed.returncode == 3, managed.stderr[-3000:]
    assert "at exit " in plain.stdout and managed.stdout == plain.stdout, (plain.stdout, managed.stdout)
    line = managed_exit_line(managed.stderr)
    assert RESOLVED.search(line) and not re.search(r"\(0 offloads\)", line), "the budget was in force and moved something"


def managed_exit_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("tensorpager: manage:all:")]
    assert len(lines) == 1, err
    print(lines[0])
    return lines[0]

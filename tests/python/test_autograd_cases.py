"""Autograd's corner cases under tp.budget (issue 17): every policy, by swap
and by recompute, bit-identical to the unmanaged run wherever it succeeds,
and the same error where it raises (the in-place cases). The child process
that runs them is autograd_cases.py; the cases are in autograd_corner_cases.py."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from autograd_cases import RAISING
from conftest import requires_ext, run_python

HERE = os.path.dirname(os.path.abspath(__file__))
INPLACE = "modified by an inplace operation"
# Cases whose unmanaged peak is one module's own forward, which recompute
# cannot split (the LSTM), or that hold what they save themselves (they are
# there for the error they raise).
NEED_NOT_EVICT = {"swap": ("inplace_saved_activation",), "recompute": ("inplace_saved_activation", "lstm")}
MODES = ("swap", "recompute")


def _outcome(result: dict) -> dict:
    """What must agree between the unmanaged and the managed run: the values,
    or which error (autograd's in-place error reads differently through
    tensorpager's handles, which also name the tensor)."""
    if "error" in result and INPLACE in result["error"]:
        return {"error": INPLACE}
    return result


def _matrix(mode: str) -> list[dict]:
    code = (f"import sys, runpy; sys.argv = ['autograd_cases.py', {mode!r}]; sys.path.insert(0, {HERE!r}); "
            f"runpy.run_path({os.path.join(HERE, 'autograd_cases.py')!r}, run_name='__main__')")
    proc = run_python(code, timeout=600)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def matrices() -> dict[str, list[dict]]:
    """Both modes' children at once: each runs on one thread
    (autograd_cases.py), so on two cores they take the time of one."""
    with ThreadPoolExecutor(len(MODES)) as pool:
        return dict(zip(MODES, pool.map(_matrix, MODES)))


@requires_ext
@pytest.mark.parametrize("mode", MODES)
def test_autograd_corner_cases_match_the_unmanaged_run(mode: str, matrices: dict[str, list[dict]]) -> None:
    rows = matrices[mode]
    refs = {r["case"]: r for r in rows if r["policy"] is None}
    assert len(refs) >= 20, sorted(refs)
    failures = []
    for case, ref in refs.items():
        runs = [r for r in rows if r["case"] == case and r["policy"] is not None]
        assert len(runs) == 4, case
        if case in RAISING:
            assert INPLACE in ref["result"].get("error", ""), (case, ref["result"])  # vanilla raises
        evicted = 0
        for r in runs:
            where = f"{case} policy={r['policy']} budget={r['budget']} (share {r['share']} of the unmanaged peak)"
            if _outcome(r["result"]) != _outcome(ref["result"]):
                failures.append(f"{where}: {str(r['result'])[:400]} != unmanaged {str(ref['result'])[:200]}")
            rt = r["runtime"]
            evicted += rt["offloads"] + rt["drops"]
            if mode == "recompute":
                assert rt["offloads"] == 0, where  # a 1-byte host pool: every eviction is a drop
        if evicted == 0 and case not in NEED_NOT_EVICT.get(mode, ()):
            failures.append(f"{case}: no policy evicted anything: the case tests nothing")
    assert not failures, "\n".join(failures)

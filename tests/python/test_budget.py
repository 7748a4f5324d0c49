"""Training under a budget on the CPU adapter (issue 4): three small models,
every policy, budgets of 1.0, 0.6 and 0.4 of the first step's peak; loss and
gradients bit-identical to the unmanaged run; swap, and recompute where the
host pool is capped. Each model runs in a child process (budget_models.py).
Then the budget's API, its ratio and its out-of-memory error, and its timeline.
Saved tensors under a budget (a rerun, an in-place change, tp.compress):
test_budget_saved_tensors.py."""

from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import requires_ext, run_python

HERE = os.path.dirname(os.path.abspath(__file__))


def _runs(model: str, host_budget: str | None = None) -> tuple[dict, list[dict]]:
    args = [model] + ([host_budget] if host_budget else [])
    code = f"import sys, runpy; sys.argv = ['budget_models.py', *{args!r}]; sys.path.insert(0, {HERE!r}); " \
           f"runpy.run_path({os.path.join(HERE, 'budget_models.py')!r}, run_name='__main__')"
    proc = run_python(code, timeout=900)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if host_budget:  # the runtime says once per budget that it recomputes instead of swapping
        assert "pinned host pool is full" in proc.stderr, proc.stderr[-2000:]
    return rows[0], rows[1:]


RATIOS = (1.0, 0.6, 0.4)  # budget_models.RATIOS (not imported: it imports torch)


def _stranded(r: dict, forced: str) -> bool:
    """The one out-of-memory this file tolerates: recompute-only `dtr` at 0.4
    with the host pool full, when the allocator says the free memory is
    fragmented. Which tensors DTR drops depends on measured recompute times,
    so the blocks left free differ from run to run. With plain segments about
    one run in twelve of the Transformer ended with 12 MiB cached but free in
    blocks of 1.5 MiB or less, a 2 MiB request, and only tensors left that
    nothing can recompute (CI saw it once). With expandable segments (the
    default since issue 14) none of 18 runs did; the tolerance stays until
    they have run longer. Any other out-of-memory, and any wrong value, still
    fails."""
    return (forced == "recompute" and r["policy"] == "dtr" and r["ratio"] == min(RATIOS)
            and "The free memory is fragmented" in r.get("oom", ""))


def _check(ref: dict, runs: list[dict], *, forced: str) -> None:
    assert len(runs) == 12
    for r in runs:
        where = f"{r['model']} policy={r['policy']} ratio={r['ratio']}"
        if _stranded(r, forced):
            print(f"{where}: out of memory on stranded free memory (issue 14): {r['oom']}")
            continue
        assert "oom" not in r, f"{where}: {r.get('oom')}"
        assert r["losses"] == ref["losses"], where
        assert r["grads"] == ref["grads"], where
        assert r["buffers"] == ref["buffers"], where
        # The allocator enforces the budget on reserved bytes, with no slack.
        assert r["budget"] is not None and r["peak_after_first"] <= r["budget"], where
        rt = r["runtime"]
        if r["ratio"] <= 0.6:
            assert rt["offloads"] + rt["drops"] > 0, where
            if forced == "recompute":
                assert rt["recomputes"] > 0, where


@requires_ext
@pytest.mark.parametrize("model", ["mlp", "resnet", "transformer"])
def test_swap_under_budget_is_bit_identical(model: str) -> None:
    ref, runs = _runs(model)
    _check(ref, runs, forced="swap")


@requires_ext
@pytest.mark.parametrize("model", ["mlp", "resnet", "transformer"])
def test_recompute_under_budget_is_bit_identical(model: str) -> None:
    # A 1 MiB host pool cannot hold the evicted activations: the runtime
    # falls back to dropping and recomputing them (dropout included: the RNG
    # state of each segment is restored).
    ref, runs = _runs(model, host_budget="1MiB")
    _check(ref, runs, forced="recompute")


@requires_ext
def test_budget_api_errors_and_stats() -> None:
    run_python(
        """
        import torch, tensorpager as tp
        tp.install(device="cpu")
        for bad, kind in [(0, ValueError), (-5, ValueError), (1.5, ValueError), ("12 parsecs", ValueError),
                          (True, TypeError)]:
            try:
                tp.budget(bad)
            except kind as e:
                assert str(e), bad
            else:
                raise AssertionError(f"{bad!r} accepted")
        try:
            tp.budget("1MiB", policy="fifo").__enter__()
        except ValueError as e:
            assert "fifo" in str(e) and "lru" in str(e), e
        else:
            raise AssertionError("unknown policy accepted")
        with tp.budget("64MiB", policy="lru") as b:
            try:
                with tp.budget("32MiB"):
                    pass
            except RuntimeError as e:
                assert "nest" in str(e)
            else:
                raise AssertionError("nested budget accepted")
            x = torch.randn(256, 256, requires_grad=True)
            y = (x * 2).relu().sum()
            y.backward()
            assert tp.get_budget() == 64 << 20
        assert tp.get_budget() is None
        s = tp.stats()
        assert s["tensorpager.runtime.active"] == 0 and s["tensorpager.runtime.tracked"] == 0, s
        """
    )


@requires_ext
def test_a_ratio_is_a_share_of_its_first_steps_peak_not_of_the_cache_before_it() -> None:
    # Note [A ratio measures its first step]. On an H200 the first of several
    # budgets in one process measured the cache two unmanaged runs had left
    # reserved, got 1.5 times the others' budget, and evicted nothing.
    run_python(
        """
        import torch, tensorpager as tp
        tp.install(device="cpu")
        big = torch.empty(64 << 20, dtype=torch.uint8)
        del big  # cached: reserved, not allocated
        assert tp.stats()["reserved_bytes.all.current"] >= 64 << 20
        with tp.budget(1.0):  # the whole peak: no floor to refuse it
            x = torch.randn(512, 512, requires_grad=True)  # 1 MiB
            (x * 2).relu().sum().backward()
            tp.step()
            budget = tp.get_budget()
        assert 0 < budget < 16 << 20, budget  # the step's few MiB, not the 64 MiB cached before it
        """
    )


@requires_ext
def test_budget_too_small_is_out_of_memory_and_loses_nothing() -> None:
    proc = run_python(
        """
        import torch, tensorpager as tp
        tp.install(device="cpu")
        w = torch.randn(512, 4096, requires_grad=True)
        x = torch.randn(1024, 512)          # 2 MiB the user holds: never evicted
        before = x.clone()
        tp.empty_cache()
        cap = tp.stats()["reserved_bytes.all.current"] + (1 << 20)
        with tp.budget(cap, recompute=False):
            try:
                h = (x @ w).relu()           # 16 MiB at once, far beyond the 1 MiB of room
            except torch.OutOfMemoryError as e:
                print("OOM", str(e).replace("\\n", " "))
        assert torch.equal(x, before)  # nothing lost
        """
    )
    assert "OOM" in proc.stdout and "Budget: " in proc.stdout, proc.stdout
    assert "runtime:" in proc.stdout, proc.stdout  # the runtime's breakdown is in the message


@requires_ext
def test_runtime_events_reach_the_timeline(tmp_path) -> None:
    path = tmp_path / "run.json"
    run_python(
        f"""
        import json, torch, torch.nn as nn, tensorpager as tp
        tp.install(device="cpu")
        torch.manual_seed(0)
        m = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(8)])
        x = torch.randn(4096, 256)
        with tp.budget(0.7, policy="lru", timeline={str(path)!r}):
            for _ in range(3):
                m(x).sum().backward()
        events = json.load(open({str(path)!r}))
        events = events["traceEvents"] if isinstance(events, dict) else events
        names = [e.get("name") for e in events]
        s = tp.stats()
        assert names.count("offload") >= 2 * s["tensorpager.runtime.offloads"] > 0, (names.count("offload"), s)
        assert "prefetch" in names and "eviction" in names, set(names)
        assert sum(n.startswith("step") for n in names if n) >= 2, set(names)
        """
    )

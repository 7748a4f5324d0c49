"""Training under a budget on the CPU adapter (issue 4): three small models,
every policy, budgets of 1.0, 0.6 and 0.4 of the first step's peak; loss and
gradients bit-identical to the unmanaged run; swap, and recompute where the
host pool is capped. Each model runs in a child process (budget_models.py)."""

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
def test_a_replay_stops_at_the_tensor_it_rebuilds() -> None:
    # Note [A replay stops at its tensor]: a block replayed for a tensor
    # saved early in its forward does not run the rest of it. Each block ends
    # in a probe that counts its calls; a replay that ran to the end calls it.
    proc = run_python("""
import torch, torch.nn as nn, tensorpager as tp
tp.install(device="cpu", host_budget="1B")  # every eviction is a drop
calls = [0]
class Probe(nn.Module):
    def forward(self, x):
        calls[0] += 1
        return x
def run(budget):
    torch.manual_seed(0)
    m = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), Probe())
                        for _ in range(6)])
    x = torch.randn(1024, 256)
    scope = tp.budget(budget) if budget else None
    if scope: scope.__enter__()
    try:
        loss = m(x).square().mean()
        before = calls[0]
        loss.backward()
        return [p.grad for p in m.parameters()], calls[0] - before
    finally:
        if scope: scope.__exit__(None, None, None)
tp.empty_cache(); tp.reset_peak_stats()
ref, _ = run(None)
peak = tp.stats()["allocated_bytes.all.peak"]
tp.empty_cache()
base = tp.stats()["allocated_bytes.all.current"]  # now with the reference's gradients
grads, probes = run(base + (peak - base) * 9 // 10)
print("SAME", all(torch.equal(a, b) for a, b in zip(ref, grads)))
print("RECOMPUTES", tp.stats()["tensorpager.runtime.recomputes"])
print("PROBES", probes)
""")
    out = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert out["SAME"] == "True"
    recomputes, probes = int(out["RECOMPUTES"]), int(out["PROBES"])
    assert recomputes > 0
    assert probes < recomputes, (probes, recomputes)  # some replays stopped before the probe


@requires_ext
def test_in_place_change_to_a_saved_tensor_raises_like_autograd() -> None:
    # With saved-tensor hooks autograd checks no versions; the runtime's
    # handles do, so a budget does not turn autograd's error into silently
    # wrong gradients (Note [In-place changes to saved tensors]).
    proc = run_python("""
import torch, tensorpager as tp
tp.install(device="cpu")
x = torch.randn(64, 64, requires_grad=True)
def attempt(managed):
    scope = tp.budget("64MiB") if managed else None
    if scope: scope.__enter__()
    try:
        y = torch.relu(x @ x)
        z = (y * y).sum()  # saves y
        y.add_(1)
        try:
            z.backward()
            return "no error"
        except RuntimeError as e:
            return str(e)
    finally:
        if scope: scope.__exit__(None, None, None)
plain, managed = attempt(False), attempt(True)
print("PLAIN", plain)
print("MANAGED", managed)
w = torch.relu(x @ x)
with tp.budget("64MiB"):
    v = (w * w).sum()
    v.backward()  # unchanged: no error
print("UNCHANGED OK")
""")
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert "modified by an inplace operation" in lines["PLAIN"]
    assert "modified by an inplace operation" in lines["MANAGED"], lines["MANAGED"]
    assert "expected version 0" in lines["MANAGED"]
    assert "UNCHANGED" in lines


@requires_ext
def test_tensors_compress_leaves_exact_are_managed_by_the_budget() -> None:
    # Note [Compress inside other hooks] in python/tensorpager/techniques/compress.py:
    # inside tp.compress the budget still sees every tensor compress does not
    # compress (here all of them: none is large enough), and gradients stay
    # those of the unmanaged run. recompute=False: no segment inputs are held,
    # so what the runtime tracks is what the pack hooks gave it.
    proc = run_python("""
import torch, tensorpager as tp
from torch import nn
tp.install(device="cpu", host_budget="1MiB")  # evictions recompute
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(*[m for _ in range(3) for m in (nn.Linear(256, 256), nn.ReLU())], nn.Linear(256, 10))
x, y = torch.randn(512, 256), torch.randint(0, 10, (512,))
def grads_and_tracked(managed, compressed):
    model.zero_grad()
    scope = tp.budget("1GiB", policy="lru", recompute=False) if managed else None
    if scope: scope.__enter__()
    try:
        if compressed:
            with tp.compress("bf16", model=model, min_bytes=1 << 40):
                loss = nn.functional.cross_entropy(model(x), y)
        else:
            loss = nn.functional.cross_entropy(model(x), y)
        tracked = tp.stats().get("tensorpager.runtime.tracked", 0) if managed else 0
        loss.backward()
        return [p.grad.clone() for p in model.parameters()], tracked
    finally:
        if scope: scope.__exit__(None, None, None)
ref, _ = grads_and_tracked(False, False)
plain, tracked_plain = grads_and_tracked(True, False)
comp, tracked_comp = grads_and_tracked(True, True)
print("IDENTICAL", all(torch.equal(a, b) for a, b in zip(ref, comp)) and all(torch.equal(a, b) for a, b in zip(ref, plain)))
print("TRACKED", tracked_plain, tracked_comp)

# Training at 0.6 of the peak, compress selecting the segments themselves:
# their tensors must stay evictable (compress once made a Python storage
# object for each, a second owner that made every one of them unevictable,
# and this ran out of memory) and recompute to the same gradients.
def train(managed):
    torch.manual_seed(0)
    net = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Dropout(0.1)) for _ in range(4)],
                        nn.Linear(256, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    torch.manual_seed(1)
    data, target = torch.randn(4096, 256), torch.randint(0, 10, (4096,))
    scope = tp.budget(0.6, policy="lru") if managed else None
    if scope: scope.__enter__()
    try:
        out = []
        for _ in range(3):
            opt.zero_grad()
            with tp.compress("Sequential=bf16", model=net, min_bytes=1 << 40):
                loss = nn.functional.cross_entropy(net(data), target)
            loss.backward()
            out.append([p.grad.clone() for p in net.parameters()])
            opt.step()
        return out
    finally:
        if scope: scope.__exit__(None, None, None)
ref, got = train(False), train(True)
print("TRAINED", all(torch.equal(a, b) for ga, gb in zip(ref, got) for a, b in zip(ga, gb)),
      tp.stats()["tensorpager.runtime.recomputes"])
""")
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert lines["IDENTICAL"] == "True"
    plain, compressed = (int(v) for v in lines["TRACKED"].split())
    assert plain > 0 and compressed == plain, lines["TRACKED"]
    identical, recomputes = lines["TRAINED"].split()
    assert identical == "True" and int(recomputes) > 0, lines["TRAINED"]


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

"""Saved tensors under tp.budget on the CPU adapter, each in a child process: a rerun stops at
the tensor it rebuilds, an in-place change to a saved tensor raises as autograd's would, and the
tensors tp.compress leaves exact are managed by the budget. The policy matrix and the budget's
API: test_budget.py."""

from __future__ import annotations

from conftest import requires_ext, run_python


@requires_ext
def test_a_rerun_stops_at_the_tensor_it_rebuilds() -> None:
    # Note [A rerun stops at its tensor]: a block rerun for a tensor
    # saved early in its forward does not run the rest of it. Each block ends
    # in a probe that counts its calls; a rerun that ran to the end calls it.
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
    assert probes < recomputes, (probes, recomputes)  # some reruns stopped before the probe


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
    # Note [Compress inside other hooks] in python/tensorpager/techniques/compress_pack.py:
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
def test_a_segments_rng_state_is_the_generators_and_is_shared_while_nothing_draws() -> None:
    # Note [One RNG state while the generator stands still]: the state a
    # segment records is torch.get_rng_state()'s, one tensor for as long as
    # the generator stands still, and a new one after anything draws (a
    # uniform, a cached normal sample, a reseed).
    proc = run_python("""
import torch
from tensorpager import _ext
snap = _ext.load().RngSnapshots()
first = snap.cpu()
assert snap.cpu() is first and torch.equal(first, torch.get_rng_state())
for draw in (lambda: torch.rand(3), lambda: torch.randn(1), lambda: torch.randn(1, dtype=torch.float64),
             lambda: torch.manual_seed(7), lambda: torch.randint(0, 9, (5,))):
    before = snap.cpu()
    draw()
    now = snap.cpu()
    assert now is not before and torch.equal(now, torch.get_rng_state()), draw
    assert snap.cpu() is now
print("ok")
""")
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout

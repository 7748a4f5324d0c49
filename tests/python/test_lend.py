"""Parameters and gradients lent to the runtime during backward (Note [Lending
parameters and gradients] in tensorpager/_lend.py; C++: Note [Lent storages]).

Each test runs in a child process on the CPU adapter (lend_child.py: the model,
whose backward peaks in its stem while the head's weights and gradients wait
for the optimizer). What else runs inside a backward while its state is lent
(an error, an optimizer, a rerun, a nested graph, the split stem):
test_lend_within_backward.py.
"""

from __future__ import annotations

from conftest import requires_ext
from lend_child import RECORDING, run_child


@requires_ext
def test_lending_trains_below_the_floor_of_what_stays_put_bit_identical() -> None:
    r = run_child("""
ref_losses, ref_state, _ = train()
losses, state, stats = train(0.7)
out = {"losses": losses == ref_losses,
       "state": all(torch.equal(state[k], ref_state[k]) for k in ref_state),
       "within": stats["reserved_bytes.all.peak"] <= stats["budget"],
       "offloaded": stats["tensorpager.runtime.offloaded_bytes"]}
try:
    train(0.7, lend=False)
    out["without"] = "trained"
except torch.OutOfMemoryError as e:
    out["without"] = str(e)
print(json.dumps(out))
""")
    assert r["losses"] and r["state"] and r["within"], r
    assert r["offloaded"] > 0, r
    # Without lending the head's weights and gradients stay on the device
    # through the stem's backward: the budget is refused at the first step.
    assert "The smallest budget that could work" in r["without"], r["without"]


@requires_ext
def test_budget_lends_by_the_extensions_default() -> None:
    # One place (config/config.hpp's budget_lends_by_default): tp.budget() reads
    # it from the extension, as tp-sim's --lend default reads it in C++.
    r = run_child("""
from tensorpager import _ext
with tp.budget(None) as b:
    default = b._tracker.lender is not None
with tp.budget(None, lend=not _ext.load().BUDGET_LENDS_BY_DEFAULT) as b:
    other = b._tracker.lender is not None
print(json.dumps({"constant": _ext.load().BUDGET_LENDS_BY_DEFAULT, "default": default, "other": other}))
""")
    assert r == {"constant": True, "default": True, "other": False}, r


@requires_ext
def test_a_second_backward_through_a_retained_graph_reads_its_parameters_again() -> None:
    r = run_child("""
ref_losses, ref_state, _ = train(retain=True)
losses, state, _ = train(0.8, retain=True)
print(json.dumps({"same": losses == ref_losses and all(torch.equal(state[k], ref_state[k]) for k in ref_state)}))
""")
    assert r["same"], r


@requires_ext
def test_what_is_lent_is_given_back_when_the_backward_ends() -> None:
    r = run_child("""
m = model()
seen = []
with tp.budget(None) as b:
    lender = b._tracker.lender
    for _ in range(2):
        out = m[2](m[1](m[0](X)))  # the stem, then the head
        out.register_hook(lambda g: seen.append(sorted(tuple(t.shape) for t, _ in lender.lent.values())))
        nn.functional.cross_entropy(m[3:](out), Y).backward()
        after = len(lender.lent)
        readable = all(torch.isfinite(p).all().item() for p in m.parameters())
print(json.dumps({"seen": seen, "after": after, "readable": readable}))
""")
    # In the stem's backward the head's weights and their gradients are lent
    # (a gradient from the next node that unpacks after its accumulation).
    for seen in r["seen"]:
        lent = [tuple(s) for s in seen]
        assert {(1024, 2048), (1024, 1024), (10, 1024)} <= set(lent), r
    assert [tuple(s) for s in r["seen"][0]].count((10, 1024)) == 2, r  # the last Linear's weight and gradient
    assert r["after"] == 0 and r["readable"], r


@requires_ext
def test_parameters_come_back_before_gradients() -> None:
    # Each restore allocates: given back in pairs, a weight and its gradient
    # sat side by side, and zero_grad left holes between the weights that
    # stay (Note [Lending parameters and gradients]). The loans are the real
    # ones; the proxy only records the order in which they are given back.
    r = run_child(RECORDING + """
m = model()
params = {id(p) for p in m.parameters()}
orders = []

def record(event, kind):
    if event == "back":
        orders[-1].append(kind)

with tp.budget(None) as b:
    b._tracker.lender.ext = RecordingExt(b._tracker.lender.ext, lambda t: "parameter" if id(t) in params else "gradient",
                                         record)
    for _ in range(2):
        orders.append([])
        nn.functional.cross_entropy(m(X), Y).backward()
print(json.dumps({"orders": orders}))
""")
    for order in r["orders"]:  # one per backward
        assert order.count("parameter") >= 3 and order.count("gradient") >= 3, order  # the head's, at least
        assert order == sorted(order, key=lambda kind: kind == "gradient"), order


@requires_ext
def test_a_lent_storage_is_swapped_bit_identical_and_unreadable_while_away() -> None:
    r = run_child("""
ext = tp._ext.load()
with tp.budget("20MiB", policy="lru"):
    p = torch.randn(1 << 20)  # 4 MiB, the program's
    want = p.clone()
    view = p[:16]
    shared = ext.lend(p) is None  # another tensor uses the storage: not lent
    del view
    p.untyped_storage()  # a Python storage object, as the timeline makes: still lent
    loan = ext.lend(p)
    before = loan.state
    big = torch.empty(3 << 20)  # 12 MiB more: p must go to the host
    away = loan.state
    try:
        p.sum()
        read = "read"
    except RuntimeError as e:
        read = str(e)
    del big
    loan.give_back()
    print(json.dumps({"shared": shared, "before": before, "away": away, "read": read, "back": loan.state,
                      "same": torch.equal(p, want), "again": ext.lend(torch.empty(0)) is None}))
""")
    assert r["shared"] and r["again"], r  # refused: a view of it alive; an empty tensor
    assert r["before"] == "resident" and r["away"] == "on_host", r
    # An error that says why, never a null pointer or stale bytes.
    assert "lent to the budget runtime" in r["read"] and "lend=False" in r["read"], r["read"]
    assert "manage:activations instead of manage:all" in r["read"], r["read"]
    assert r["back"] == "unmanaged" and r["same"], r


@requires_ext
def test_what_lives_across_steps_is_packed_in_long_lived_segments_bit_identical() -> None:
    # Note [Long-lived placement] in allocator/caching_allocator.hpp: loans
    # come back into long-lived blocks, under a budget (Note [Lent storages
    # come back packed]). The reference ImageNet order: zero_grad() just
    # before backward(), SGD with momentum.
    r = run_child("""
def where(m, opt):
    life = {}
    for seg in tp.snapshot():
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                life[b["address"]] = seg["lifetime"]
    # Small tensors stay in the small pool: Note [Long-lived placement].
    kinds = {"parameter": [p for p in m.parameters()], "gradient": [p.grad for p in m.parameters()],
             "momentum": [s["momentum_buffer"] for s in opt.state.values()]}
    out = {}
    for k, ts in kinds.items():
        for size, part in (("large", [t for t in ts if t.nbytes > 1 << 20]), ("small", [t for t in ts if t.nbytes <= 1 << 20])):
            out[k + " " + size] = sorted({life.get(t.data_ptr(), "?") for t in part})
    out["buffer"] = sorted({life.get(b.data_ptr(), "?") for b in m.buffers()})
    return out

def run(budget):
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    losses, placed = [], []
    with tp.budget(budget) if budget is not None else contextlib.nullcontext():
        for i in range(5):
            out = m(X)  # a step boundary: the ratio resolves at the third forward
            if i > 0:
                placed.append(where(m, opt))
            loss = nn.functional.cross_entropy(out, Y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item().hex())
    state = [t.clone() for t in m.state_dict().values()] + [s["momentum_buffer"].clone() for s in opt.state.values()]
    return losses, state, placed

ref_losses, ref_state, plain = run(None)
# 1.0: a budget, so loans end packed, with room for every move. A move takes
# free memory under the budget and never evicts for it (Note [Lent storages
# come back packed]): at 0.9 one gradient in about three runs found none at
# its loan's end, as the copies in flight had not yet freed theirs.
losses, state, placed = run(1.0)
print(json.dumps({"same": losses == ref_losses and all(torch.equal(a, b) for a, b in zip(ref_state, state)),
                  "plain": plain, "placed": placed}))
""")
    assert r["same"], r
    every = ["transient"]
    assert all(p == {k: every for k in p} for p in r["plain"]), r["plain"]  # no budget: nothing moves
    # The ratio is measured over two iterations, whose loans come back where they were.
    assert r["placed"][0] == r["placed"][1] == {k: every for k in r["placed"][0]}, r["placed"]
    packed = {k: ["long_lived"] if k.endswith("large") else every for k in r["placed"][0]}
    assert r["placed"][2] == r["placed"][3] == packed, r["placed"]  # the first budgeted backward's loans

"""Parameters and gradients lent to the runtime during backward (Note [Lending
parameters and gradients] in tensorpager/_lend.py; C++: Note [Lent storages]).

Each test runs in a child process on the CPU adapter. The model has a stem
of large activations (a convolution, BatchNorm and ReLU at 64x64) under a
head of large weights, so its backward peaks in the stem while the head's
weights and gradients wait for the optimizer: the shape of a ResNet's.
"""

from __future__ import annotations

import json

from conftest import requires_ext, run_python

MODEL = """
import contextlib, json, torch
from torch import nn
import tensorpager as tp
tp.install(device="cpu")

def model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(8), nn.Flatten(),
        nn.Linear(2048, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))

torch.manual_seed(1)
X, Y = torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,))

def train(ratio=None, lend=True, steps=3, retain=False):
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    losses = []
    with tp.budget(ratio, policy="lru", lend=lend) if ratio is not None else contextlib.nullcontext():
        for i in range(steps):
            if i == 1 and ratio is not None:
                tp.step()
                tp.reset_peak_stats()
            opt.zero_grad()
            loss = nn.functional.cross_entropy(m(X), Y)
            loss.backward(retain_graph=retain)
            if retain:
                loss.backward()  # a second backward through the retained graph
            opt.step()
            losses.append(loss.item().hex())
        stats = tp.stats()
        stats["budget"] = tp.get_budget()
    state = {k: v.detach().clone() for k, v in m.state_dict().items()}
    return losses, state, stats
"""

# The lender's ext, passed through: its real loans, each recorded as
# record("lend", label) when made and record("back", label) when given back,
# for the tensors that label(t) names (None: not recorded).
RECORDING = """
class RecordingLoan:
    def __init__(self, loan, label, record):
        self.loan, self.label, self.record = loan, label, record
    def give_back(self):
        self.record("back", self.label)
        self.loan.give_back()

class RecordingExt:
    def __init__(self, ext, label, record):
        self.ext, self.label, self.record = ext, label, record
    def lend(self, t):
        loan = self.ext.lend(t)
        label = None if loan is None else self.label(t)
        if label is None:
            return loan
        self.record("lend", label)
        return RecordingLoan(loan, label, self.record)
"""


def _child(body: str) -> dict:
    proc = run_python(MODEL + body, timeout=600)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@requires_ext
def test_lending_trains_below_the_floor_of_what_stays_put_bit_identical() -> None:
    r = _child("""
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
def test_a_second_backward_through_a_retained_graph_reads_its_parameters_again() -> None:
    r = _child("""
ref_losses, ref_state, _ = train(retain=True)
losses, state, _ = train(0.8, retain=True)
print(json.dumps({"same": losses == ref_losses and all(torch.equal(state[k], ref_state[k]) for k in ref_state)}))
""")
    assert r["same"], r


@requires_ext
def test_what_is_lent_is_given_back_when_the_backward_ends() -> None:
    r = _child("""
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
def test_a_backward_that_raises_gives_everything_back_before_the_handler_runs() -> None:
    # Note [A backward that raises gives everything back]: the handler saves
    # the state as plain PyTorch's at the same point, and training goes on the
    # same; also for an error raised in opt.step(), after the backward.
    r = _child("""
import io

def run(managed, error, where="backward"):
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)  # momentum would stay above the budget (the floor)
    saved, lent_in_handler, losses = None, None, []
    # At 0.8 the head's lent weights and gradients go to the host
    # during the stem's backward (test_lending_trains_below_the_floor...).
    with tp.budget(0.8, policy="lru") if managed else contextlib.nullcontext() as b:
        for i in range(4):
            if i == 1 and managed:
                tp.step()
                tp.reset_peak_stats()
            opt.zero_grad()
            out = m[2](m[1](m[0](X)))  # the stem, then the head
            def fail(*args):
                raise error("stop")
            if i == 2 and where == "backward":
                out.register_hook(fail)  # in the stem's backward, with the head's state lent
            hook = opt.register_step_pre_hook(fail) if i == 2 and where == "step" else None
            loss = nn.functional.cross_entropy(m[3:](out), Y)
            try:
                loss.backward()
                opt.step()
            except error:
                if hook is not None:
                    hook.remove()
                lent_in_handler = len(b._tracker.lender.lent) if managed else 0
                buf = io.BytesIO()
                torch.save({"model": m.state_dict(), "opt": opt.state_dict()}, buf)  # raised before
                saved = buf.getvalue()
                continue
            losses.append(loss.item().hex())
    state = [t.clone() for t in m.state_dict().values()]
    return saved, lent_in_handler, losses, state

def compare(error, where="backward"):  # its tensors go before the next round measures its peak
    ref_saved, _, ref_losses, ref_state = run(False, error, where)
    saved, lent, losses, state = run(True, error, where)
    a = torch.load(io.BytesIO(saved))
    b = torch.load(io.BytesIO(ref_saved))
    return {"lent": lent,
            "saved": all(torch.equal(a["model"][k], b["model"][k]) for k in b["model"]),
            "after": losses == ref_losses and all(torch.equal(x, y) for x, y in zip(state, ref_state))}

print(json.dumps({"RuntimeError": compare(RuntimeError), "KeyboardInterrupt": compare(KeyboardInterrupt),
                  "in opt.step()": compare(RuntimeError, "step")}))
""")
    for name in ("RuntimeError", "KeyboardInterrupt", "in opt.step()"):
        assert r[name] == {"lent": 0, "saved": True, "after": True}, (name, r)


@requires_ext
def test_optimizers_that_step_in_a_backward_or_on_another_thread_are_never_lent() -> None:
    # PyTorch's optimizer-step-in-backward recipe: one Adam per parameter,
    # stepped by its post-accumulate-grad hook. Its state was lent at the
    # backward's start and the steps read it on the host ("lent to the budget
    # runtime" at the second step). An optimizer that another thread steps
    # is not the budget's to lend either.
    r = _child("""
import threading

def run(ratio):
    m = model()
    opts = {p: torch.optim.Adam([p], lr=1e-3) for p in m.parameters()}
    def step(p):
        opts[p].step()
        opts[p].zero_grad()
    for p in m.parameters():
        p.register_post_accumulate_grad_hook(step)
    other = torch.optim.SGD([nn.Parameter(torch.zeros(1 << 18))], lr=0.1, momentum=0.9)
    other.param_groups[0]["params"][0].grad = torch.ones(1 << 18)
    losses, never = [], None
    with tp.budget(ratio, policy="lru") if ratio else contextlib.nullcontext() as b:
        for i in range(4):
            if i == 1 and ratio:
                tp.step()
                tp.reset_peak_stats()
            loss = nn.functional.cross_entropy(m(X), Y)
            loss.backward()
            losses.append(loss.item().hex())
            t = threading.Thread(target=other.step)
            t.start()
            t.join()
        if ratio:
            lender = b._tracker.lender
            never = [other in lender.never_lent, all(o in lender.never_lent for o in opts.values()),
                     len(lender.optimizers)]
        offloaded = tp.stats().get("tensorpager.runtime.offloaded_bytes", 0)
    return losses, [t.clone() for t in m.state_dict().values()], never, offloaded

ref_losses, ref_state, _, _ = run(None)
losses, state, never, offloaded = run(0.9)
print(json.dumps({"same": losses == ref_losses and all(torch.equal(a, b) for a, b in zip(state, ref_state)),
                  "never": never, "offloaded": offloaded}))
""")
    assert r["same"], r
    assert r["never"] == [True, True, 0], r
    assert r["offloaded"] > 0, r


@requires_ext
def test_parameters_come_back_before_gradients() -> None:
    # Each restore allocates: given back in pairs, a weight and its gradient
    # sat side by side, and zero_grad left holes between the weights that
    # stay (Note [Lending parameters and gradients]). The loans are the real
    # ones; the proxy only records the order in which they are given back.
    r = _child(RECORDING + """
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
def test_a_replay_lends_the_parameters_it_read_again() -> None:
    # Each block is a recompute segment whose last weight's gradient is done
    # before the GELU's saved input is needed: a replay of the block then reads
    # a lent weight, given back for it. Kept afterwards, a ResNet-18 stage's
    # weights stayed resident for the rest of the backward (9 MiB at its stem
    # under a 130 MiB budget, where `dtr` ran out of memory).
    proc = run_python("""
import json, torch
from torch import nn
import tensorpager as tp
tp.install(device="cpu", host_budget="1B")  # every eviction of an activation is a drop
""" + RECORDING + """

torch.manual_seed(0)
m = nn.Sequential(*[nn.Sequential(nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 512)) for _ in range(6)])
x = torch.randn(2048, 512)
names = {id(p): n for n, p in m.named_parameters()}
events = []

m(x).square().mean().backward()
peak = tp.stats()["allocated_bytes.all.peak"]
m.zero_grad(set_to_none=True)
tp.empty_cache()
with tp.budget(peak // 2, policy="lru") as b:
    lender = b._tracker.lender
    lender.ext = RecordingExt(lender.ext, lambda t: names.get(id(t)), lambda event, name: events.append((event, name)))
    give_back_all = lender.give_back_all
    def ended():
        events.append(("end", None))
        give_back_all()
    lender.give_back_all = ended
    m(x).square().mean().backward()
print(json.dumps({"events": events, "recomputes": tp.stats()["tensorpager.runtime.recomputes"]}))
""", timeout=600)
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    events = [tuple(e) for e in r["events"]]
    during = events[:events.index(("end", None))]
    replayed = {name for kind, name in during if kind == "back"}  # given back before the backward ended
    assert r["recomputes"] > 0 and replayed, r
    last = {name: kind for kind, name in during}
    assert all(last[name] == "lend" for name in replayed), [n for n in replayed if last[n] != "lend"]


@requires_ext
def test_a_lent_storage_is_swapped_bit_identical_and_unreadable_while_away() -> None:
    r = _child("""
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
def test_the_lender_keeps_no_graph_alive() -> None:
    # A graph built and differentiated inside a backward (a split chunk's
    # recompute): once it is dropped, what it saved is freed. The lender used
    # to hold the last node that unpacked, and with it that graph's leaf.
    r = _child("""
class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        before = tp.stats()["allocated_bytes.all.current"]
        with torch.enable_grad():
            y = (x * 1.0).detach().requires_grad_()  # 4 MiB
            (gy,) = torch.autograd.grad(torch.sin(y), [y], g)
        del y, gy
        kept.append(tp.stats()["allocated_bytes.all.current"] - before)
        return g * 2

kept = []
lin = nn.Linear(4, 4)
with tp.budget(1 << 30, policy="lru"):
    for _ in range(2):
        x = torch.randn(1024, 1024, requires_grad=True)
        Twice.apply(lin(x[:, :4]).sum() * x).sum().backward()
print(json.dumps({"kept": kept}))
""")
    assert r["kept"] == [0, 0], r


@requires_ext
def test_the_split_stem_lends_its_incoming_gradient_while_convolution_backward_runs() -> None:
    # Note [The split lends its incoming gradient] in tensorpager/techniques/split.py:
    # after its chunks, the split's backward reads its incoming gradient no
    # more, though autograd holds it through convolution_backward. It is lent
    # for that call and given back before the backward reaches the layer
    # under the stem (the hook on its input), with the gradients unchanged.
    r = _child(RECORDING + """
def stem_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.MaxPool2d(3, stride=2, padding=1), nn.Conv2d(16, 4, 3, padding=1), nn.Flatten(),
                         nn.Linear(4 * 16 * 16, 10))

def step(m, events):
    torch.manual_seed(2)
    x = torch.randn(4, 3, 64, 64, requires_grad=True)
    x.register_hook(lambda g: events.append(("input", None)))
    out = m(x)
    nn.functional.cross_entropy(out, Y[:4]).backward()
    return [x.grad] + [p.grad for p in m.parameters()]

ref = step(stem_net(), [])
m = stem_net()
split = tp.split_channels(m, chunk_bytes=1)  # chunks of 8 channels
incoming = (4, 16, 16, 16)  # the pool's output: the chain's
events = []
with tp.budget(None) as b:
    lender = b._tracker.lender
    lender.ext = RecordingExt(lender.ext, lambda t: "incoming" if tuple(t.shape) == incoming else None,
                              lambda event, name: events.append((event, name)))
    grads = step(m, events)
print(json.dumps({"events": events, "same": all(torch.equal(a, b) for a, b in zip(ref, grads)),
                  "split": split.chains != []}))
""")
    assert r["split"] and r["same"], r
    assert [tuple(e) for e in r["events"]] == [("lend", "incoming"), ("back", "incoming"), ("input", None)], r


@requires_ext
def test_what_lives_across_steps_is_packed_in_long_lived_segments_bit_identical() -> None:
    # Note [Long-lived placement] in allocator/caching_allocator.hpp: loans
    # come back into long-lived blocks, under a budget (Note [Lent storages
    # come back packed]). The reference ImageNet order: zero_grad() just
    # before backward(), SGD with momentum.
    r = _child("""
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
losses, state, placed = run(0.9)
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

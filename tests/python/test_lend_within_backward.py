"""Lending (Note [Lending parameters and gradients] in tensorpager/_lend.py) while something else runs
inside the backward: an error, an optimizer that steps there or on another thread, a segment's
rerun, a graph built and dropped there, the split stem's convolution_backward. Each test runs in a
child process on the CPU adapter (lend_child.py). Lending itself: test_lend.py.
"""

from __future__ import annotations

import json

from conftest import requires_ext, run_python
from lend_child import RECORDING, run_child


@requires_ext
def test_a_backward_that_raises_gives_everything_back_before_the_handler_runs() -> None:
    # Note [A backward that raises gives everything back]: the handler saves
    # the state as plain PyTorch's at the same point, and training goes on the
    # same; also for an error raised in opt.step(), after the backward.
    r = run_child("""
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
    r = run_child("""
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
def test_a_rerun_lends_the_parameters_it_read_again() -> None:
    # Each block is a recompute segment whose last weight's gradient is done
    # before the GELU's saved input is needed: a rerun of the block then reads
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
    rerun = {name for kind, name in during if kind == "back"}  # given back before the backward ended
    assert r["recomputes"] > 0 and rerun, r
    last = {name: kind for kind, name in during}
    assert all(last[name] == "lend" for name in rerun), [n for n in rerun if last[n] != "lend"]


@requires_ext
def test_the_lender_keeps_no_graph_alive() -> None:
    # A graph built and differentiated inside a backward (a split chunk's
    # recompute): once it is dropped, what it saved is freed. The lender used
    # to hold the last node that unpacked, and with it that graph's leaf.
    r = run_child("""
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
    # Note [The split lends its incoming gradient] in tensorpager/techniques/split_chain.py:
    # after its chunks, the split's backward reads its incoming gradient no
    # more, though autograd holds it through convolution_backward. It is lent
    # for that call and given back before the backward reaches the layer
    # under the stem (the hook on its input), with the gradients unchanged.
    r = run_child(RECORDING + """
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

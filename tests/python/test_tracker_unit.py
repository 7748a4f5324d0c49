"""The budget's tracker, segments, reruns and lender in process, against a fake extension.

The tracker (``_tracker.Tracker``) reaches ``_C`` only through the ``ext`` it
is given, as the C++ runtime reaches a device through its adapter; here that
is ``FakeExt``, which keeps every saved tensor where it is and records what
the tracker asked of it. So these tests need no build, install nothing, and
read as the contract: which saved tensors become recomputable by rerunning
their segment (Note [Segments] in ``_tracker.py``), that a rerun hands back
the very bytes of the first run (RNG and buffers included), which forwards
cannot be rerun, how many step boundaries an iteration makes, and that
what a backward lends comes back when it ends, or raises. The fake
extension is tracker_fakes.py; the split stem's loan, test_lend_unit.py.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from tracker_fakes import FakeExt, recomputable, tracking


def test_every_activation_reruns_to_the_same_bytes_dropout_and_batch_norm_included() -> None:
    def make() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.5), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 4))

    x = torch.randn(8, 16)
    model = make()
    ext = FakeExt()
    with tracking(ext):
        torch.manual_seed(1)
        loss = model(x).square().sum()
        handles = recomputable(ext)
        # The dropout mask, the batch norm's saved statistics, the ReLU's
        # output: made inside a segment, so a rerun of it makes them again.
        assert len(handles) >= 4, [tuple(h.tensor.shape) for h in ext.handles]
        running_mean = model[2].running_mean.clone()
        for h in handles:
            fn, cost_ns, version = h.recompute
            assert cost_ns > 0 and version == h.version
            again = fn()
            assert again.dtype == h.tensor.dtype and torch.equal(again, h.tensor)
        # A rerun counts nothing twice in the running statistics.
        assert torch.equal(model[2].running_mean, running_mean)
        loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]

    plain = make()
    torch.manual_seed(1)
    plain(x).square().sum().backward()
    assert all(torch.equal(a, p.grad) for a, p in zip(grads, plain.parameters()))


def test_a_parameter_is_kept_not_managed() -> None:
    model = nn.Sequential(nn.Linear(4, 4))
    ext = FakeExt()
    with tracking(ext):
        model(torch.randn(2, 4, requires_grad=True)).sum()  # the input's gradient needs the weight
    weight = [h for h in ext.handles if model[0].weight is h.tensor or model[0].weight is h.tensor._base]  # weight.t()
    assert weight and not any(h.managed for h in weight)


class AddsInPlace(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.add_(1)  # changes its input: a rerun would start from other values
        return torch.sigmoid(x)


class Doubles(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x * 2)


@pytest.mark.parametrize("why", ["input changed in place", "input in foreign memory"])
def test_a_forward_that_cannot_be_rerun_saves_nothing_recomputable(why: str) -> None:
    ext = FakeExt()
    x = torch.randn(4, 4, requires_grad=True) * 1  # not a leaf: it may change in place, and autograd saves
    module = AddsInPlace() if why == "input changed in place" else Doubles()
    if why == "input in foreign memory":
        ext.foreign.add(ext.storage_key(x))
    model = nn.Sequential(module)
    with tracking(ext):
        model(x).sum()
    assert any(h.managed for h in ext.handles)  # the sigmoid's output: saved, managed, yet not recomputable
    assert recomputable(ext) == []


def test_an_output_kept_as_the_next_segments_input_is_recomputable_by_its_producer() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Sigmoid(), nn.Linear(8, 8))
    ext = FakeExt()
    with tracking(ext):
        model(torch.randn(3, 8)).sum()
        first_out = [h for h in ext.handles if h.tensor.shape == (3, 8) and h.recompute is not None]
        assert first_out, "the Linear's output, saved by the Sigmoid, links to the Linear that made it"
        for h in first_out:
            assert torch.equal(h.recompute[0](), h.tensor)


def test_one_step_boundary_per_iteration_with_zero_grad_first() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ext = FakeExt()
    with tracking(ext) as tr:
        for _ in range(4):
            loss = model(torch.randn(5, 8)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        assert tr.boundaries == ext.boundaries == 3  # the last iteration ends with the block (Note [One step per iteration])


def test_a_gradient_anywhere_in_the_tree_is_found_once_shared_modules_and_empty_slots_included() -> None:
    """_steps._holds_gradients walks _modules and _parameters itself (it is asked at every boundary of a
    program without an optimizer): it must see what module.parameters() sees."""
    from tensorpager._steps import _holds_gradients

    shared = nn.Linear(4, 4)
    deep = nn.Sequential(nn.Linear(4, 4), nn.Sequential(shared, nn.ReLU()))
    model = nn.ModuleDict({"a": deep, "b": shared})
    model.register_module("empty", None)
    deep[0].register_parameter("bias", None)
    assert not _holds_gradients(model)
    shared.bias.grad = torch.zeros(4)
    assert _holds_gradients(model) and _holds_gradients(deep[1]) and not _holds_gradients(deep[0])
    shared.bias.grad = None
    deep[0].weight.grad = torch.zeros(4, 4)
    assert _holds_gradients(model) and not _holds_gradients(model["b"])


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))


def test_what_a_backward_lends_comes_back_when_it_ends() -> None:
    # Note [Lending parameters and gradients] in _lend.py: a parameter and its
    # gradient are lent once accumulated, and everything is given back at the
    # backward's end, before the optimizer can read it.
    model, ext = mlp(), FakeExt()
    with tracking(ext, lend=True) as tr:
        model(torch.randn(8, 16)).sum().backward()
        assert ext.loans, "the later layers' weights and gradients were lent while the backward ran"
        assert all(loan.back for loan in ext.loans) and not tr.lender.lent


def test_a_forward_whose_backward_never_ran_keeps_no_parameter_alive() -> None:
    # A forward interrupted (or an evaluation with grad on), then the model
    # dropped: in a managed process, whose block never ends, the lender's
    # count of saved parameters kept the parameters, and their gradients,
    # alive until the next backward ended (10 MiB through a new model's first
    # iteration in tests/python/test_interrupts.py, under the variable).
    import gc
    import weakref

    from tensorpager import _lend

    lender = _lend.Lender(FakeExt())
    try:
        model = mlp()
        model(torch.randn(8, 16)).sum().backward()
        saved = lender.saved(None, model[0].weight)  # the forward's pack, no backward to unpack it
        weight = weakref.ref(model[0].weight)
        del model, saved  # the model, and the forward's graph with what it saved
        gc.collect()
        assert weight() is None
        again = mlp()  # a new parameter, perhaps at the dead one's address, is counted afresh
        kept = lender.saved(None, again[0].weight)
        assert [[r() for r in copies] for p, copies, _ in lender.packs.values() if p() is again[0].weight] == [[kept]]
    finally:
        lender.close()


def test_a_graph_dropped_before_its_backward_leaves_no_count_that_keeps_a_parameter_from_its_loan() -> None:
    # A logged weight norm with grad on (the result read, its graph dropped)
    # packs the weights like a forward does. Counted and never unpacked, that
    # copy kept every such weight resident through the next backward: a missed
    # loan on every step that logs so.
    model, ext = mlp(), FakeExt()

    def lent_weights() -> set[int]:
        return {id(loan.tensor) for loan in ext.loans} & {id(p) for p in model.parameters()}

    with tracking(ext, lend=True):
        model(torch.randn(8, 16)).sum().backward()
        plain = lent_weights()
        assert plain, "the later layers' weights were lent"
        ext.loans.clear()
        norm = sum(p.pow(2).sum() for p in model.parameters())  # pow saves p
        assert norm.item() > 0
        del norm  # the graph goes with it, its saved weights never unpacked
        model(torch.randn(8, 16)).sum().backward()
        assert lent_weights() == plain


def test_forwards_without_a_backward_leave_the_lender_counting_only_live_copies() -> None:
    # An evaluation loop with grad on: each forward's graph saves the weight
    # and is dropped unpacked, and no backward ever clears the count; a
    # recurrent net's forward saves one weight many times, all alive.
    from tensorpager import _lend

    lender = _lend.Lender(FakeExt())
    try:
        weight = mlp()[0].weight
        for _ in range(200):
            lender.saved(None, weight)  # dropped at once, as its graph is
        (_, copies, _), = lender.packs.values()
        assert len(copies) <= _lend.PRUNE_AT
        alive = [lender.saved(None, weight) for _ in range(1000)]
        assert len(copies) <= 2 * len(alive)
        assert sum(r() is not None for r in copies) == len(alive)
    finally:
        lender.close()


def test_a_backward_that_raises_gives_everything_back_before_the_handler_runs() -> None:
    # Note [A backward that raises gives everything back] in _open_lender.py.
    model, ext = mlp(), FakeExt()

    def fail(grad: torch.Tensor) -> None:
        raise RuntimeError("a hook's error")

    with tracking(ext, lend=True) as tr:
        hidden = model[0](torch.randn(8, 16))
        hidden.register_hook(fail)  # runs late in the backward, after the later layers' loans
        out = model[4](model[3](model[2](model[1](hidden))))
        with pytest.raises(RuntimeError, match="a hook's error"):
            try:
                out.sum().backward()
            except RuntimeError:
                assert ext.loans and all(loan.back for loan in ext.loans) and not tr.lender.lent
                raise

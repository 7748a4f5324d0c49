"""The split stem's loan of its incoming gradient, in process against the fake extension.

Note [The split lends its incoming gradient] in ``techniques/split_chain.py``:
the split's backward takes a ``TensorLoan`` from the open lender
(``_lend.Lender.lend_held``) for its one ``convolution_backward`` call and
gives it back when the call returns or raises. The fake extension is
tracker_fakes.py (test_tracker_unit.py tests the tracker and lender with it).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from tracker_fakes import FakeExt, FakeLoan, tracking

from tensorpager.techniques.split import split_channels


def stem_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.MaxPool2d(3, stride=2, padding=1), nn.Conv2d(16, 4, 3, padding=1), nn.Flatten(),
                         nn.Linear(4 * 16 * 16, 10))


INCOMING = (4, 16, 16, 16)  # the split chain's output (the pool's), whose gradient its backward lends


def stem_step(model: nn.Module, at_input: Any = None) -> list[torch.Tensor]:
    """A step; at_input() runs as the input's gradient is computed (after the stem's backward, before the end)."""
    torch.manual_seed(2)
    x = torch.randn(4, 3, 64, 64, requires_grad=True)
    if at_input is not None:
        x.register_hook(lambda g: at_input())
    model(x).square().sum().backward()
    return [x.grad] + [p.grad for p in model.parameters()]


def watch_convolution_backward(monkeypatch: pytest.MonkeyPatch, before: Any) -> None:
    """The split's convolution_backward calls before(), then runs (autograd's own call it does not go through)."""
    run = torch.ops.aten.convolution_backward

    def watched(*args: Any) -> Any:
        before()
        return run(*args)

    monkeypatch.setattr(torch.ops.aten, "convolution_backward", watched)


def test_the_split_stem_lends_its_incoming_gradient_through_convolution_backward(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Note [The split lends its incoming gradient] in techniques/split_chain.py:
    # the split's backward holds a loan of its incoming gradient through the
    # call and gives it back when the call returns, not at the backward's end;
    # the gradients stay the unsplit model's.
    ref = stem_step(stem_net())
    model, ext = stem_net(), FakeExt()
    split_channels(model, chunk_bytes=1)  # chunks of 8 channels

    def incoming() -> list[FakeLoan]:
        return [loan for loan in ext.loans if tuple(loan.tensor.shape) == INCOMING]

    during: list[list[bool]] = []
    watch_convolution_backward(monkeypatch, lambda: during.append([loan.back for loan in incoming()]))
    with tracking(ext, lend=True) as tr:
        grads = stem_step(model, at_input=lambda: during.append([loan.back for loan in incoming()]))
        assert tr.lender.lend_held(grads[0]) is None  # outside a backward nothing is lent
    assert during == [[False], [True]], during  # lent in the call, back before the stem's input has its gradient
    assert all(loan.back for loan in incoming()) and not tr.lender.lent
    assert all(torch.equal(a, b) for a, b in zip(ref, grads))


class FailingOnceLoan(FakeLoan):
    """A loan whose first give-back fails, as a restore that finds no memory would."""

    def give_back(self) -> None:
        if not getattr(self, "failed", False):
            self.failed = True
            raise RuntimeError("no memory to give back")
        super().give_back()


def test_when_convolution_backward_raises_the_split_gives_its_loan_back_quietly(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The call's error is the one the program sees, not the failed give-back;
    # the loan that could not come back stays with the lender, and the
    # engine's give-back (Note [A backward that raises gives everything back])
    # brings it back before the handler runs.
    model, ext = stem_net(), FakeExt()
    split_channels(model, chunk_bytes=1)
    lend = ext.lend

    def lend_failing_once(t: torch.Tensor) -> FakeLoan:
        if tuple(t.shape) != INCOMING:
            return lend(t)
        ext.loans.append(FailingOnceLoan(t))
        return ext.loans[-1]

    ext.lend = lend_failing_once  # type: ignore[method-assign]

    def fail() -> None:
        raise RuntimeError("convolution_backward failed")

    watch_convolution_backward(monkeypatch, fail)
    with tracking(ext, lend=True) as tr:
        with pytest.raises(RuntimeError, match="convolution_backward failed"):
            try:
                stem_step(model)
            except RuntimeError:
                incoming = [loan for loan in ext.loans if isinstance(loan, FailingOnceLoan)]
                assert incoming and incoming[0].failed and all(loan.back for loan in ext.loans), ext.loans
                assert not tr.lender.lent
                raise

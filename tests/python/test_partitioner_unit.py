"""The partitioner budgets a budget block sets (Note [A partitioner budget for compiled regions] in
_partitioner.py), without the extension: the ladder, where it stops, and what is given back."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
import torch._functorch.config as config  # noqa: E402

from tensorpager import _partitioner  # noqa: E402


@pytest.fixture(autouse=True)
def _found_value() -> object:
    warnings.filterwarnings("ignore", "tensorpager: the budget's ratio", RuntimeWarning)
    with config.patch(activation_memory_budget=1.0, joint_custom_pass=None, enable_autograd_cache=True):
        yield


def test_each_lowering_sets_the_next_budget_below_the_one_in_force_and_says_so_until_none_is_left() -> None:
    p = _partitioner.Partitioner()
    got = []
    while True:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if not p.lower():
                assert not caught
                break
        got.append(config.activation_memory_budget)
        assert p.chosen == got[-1]
        assert [f"activation_memory_budget {got[-1]:g}," in str(w.message) for w in caught] == [True], caught
    assert got == list(_partitioner.LADDER)
    assert config.activation_memory_budget == _partitioner.LADDER[-1]  # the last stays in force
    assert config.joint_custom_pass is not None and not config.enable_autograd_cache
    p.close()
    assert (config.activation_memory_budget, config.joint_custom_pass, config.enable_autograd_cache) == (1.0, None, True)


def test_a_budget_the_user_set_lower_is_never_raised() -> None:
    config.activation_memory_budget = 0.3
    p = _partitioner.Partitioner()
    assert p.lower() and config.activation_memory_budget == 0.2
    p.close()
    assert config.activation_memory_budget == 0.3
    config.activation_memory_budget = 0.05
    assert not _partitioner.Partitioner().lower() and config.activation_memory_budget == 0.05


def test_closing_gives_back_the_budget_found_unless_someone_changed_it_since() -> None:
    p = _partitioner.Partitioner()
    p.close()  # nothing set: nothing to give back
    assert config.activation_memory_budget == 1.0
    assert p.lower() and p.lower()
    p.close()
    assert config.activation_memory_budget == 1.0
    q = _partitioner.Partitioner()
    assert q.lower()
    config.activation_memory_budget = 0.7  # the user's own, set while the block ran
    q.close()
    assert (config.activation_memory_budget, config.joint_custom_pass, config.enable_autograd_cache) == (0.7, None, True)


def test_the_refusal_names_every_budget_tried_and_the_ratio_of_the_lowest_peak() -> None:
    p = _partitioner.Partitioner()
    p.peaks = {0.5: 46 << 20, 0.2: 32 << 20, 0.1: 26 << 20}
    message = p.refusal(0.3, 66 << 20)
    assert "ratio 0.30 of the measured peak (66.0 MiB reserved) is 19.8 MiB" in message
    assert "0.5 peaked at 46.0 MiB, 0.2 peaked at 32.0 MiB, 0.1 peaked at 26.0 MiB" in message
    assert "at least 26.0 MiB (ratio 0.40 of the peak): the budget is refused" in message


def _dropout_step(backend: str | None) -> tuple[torch.Tensor, float]:
    """One forward and backward of a small MLP with dropout; its first weight's gradient and the
    next number the CPU generator draws."""
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Dropout(0.5), nn.Linear(64, 64), nn.GELU(),
                          nn.Dropout(0.5), nn.Linear(64, 1))
    x = torch.randn(64, 16)
    run = model if backend is None else torch.compile(model, backend=backend)
    torch.manual_seed(1)
    run(x).sum().backward()
    return model[0].weight.grad, torch.rand(1).item()


def test_under_every_partitioner_budget_dropout_keeps_the_mask_its_forward_drew() -> None:
    # torch 2.11's memory-budget partitioner may recompute a random operator in the backward,
    # drawing another mask (pytorch/pytorch#190758): checked here without the pass, the gradient
    # was another at 0.5 and 0.1 and the generator one draw further on.
    import torch._dynamo

    eager_grad, eager_next = _dropout_step(None)
    p = _partitioner.Partitioner()
    try:
        while p.lower():
            grad, drawn_next = _dropout_step("aot_eager")
            assert torch.equal(grad, eager_grad), p.chosen
            assert drawn_next == eager_next, p.chosen
    finally:
        p.close()
        torch._dynamo.reset()
    assert config.joint_custom_pass is None  # given back

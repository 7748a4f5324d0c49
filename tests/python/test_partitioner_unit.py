"""The partitioner budgets a budget block sets (Note [A partitioner budget for compiled regions] in
_partitioner.py), without the extension: the ladder, where it stops, and what is given back."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch._functorch.config as config  # noqa: E402

from tensorpager import _partitioner  # noqa: E402


@pytest.fixture(autouse=True)
def _found_value() -> object:
    with config.patch(activation_memory_budget=1.0):
        yield


def test_each_lowering_sets_the_next_budget_below_the_one_in_force_until_none_is_left() -> None:
    p = _partitioner.Partitioner()
    got = []
    while p.lower():
        got.append(config.activation_memory_budget)
        assert p.chosen == got[-1]
    assert got == list(_partitioner.LADDER)
    assert config.activation_memory_budget == _partitioner.LADDER[-1]  # the last stays in force


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
    assert config.activation_memory_budget == 0.7


def test_the_refusal_names_every_budget_tried_and_the_ratio_of_the_lowest_peak() -> None:
    p = _partitioner.Partitioner()
    p.peaks = {0.5: 46 << 20, 0.2: 32 << 20, 0.1: 26 << 20}
    message = p.refusal(0.3, 66 << 20)
    assert "ratio 0.30 of the first step's peak (66.0 MiB reserved) is 19.8 MiB" in message
    assert "0.5 peaked at 46.0 MiB, 0.2 peaked at 32.0 MiB, 0.1 peaked at 26.0 MiB" in message
    assert "at least 26.0 MiB (ratio 0.40 of the peak): the budget is refused" in message

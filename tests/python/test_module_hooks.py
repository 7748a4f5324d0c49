"""Note [One pair of global module hooks] (_module_hooks.py), in process: no
extension, no subprocess; a plain torch module and the hub."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.modules import module as nn_module

from tensorpager import _module_hooks


def global_hooks() -> tuple[int, int]:
    return len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks)


class Boom(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("boom")


def test_subscribers_share_one_pair_of_hooks_which_goes_with_the_last() -> None:
    before = global_hooks()
    a = _module_hooks.subscribe(lambda m, args: None, lambda m, args, *rest: None)
    b = _module_hooks.subscribe(lambda m, args: None, lambda m, args, *rest: None)
    assert global_hooks() == (before[0] + 1, before[1] + 1)
    a.remove()
    a.remove()  # idempotent
    assert global_hooks() == (before[0] + 1, before[1] + 1)
    b.remove()
    assert global_hooks() == before


def test_subscribers_are_called_in_order_with_what_pytorch_passes() -> None:
    calls: list[tuple[str, Any]] = []
    subs = [
        _module_hooks.subscribe(lambda m, args, n=n: calls.append((f"pre {n}", type(m).__name__)),
                                lambda m, args, *rest, n=n: calls.append((f"post {n}", len(rest))))
        for n in (1, 2)
    ]
    try:
        lin = nn.Linear(2, 2)
        lin(torch.ones(1, 2))
        assert calls == [("pre 1", "Linear"), ("pre 2", "Linear"), ("post 1", 2), ("post 2", 2)]  # kwargs, output
        calls.clear()
        with pytest.raises(ValueError, match="boom"):
            Boom()(torch.ones(1))
        # After a forward that raised, PyTorch passes (module, args, None).
        assert calls == [("pre 1", "Boom"), ("pre 2", "Boom"), ("post 1", 1), ("post 2", 1)]
    finally:
        for s in subs:
            s.remove()

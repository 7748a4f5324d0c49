"""Micro-batching: one optimizer step over a batch, run as n smaller passes.

The module is callable: ``tp.microbatch(step_fn, batch, n, optimizer=None)``
splits the batch into n micro-batches, runs forward and backward on each in
turn and accumulates the gradients (or folds them into AdamA), so activation
memory falls by about n while the step stays the full batch's::

    def step_fn(mb):
        x, y = mb
        return loss_fn(model(x), y)          # the micro-batch's mean loss

    loss = tp.microbatch(step_fn, (x, y), 4, optimizer=opt)   # steps opt

Loss scaling (Note [Micro-batch loss scaling] in ``hooks/optim/microbatch.hpp``;
``tensorpager::optim::microbatch`` is the C++ twin): with a plain optimizer
(or none) each micro-batch's loss is weighted by its share of the rows, so
``.grad`` ends up holding the full batch's mean-loss gradient; with
``tp.optim.AdamA`` the losses are left alone (AdamA divides by its
``micro_batches``), n must equal ``micro_batches`` and divide the batch.

BatchNorm (Note [BatchNorm under micro-batching]): a BatchNorm layer in
training mode normalises each micro-batch with its own statistics, so the
result differs from the full batch. ``microbatch`` warns
(``BatchNormMicrobatchWarning``) when that happens with n > 1; the remedy
offered is ``replace_batchnorm(model)``, which swaps BatchNorm for GroupNorm
(batch-independent) before training. It changes the model, so it is never
done for you. Silence the warning with ``warnings.filterwarnings`` when
per-micro-batch statistics are what you want (ghost batch norm).

Importing this module imports torch.
"""

from __future__ import annotations

import sys
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from typing import Any

import torch
from torch import nn

__all__ = ["microbatch", "replace_batchnorm", "BatchNormMicrobatchWarning"]


class BatchNormMicrobatchWarning(UserWarning):
    """A BatchNorm layer in training mode ran under micro-batching (n > 1)."""


def _split(batch: Any, n: int) -> tuple[list[Any], int]:
    """The n micro-batches of batch (same structure) and its number of rows."""
    if isinstance(batch, torch.Tensor):
        if batch.dim() == 0:
            raise ValueError("microbatch: a 0-dim tensor has no rows to split")
        return list(torch.tensor_split(batch, n)), batch.shape[0]
    if isinstance(batch, Mapping):
        keys = list(batch)
        parts = {k: _split(batch[k], n) if isinstance(batch[k], torch.Tensor) else None for k in keys}
        rows = _same_rows([p[1] for p in parts.values() if p is not None])
        return [{k: parts[k][0][i] if parts[k] is not None else batch[k] for k in keys} for i in range(n)], rows
    if isinstance(batch, Sequence) and not isinstance(batch, str):
        parts_seq = [_split(b, n) if isinstance(b, torch.Tensor) else None for b in batch]
        rows = _same_rows([p[1] for p in parts_seq if p is not None])
        make = (lambda items: type(batch)(*items)) if hasattr(batch, "_fields") else type(batch)  # namedtuple
        return [make([p[0][i] if p is not None else b for p, b in zip(parts_seq, batch)]) for i in range(n)], rows
    raise TypeError(f"microbatch: batch must be a tensor, or a sequence or mapping of tensors, not {type(batch).__name__}")


def _same_rows(rows: list[int]) -> int:
    if not rows:
        raise ValueError("microbatch: the batch holds no tensor to split")
    if any(r != rows[0] for r in rows):
        raise ValueError(f"microbatch: every batch tensor needs the same number of rows (dim 0); got {rows}")
    return rows[0]


def _rows(micro: Any) -> int:
    if isinstance(micro, torch.Tensor):
        return micro.shape[0]
    values = micro.values() if isinstance(micro, Mapping) else micro
    return next(v.shape[0] for v in values if isinstance(v, torch.Tensor))


def _adama_class() -> type | None:
    optim = sys.modules.get("tensorpager.techniques.optim")  # no AdamA can exist unless it was imported
    return getattr(optim, "AdamA", None)


def microbatch(
    step_fn: Callable[[Any], torch.Tensor],
    batch: Any,
    n: int,
    *,
    optimizer: torch.optim.Optimizer | None = None,
) -> torch.Tensor:
    """Runs step_fn and backward on n micro-batches of batch; steps optimizer.

    Args:
        step_fn: takes one micro-batch (the structure of ``batch``) and returns
            its mean loss, a scalar tensor.
        batch: a tensor, or a list/tuple/dict whose tensors share their first
            dimension (other values are passed to every micro-batch as they are).
        n: the number of micro-batches, 1 <= n <= rows; sizes differ by at
            most one row when n does not divide the batch.
        optimizer: when given, ``optimizer.step()`` and ``zero_grad()`` run
            after the last micro-batch. Pass the AdamA here when it is one.

    Returns:
        The batch's mean loss (detached).

    Raises:
        ValueError: n out of range, rows that differ, or an AdamA whose
            micro_batches is not n or that cannot split the batch evenly;
            nothing has run then.
        RuntimeError: an AdamA consumed gradients without being passed as
            ``optimizer``; its moments then hold a wrongly scaled micro-batch.
    """
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"microbatch: n = {n!r}; accepted: an integer >= 1")
    micro_batches, rows = _split(batch, max(n, 1))
    if not 1 <= n <= rows:
        raise ValueError(f"microbatch: n = {n} micro-batches for {rows} rows; accepted: 1 <= n <= {rows}")
    adama = _adama_class()
    folds_into_adama = adama is not None and isinstance(optimizer, adama)
    if folds_into_adama:
        assert optimizer is not None
        ms = {g["micro_batches"] for g in optimizer.param_groups}
        if ms != {n} or rows % n:
            raise ValueError(f"microbatch: with AdamA, n ({n}) must equal its micro_batches ({sorted(ms)}) and "
                             f"divide the batch ({rows} rows)")
    optim_module = sys.modules.get("tensorpager.techniques.optim")
    folds_before = getattr(optim_module, "_fold_count", 0)

    warned = False

    def warn_batchnorm(module: nn.Module, args: Any) -> None:
        nonlocal warned
        if not warned and isinstance(module, nn.modules.batchnorm._BatchNorm) and module.training:
            warned = True
            warnings.warn(
                f"microbatch: {type(module).__name__} in training mode normalises each of the {n} micro-batches "
                "with that micro-batch's statistics, not the batch's. Use "
                "tensorpager.microbatch.replace_batchnorm(model) (GroupNorm) for batch-independent results, or "
                "filter this warning if per-micro-batch statistics are intended.",
                BatchNormMicrobatchWarning,
                stacklevel=3,
            )

    handle = nn.modules.module.register_module_forward_pre_hook(warn_batchnorm) if n > 1 else None
    total: torch.Tensor | None = None
    try:
        for i, micro in enumerate(micro_batches):
            share = _rows(micro) / rows
            loss = step_fn(micro)
            (loss if folds_into_adama else loss * share).backward()
            if i == 0 and not folds_into_adama and getattr(optim_module, "_fold_count", 0) != folds_before:
                raise RuntimeError(
                    "microbatch: an AdamA consumed this micro-batch's gradients, but was not passed as optimizer=, "
                    "so the loss was scaled by its share of the batch and AdamA's moments now hold a wrongly scaled "
                    "micro-batch. Pass optimizer=<the AdamA> (and reload its state or redo the step)."
                )
            part = loss.detach() * share
            total = part if total is None else total + part
    finally:
        if handle is not None:
            handle.remove()
    if optimizer is not None:
        optimizer.step()
        optimizer.zero_grad()
    assert total is not None
    return total


def replace_batchnorm(model: nn.Module, num_groups: int = 32) -> nn.Module:
    """Replaces every BatchNorm layer of model, in place, by a GroupNorm.

    Each BatchNorm over C channels becomes ``GroupNorm(g, C)`` with g the
    largest divisor of C not above num_groups, the same eps and affine
    setting, and the BatchNorm's affine weight and bias copied. Running
    statistics are dropped (GroupNorm has none). Returns model (or the new
    layer when model itself is a BatchNorm).
    """
    if num_groups < 1:
        raise ValueError(f"replace_batchnorm: num_groups = {num_groups}; accepted: >= 1")

    def convert(bn: nn.modules.batchnorm._BatchNorm) -> nn.GroupNorm:
        c = bn.num_features
        g = max(d for d in range(1, min(num_groups, c) + 1) if c % d == 0)
        gn = nn.GroupNorm(g, c, eps=bn.eps, affine=bn.affine)
        if bn.affine:
            with torch.no_grad():
                gn.weight.copy_(bn.weight)
                gn.bias.copy_(bn.bias)
        like = next(chain(bn.parameters(), bn.buffers()), None)
        return gn if like is None else gn.to(like.device)

    if isinstance(model, nn.modules.batchnorm._BatchNorm):
        return convert(model)
    for name, child in list(model.named_children()):
        if isinstance(child, nn.modules.batchnorm._BatchNorm):
            setattr(model, name, convert(child))
        else:
            replace_batchnorm(child, num_groups)
    return model


class _CallableModule(types.ModuleType):
    """Makes ``tensorpager.microbatch`` callable: ``tp.microbatch(...)``."""

    def __call__(self, step_fn: Callable[[Any], torch.Tensor], batch: Any, n: int, *,
                 optimizer: torch.optim.Optimizer | None = None) -> torch.Tensor:
        return microbatch(step_fn, batch, n, optimizer=optimizer)


sys.modules[__name__].__class__ = _CallableModule

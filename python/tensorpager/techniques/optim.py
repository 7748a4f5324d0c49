"""AdamA (Adam Accumulation): Adam over micro-batches without keeping gradients.

Gradient accumulation keeps a full set of gradients alive until the optimizer
step. AdamA folds each micro-batch's gradient into Adam's moments as soon as
autograd produces it (a post-accumulate-grad hook on every parameter) and
frees it, so the gradients of the model are never all resident::

    opt = tp.optim.AdamA(model.parameters(), lr=1e-3, micro_batches=4)
    for chunk in batch.chunk(4):
        loss_fn(model(chunk)).backward()   # mean loss of the micro-batch, unscaled
    opt.step()                             # one Adam update

The rule (Note [AdamA update rule] in ``hooks/optim/adama_kernels.hpp``):
decay m and v once per step, add ``(1-b1) g_i / M`` and ``(1-b2) g_i^2 / M``
per micro-batch, then the usual bias-corrected update. With
``micro_batches=1`` this is ``torch.optim.Adam`` (``decoupled=True``: AdamW).
The arithmetic is the C++ kernels LibTorch programs use
(``tensorpager::optim::adama``); the state lives in ``torch.optim.Optimizer``'s
structures, so ``state_dict()``, ``load_state_dict()`` and learning-rate
schedulers work as for any torch optimizer.

Importing this module imports torch and loads ``tensorpager._C``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch

from tensorpager import _ext

__all__ = ["AdamA"]

#: Folds performed by any AdamA in this process. tensorpager.microbatch reads
#: it to notice an AdamA consuming gradients it was not told about.
_fold_count = 0

#: id(parameter) -> (the parameter, its AdamA), both weakly: a parameter's
#: gradient can feed one AdamA only. Keyed by id because tensors compare
#: elementwise; the parameter's weakref tells a reused id apart.
_owners: dict[int, tuple[weakref.ReferenceType[torch.Tensor], weakref.ReferenceType[AdamA]]] = {}


def _owner_of(p: torch.Tensor) -> AdamA | None:
    entry = _owners.get(id(p))
    if entry is None or entry[0]() is not p:
        return None
    return entry[1]()


class AdamA(torch.optim.Optimizer):
    """Adam whose gradients are consumed per micro-batch and freed at once.

    Args:
        params: parameters or parameter groups, as for ``torch.optim.Adam``.
        lr, betas, eps, weight_decay: as ``torch.optim.Adam``.
        decoupled: apply weight decay to the parameter (AdamW) instead of
            adding it to the gradient (Adam's L2).
        micro_batches: M, the number of backward passes per ``step()``; each
            folded gradient counts ``1/M``. The loss of each micro-batch is its
            mean loss, not divided by M.

    Behaviour:
        * Every parameter that requires grad gets a post-accumulate-grad
          hook; after each backward its ``.grad`` is ``None``.
        * ``step()`` folds any ``.grad`` still present (one more micro-batch:
          a gradient written by hand, say), then updates every parameter that
          received a fold since the last step; the others are left alone.
        * ``state_dict()`` holds per parameter ``step`` (a float tensor, as in
          Adam), ``exp_avg``, ``exp_avg_sq`` and ``folds`` (micro-batches
          folded since the last step, so a checkpoint taken mid-step resumes
          exactly).
        * ``remove_hooks()`` detaches the hooks; they are also dropped with
          the optimizer.

    Thread-safety: as torch optimizers; hooks run on autograd's threads, the
    GIL serialises them. Raises ValueError for hyper-parameters out of range,
    sparse gradients, or a parameter that belongs to another AdamA.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decoupled: bool = False,
        *,
        micro_batches: int = 1,
    ) -> None:
        self._C = _ext.load()
        self._hooks: dict[int, Any] = {}
        defaults = dict(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, decoupled=decoupled, micro_batches=micro_batches
        )
        self._validate(defaults)
        super().__init__(params, defaults)

    # -- parameter groups ----------------------------------------------------------

    def _validate(self, group: dict[str, Any]) -> None:
        beta1, beta2 = group["betas"]
        micro_batches = group["micro_batches"]
        if isinstance(micro_batches, bool) or not isinstance(micro_batches, int):
            raise ValueError(f"AdamA: micro_batches = {micro_batches!r}; accepted: an integer >= 1")
        self._C.adama_validate(
            float(group["lr"]), float(beta1), float(beta2), float(group["eps"]), float(group["weight_decay"]),
            micro_batches,
        )

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Adds a group (as torch.optim.Optimizer) and hooks its parameters."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        self._validate(group)
        ref = weakref.ref(self)
        for p in group["params"]:
            if not p.requires_grad or id(p) in self._hooks:
                continue
            owner = _owner_of(p)
            if owner is not None and owner is not self:
                raise ValueError(
                    "AdamA: a parameter is already managed by another AdamA; each parameter can feed one AdamA "
                    "(its gradient is consumed). Call remove_hooks() on the other one first"
                )
            _owners[id(p)] = (weakref.ref(p), ref)
            self._hooks[id(p)] = p.register_post_accumulate_grad_hook(_make_hook(ref, len(self.param_groups) - 1))

    def remove_hooks(self) -> None:
        """Detaches the post-accumulate-grad hooks: gradients then accumulate
        in ``.grad`` as usual, and ``step()`` folds them as one micro-batch."""
        for key, handle in self._hooks.items():
            handle.remove()
            _owners.pop(key, None)
        self._hooks.clear()

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickling or deep-copying gives an optimizer without hooks (its
        parameters may feed another AdamA): step() folds what ``.grad`` holds."""
        super().__setstate__(state)
        self._C = _ext.load()
        self._hooks = {}

    def __del__(self) -> None:
        for key, handle in getattr(self, "_hooks", {}).items():
            handle.remove()
            _owners.pop(key, None)

    # -- the rule --------------------------------------------------------------------

    def _fold(self, p: torch.Tensor, group: dict[str, Any]) -> None:
        """Folds p.grad into p's moments and frees it (Note [AdamA update rule])."""
        global _fold_count
        grad = p.grad
        if grad is None:
            return
        if grad.is_sparse:
            raise ValueError("AdamA: sparse gradients are not supported (as torch.optim.Adam)")
        state = self.state[p]
        if len(state) == 0:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["folds"] = 0
        beta1, beta2 = group["betas"]
        self._C.adama_fold(
            p.detach(), grad.detach(), state["exp_avg"], state["exp_avg_sq"], state["folds"] == 0,
            float(beta1), float(beta2), float(group["weight_decay"]), bool(group["decoupled"]),
            int(group["micro_batches"]),
        )
        state["folds"] += 1
        _fold_count += 1
        p.grad = None

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Folds what gradients remain, then updates every parameter that was
        folded since the last step. Returns the closure's loss, if any."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is not None:
                    self._fold(p, group)
                state = self.state.get(p)
                if not state or state["folds"] == 0:
                    continue
                state["step"] += 1
                self._C.adama_update(
                    p.detach(), state["exp_avg"], state["exp_avg_sq"], int(state["step"].item()), float(group["lr"]),
                    float(beta1), float(beta2), float(group["eps"]), float(group["weight_decay"]),
                    bool(group["decoupled"]),
                )
                state["folds"] = 0
        return loss


def _make_hook(ref: weakref.ReferenceType[AdamA], group_index: int) -> Callable[[torch.Tensor], None]:
    """The post-accumulate-grad hook of one parameter. Holds the optimizer
    weakly, so the parameters do not keep it alive."""

    def hook(p: torch.Tensor) -> None:
        opt = ref()
        if opt is not None:
            with torch.no_grad():
                opt._fold(p, opt.param_groups[group_index])

    return hook

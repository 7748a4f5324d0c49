"""Where a training iteration ends, for the tracker of a budget block (``_tracker.py``).

Note [Where an iteration ends]
A step is one training iteration. Where the budget's thread steps an
optimizer, a boundary is the first outermost forward with grad after an
optimizer step has finished: gradient accumulation (several backwards per
step), LBFGS (a step that calls its closure, a forward and a backward, several
times) and an optimizer step that raised then add no boundary. Until an
optimizer step has begun (PyTorch's global step hooks), a boundary is the first
such forward after a backward, as for scripts without an optimizer, except
while the outermost module holds gradients that an existing optimizer of its
parameters has yet to step on (an accumulation whose optimizer has not stepped
yet; at most ``MAX_DEFERRED`` times; the optimizers are looked for among all
objects, only before the first optimizer step). A forward inside a backward
(the reentrant ``torch.utils.checkpoint`` recomputing its block) is never a
boundary.
  A ratio is resolved at a boundary (Note [A ratio is a share of a steady
iteration] in hooks/budget/budget_api.hpp): where an optimizer steps, at the
end of the first iteration that began after an optimizer step had finished
(``steady``); before any optimizer step, at the first boundary. An optimizer
that steps for the first time after the ratio was resolved makes the runtime
measure it again. A step marked by hand (``tp.step()``) resolves a pending
ratio at once: the program says where its iterations end.
"""

from __future__ import annotations

import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

MAX_DEFERRED = 64  # forwards after a backward that wait for an accumulation's first optimizer step


class Steps:
    """The optimizer steps of one thread, and the boundaries they make."""

    def __init__(self, thread: Callable[[], int], first_optimizer_step: Callable[[], None]) -> None:
        self.thread = thread  # the budget's thread, as the tracker follows it
        self.first_optimizer_step = first_optimizer_step  # called as the first one begins
        self.begun = 0  # optimizer steps begun on the thread
        self.finished = 0  # and finished
        self.finished_at_boundary = 0
        self.boundaries_after_optimizer = 0  # since the first optimizer step finished
        self.deferred = 0  # forwards that were no boundary: gradients waiting for a first step
        self.no_optimizer = False  # gradients were found with no optimizer of them
        import torch.optim.optimizer as optim

        self._hooks = (optim.register_optimizer_step_pre_hook(self._begins),
                       optim.register_optimizer_step_post_hook(self._finished))

    def _begins(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if threading.get_ident() != self.thread():
            return
        self.begun += 1
        if self.begun == 1:
            self.first_optimizer_step()

    def _finished(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if threading.get_ident() == self.thread():
            self.finished += 1

    def ends_iteration(self, module: Any, backward_ran: bool) -> bool:
        """Whether an outermost forward with grad of module starts a new iteration."""
        import torch

        if torch._C._current_graph_task_id() != -1:
            return False  # a forward inside a backward (a reentrant checkpoint's recompute)
        if self.begun:
            return self.finished > self.finished_at_boundary
        if not backward_ran:
            return False
        if self.deferred < MAX_DEFERRED and self._accumulates_for_an_optimizer(module):
            self.deferred += 1
            return False
        return True

    def boundary(self) -> None:
        """Counts a boundary, made here or by hand."""
        if self.finished > self.finished_at_boundary:
            self.finished_at_boundary = self.finished
            self.boundaries_after_optimizer += 1
        elif self.finished:
            self.boundaries_after_optimizer += 1  # tp.step() called by hand between optimizer steps

    @property
    def steady(self) -> bool:
        """Whether the iteration that just ended may resolve a ratio."""
        return not self.begun or self.boundaries_after_optimizer >= 2

    def _accumulates_for_an_optimizer(self, module: Any) -> bool:
        """Whether module holds gradients that an optimizer of its parameters has yet to step on."""
        if self.no_optimizer or not _holds_gradients(module):
            return False
        import gc

        import torch

        params = {id(p) for p in module.parameters()}
        for o in gc.get_objects():  # before the first optimizer step only, a few times at most
            if issubclass(type(o), torch.optim.Optimizer) and any(  # type(): a dead weak proxy raises on isinstance
                    id(p) in params for group in o.param_groups for p in group["params"]):
                return True
        self.no_optimizer = True  # a backward is a step here (checked once)
        return False

    def close(self) -> None:
        """Removes the optimizer step hooks (again: nothing)."""
        for h in self._hooks:
            h.remove()
        self._hooks = ()


def _holds_gradients(module: Any) -> bool:
    """Whether a parameter of module or of its submodules has a gradient.

    Asked at every boundary of a program without an optimizer that sets its
    gradients to None, so walked through ``_modules`` and ``_parameters``
    directly: ``module.parameters()`` builds named generators per module, 106
    microseconds a step for the 97 modules of bench/hook_cost_bench.py, this
    walk 35."""
    seen = {id(module)}
    todo = [module]
    while todo:
        m = todo.pop()
        for p in m._parameters.values():
            if p is not None and p.grad is not None:
                return True
        for c in m._modules.values():
            if c is not None and id(c) not in seen:
                seen.add(id(c))
                todo.append(c)
    return False

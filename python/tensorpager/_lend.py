"""Lending parameters and gradients to the runtime while a backward runs.

Note [Lending parameters and gradients]
A backward's peak is often where no activation can help: a ResNet's stem
holds its activation gradients and BatchNorm operands while every layer's
weights and gradients sit on the device, unused until the optimizer step
(for a ResNet-18, over half as much again as the stem holds). So, under a
budget, the program lends them to the runtime, which may swap them to host
memory like saved activations (C++: Note [Lent storages] in
hooks/budget/saved_storage.hpp). The program still holds them, so the
lender must see that nothing reads a lent storage:

- A parameter and its gradient are lent once its AccumulateGrad has run (a
  post-accumulate-grad hook; autograd runs it once per backward, after every
  node that used the parameter), and only from the next node that unpacks a
  saved tensor on (``torch._C._current_autograd_node()`` changes), so that
  hooks which run with the accumulation (an optimizer in backward) see both
  in place. The parameter also needs every copy of it that autograd saved
  (counted at pack, by weak references) to have been unpacked or dropped
  with its graph; a parameter with no count (a second backward through a
  retained graph) stays.
- Optimizer state (momentum, Adam's moments) is lent when the backward
  starts: its reader is the optimizer's step, after the backward. The
  lender learns the optimizers from a global step hook, so state is lent
  from the second step on, and only of optimizers that step on the managed
  thread outside a backward: one that steps inside a backward (PyTorch's
  optimizer-step-in-backward recipe, a per-parameter step in a
  post-accumulate-grad hook) reads its state there, and one that another
  thread steps (left alone by the budget) reads it whenever that thread
  runs. Neither is ever lent.
- Everything lent is given back, restored and untracked, when the backward
  ends (an engine callback), before the optimizer or the next forward can
  read it; and when the backward raises (Note [A backward that raises gives
  everything back] in _open_lender.py). Also, as a fallback, at the next
  step boundary and when the budget ends. A saved parameter that is unpacked
  again (a second backward through a retained graph) is given back first, and
  so is a parameter of a segment that tensorpager reruns, which is lent
  again once the rerun has run.
- A node's backward may lend, for one call, a tensor it holds but reads no
  more (``Lender.lend_held``, which returns a ``TensorLoan`` the caller gives
  back): the split stem's backward lends its incoming gradient while
  ``convolution_backward`` allocates, and gives it back when the call returns
  or raises (Note [The split lends its incoming gradient] in
  techniques/split_chain.py).
- Parameters and optimizer state are given back before gradients, since
  they outlive them: each restore allocates, and lent in pairs a weight and
  its gradient came back side by side, so the next zero_grad left holes
  the size of each weight between weights that stay, in granules the
  allocator cannot unmap (enough to run a ResNet-18 whose stem is split
  out of memory at 0.3 of its peak).
- Nothing is lent while ``torch.distributed`` is initialized (DDP's
  collectives read gradients and buckets outside autograd's order), nor a
  tensor that shares its storage with any other tensor at that moment (a
  view, a flattened parameter, a gradient autograd stole while the same
  tensor flows on to another node): the C++ side checks.

What the protocol cannot see is a program that reads a lent parameter or
gradient in a hook later in the backward, or a custom autograd Function that
keeps a parameter on ``ctx`` instead of saving it. While its bytes are away
such a read raises an error that says so (Note [Lent storages]), never a
wrong value or a crash. ``tp.budget`` lends unless ``lend=False``; a managed
process lends under ``manage:all``, not under ``manage:activations``.
Measured: docs/decisions.md, Note [Lending parameters and gradients].
"""

from __future__ import annotations

import threading
import weakref

from tensorpager import _open_lender

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable


MIN_STATE_BYTES = 64 << 10  # optimizer state smaller than this stays put
PRUNE_AT = 8  # a parameter's saved copies counted before the dead ones are dropped (Lender.saved)

class SavedParameter:
    """What the pack hook returns for a parameter (or a view of one)."""

    # __weakref__: the lender counts the copies not yet unpacked by weak
    # references (Lender.packs), never by a __del__: Python code run from a
    # destructor swallows a KeyboardInterrupt that lands in it (the SIGINT
    # test of tests/python/test_interrupts.py lost 2 of its 5 interrupts so).
    __slots__ = ("handle", "param", "__weakref__")

    def __init__(self, handle: Any, param: Any) -> None:
        self.handle, self.param = handle, param

    def unpack(self) -> Any:
        return self.handle.unpack()


class TensorLoan:
    """A tensor lent by the backward that holds it (``Lender.lend_held``), until that backward gives it back.
    The backward's end gives it back too (give_back_all()); giving it back again does nothing."""

    __slots__ = ("lender", "key")

    def __init__(self, lender: Lender, key: int) -> None:
        self.lender, self.key = lender, key

    def give_back(self, quiet: bool = False) -> None:
        """Resident again. quiet: a failure is not raised (the caller's error is the one to see); the loan
        then stays with the lender, for give_back_all()."""
        self.lender._give_back(self.key, quiet)


class Lender:
    """Note [Lending parameters and gradients], for one budget block."""

    def __init__(self, ext: Any, managed_thread: Callable[[], int] | None = None) -> None:
        self.ext = ext
        # The thread whose optimizers' state may be lent (the budget's).
        creator = threading.get_ident()
        self.managed_thread = managed_thread if managed_thread is not None else (lambda: creator)
        # id(param) -> [weak param, weak references to its SavedParameters not
        # yet unpacked, the length at which dead ones are pruned]. Weak: a
        # forward whose backward never ran (an interrupt, an evaluation with
        # grad on) kept the parameters and gradients of a model the program had
        # dropped alive until the next backward; in a managed process, whose
        # block never ends, through a new model's whole first iteration. And a
        # copy whose graph autograd dropped counts no more.
        self.packs: dict[int, list[Any]] = {}
        self.lent: dict[int, tuple[Any, Any]] = {}  # id(tensor) -> (tensor, LentStorage)
        self.gradients: set[int] = set()  # the ids in lent of gradients: given back last
        self.unpacked: set[int] = set()  # ids of parameters whose saved copies were all unpacked
        self.accumulated: list[Any] = []  # parameters whose gradient this backward has accumulated
        # The autograd node that unpacked last, by (sequence number, name): not
        # the node itself, whose graph would stay alive through it (a tensor
        # saved in a graph built inside a backward stayed allocated until the
        # next unpack). Two nodes that share the key (created on two threads)
        # only delay a loan to the next node, which is safe.
        self.node: Any = None
        self.in_backward = False
        self.hooks: dict[int, tuple[Any, Any]] = {}  # id(param) -> (weak param, post-accumulate-grad hook handle)
        self.distributed: bool | None = None
        self.optimizers: weakref.WeakSet[Any] = weakref.WeakSet()  # those whose state may be lent
        self.never_lent: weakref.WeakSet[Any] = weakref.WeakSet()  # those that step in a backward or elsewhere
        import torch.optim.optimizer as optim

        self.optimizer_hook = optim.register_optimizer_step_post_hook(self._stepped)
        _open_lender.opened(self)

    # --- the saved-tensor hooks' side ----------------------------------------------------
    def saved(self, handle: Any, t: Any) -> SavedParameter:
        """Pack of a parameter or a view of one: counts the copy."""
        p = t if t._base is None else t._base
        saved = SavedParameter(handle, p)
        entry = self.packs.get(id(p))
        if entry is None or entry[0]() is not p:  # new, or a dead parameter's id reused
            self.packs[id(p)] = [weakref.ref(p), [weakref.ref(saved)], PRUNE_AT]
        else:
            copies = entry[1]
            if len(copies) >= entry[2]:
                # Forwards with grad on and no backward (an evaluation without no_grad) add a copy each, dead
                # once its graph goes: pruned, at twice the live count (an RNN's weight saved once a step
                # stays linear), the list stays that of the live copies.
                copies[:] = [r for r in copies if r() is not None]
                entry[2] = max(PRUNE_AT, 2 * len(copies))
            copies.append(weakref.ref(saved))
        hook = self.hooks.get(id(p))
        if hook is None or hook[0]() is not p:
            self.hooks[id(p)] = (weakref.ref(p), p.register_post_accumulate_grad_hook(self._accumulated))
        return saved

    def unpack_parameter(self, x: SavedParameter) -> Any:
        self.boundary()
        p = x.param
        self._give_back(id(p))  # read again: a retained graph's second backward
        entry = self.packs.get(id(p))
        if entry is not None and self.in_backward and entry[0]() is p:
            # The copies still to come: not x, nor one whose graph autograd
            # dropped unpacked (a weight norm logged with grad on, which kept
            # its weights from their loans through the next backward).
            copies = entry[1]
            copies[:] = [r for r in copies if (c := r()) is not None and c is not x]
            if not copies:
                del self.packs[id(p)]
                self.unpacked.add(id(p))
        return x.handle.unpack()

    def boundary(self) -> None:
        """Called at every unpack: when a new node has started, what the
        previous one finished with is lent."""
        import torch

        current = torch._C._current_autograd_node()
        node = None if current is None else (current._sequence_nr(), current.name())
        del current
        if node is None or node == self.node:
            return  # not in a backward, or the same node's next saved tensor
        starting = not self.in_backward
        if starting:
            self.in_backward = True
            torch.autograd.Variable._execution_engine.queue_callback(self.give_back_all)
        self.node = node
        accumulated, self.accumulated = self.accumulated, []
        if self._distributed():
            return
        if starting:
            self._lend_optimizer_state()
        for p in accumulated:
            if id(p) in self.unpacked:
                self._lend(p)
            if p.grad is not None:
                self._lend(p.grad, gradient=True)

    def _stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if optimizer in self.never_lent:
            return
        if self.in_backward or threading.get_ident() != self.managed_thread():
            # The Note: its state is read where the lender cannot see it coming.
            self.never_lent.add(optimizer)
            self.optimizers.discard(optimizer)
            return
        self.optimizers.add(optimizer)

    def _lend_optimizer_state(self) -> None:
        import torch

        for opt in list(self.optimizers):
            for state in opt.state.values():
                for t in state.values():
                    # Not the step counts and other scalars: nothing to gain.
                    if isinstance(t, torch.Tensor) and t.numel() * t.element_size() >= MIN_STATE_BYTES:
                        self._lend(t)

    def _accumulated(self, p: Any) -> None:
        if self.in_backward:
            self.accumulated.append(p)

    def _distributed(self) -> bool:
        if self.distributed is None:
            import torch.distributed as dist

            self.distributed = dist.is_available() and dist.is_initialized()
        return self.distributed

    def _lend(self, t: Any, gradient: bool = False) -> None:
        if id(t) in self.lent:
            return
        loan = self.ext.lend(t)
        if loan is not None:
            self.lent[id(t)] = (t, loan)
            if gradient:
                self.gradients.add(id(t))

    def lend_held(self, t: Any) -> TensorLoan | None:
        """t lent until the caller gives the loan back: a node's backward that holds t (its incoming gradient)
        but reads it no more (Note [The split lends its incoming gradient] in techniques/split_chain.py).
        None where nothing is lent: outside a backward, under torch.distributed, t lent already, or refused."""
        if not self.in_backward or self._distributed() or id(t) in self.lent:
            return None
        self._lend(t)
        return TensorLoan(self, id(t)) if id(t) in self.lent else None

    # --- giving back -------------------------------------------------------------------
    def _give_back(self, key: int, quiet: bool = False) -> bool:
        """Ends the loan of lent[key], if any; whether there was one. A loan
        that cannot come back stays in ``lent``, for give_back_all()."""
        loan = self.lent.pop(key, None)
        if loan is None:
            return False
        try:
            loan[1].give_back()
        except Exception:
            self.lent[key] = loan
            if not quiet:
                raise
        return True

    def give_back_params(self, module: Any) -> list[Any]:
        """Before a rerun of module's forward: the parameters it reads,
        resident. Returns those that were lent, for lend_again()."""
        from tensorpager._rerun import modules_read

        return [p for m in modules_read(module) for p in m.parameters(recurse=False) if self._give_back(id(p))]

    def lend_again(self, params: list[Any]) -> None:
        """After the rerun: what give_back_params() returned is lent again.
        The rerun saved nothing autograd will unpack, so what made them
        lendable still holds; kept instead, a stage's weights stayed resident
        for the rest of the backward once a rerun of the stage had read them."""
        if not self.in_backward:
            return  # the backward ended during the rerun: give_back_all() has run
        for p in params:
            self._lend(p)

    def give_back_all(self) -> None:
        """The backward has ended (or must be taken as ended): everything
        lent comes back. A loan that cannot be brought back stays, for the
        next call, and the first such error is raised."""
        self.in_backward = False
        self.node = None
        self.unpacked.clear()
        self.accumulated.clear()
        self.packs.clear()
        self.distributed = None
        failed: BaseException | None = None
        # Gradients last (the Note): sorted() is stable, so each group keeps its order.
        for key, (t, loan) in sorted(self.lent.items(), key=lambda item: item[0] in self.gradients):
            try:
                loan.give_back()
                del self.lent[key]
            except Exception as e:  # noqa: PERF203 - each loan is tried
                failed = failed or e
        self.gradients.intersection_update(self.lent)
        if failed is not None:
            raise failed

    def close(self) -> None:
        """The budget ends: everything given back, the hooks removed."""
        try:
            self.give_back_all()
        finally:
            _open_lender.closed(self)
            self.optimizer_hook.remove()
            for _, h in self.hooks.values():
                h.remove()
            self.hooks.clear()


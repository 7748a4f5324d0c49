"""The fake extension the in-process tests of the budget's tracker and lender run against.

``FakeExt`` stands where ``tensorpager._C`` stands for ``_tracker.Tracker`` and
``_lend.Lender``: it keeps every saved tensor where it is, moves nothing, and
records what it was asked (test_tracker_unit.py, test_lend_unit.py).
"""

from __future__ import annotations

import contextlib
import functools

import torch

from tensorpager import _module_hooks, _tracker


class FakeHandle:
    """What ``_C.pack`` returns: the saved tensor, kept in place."""

    def __init__(self, ext: FakeExt, t: torch.Tensor, managed: bool) -> None:
        self.tensor = t
        self.key = ext.storage_key(t)
        self.managed = managed and self.key not in ext.foreign
        self.fresh = self.key not in ext.tracked  # the first pack of its storage this step
        ext.tracked.add(self.key)
        self.version = t._version
        self.recompute = None  # (function, cost in ns, version) once the tracker sets it

    def set_recompute(self, fn, cost_ns: int, version: int, index: int | None = None,  # noqa: ANN001
                      whole: bool = False, rerun_bytes: int = 0) -> None:
        # As _C: with an index, the runtime calls fn(index, whole).
        self.recompute = (fn if index is None else functools.partial(fn, index, whole), cost_ns, version)

    def unpack(self) -> torch.Tensor:
        return self.tensor


class FakeLoan:
    """What ``_C.lend`` returns: the bytes stay where they are; whether they came back is recorded."""

    def __init__(self, t: torch.Tensor) -> None:
        self.tensor = t
        self.back = False

    def give_back(self) -> None:
        self.back = True


class FakeRngSnapshots:
    """What ``_C.RngSnapshots`` is: here a new ``torch.get_rng_state()`` each time."""

    def cpu(self) -> torch.Tensor:
        return torch.get_rng_state()


class FakeExt:
    """The calls the tracker and the lender make on ``_C``, with no budget and nothing moved."""

    RngSnapshots = FakeRngSnapshots

    def __init__(self) -> None:
        self.loans: list[FakeLoan] = []
        self.handles: list[FakeHandle] = []
        self.tracked: set[int] = set()
        self.foreign: set[int] = set()  # storage keys that pack reports unmanaged (another allocator's)
        self.boundaries = 0

    def storage_key(self, t: torch.Tensor) -> int | None:
        return t.untyped_storage().data_ptr() if t.untyped_storage().nbytes() else None

    def pack(self, t: torch.Tensor, manage: bool = True) -> FakeHandle:
        h = FakeHandle(self, t, manage)
        self.handles.append(h)
        return h

    def lend(self, t: torch.Tensor) -> FakeLoan:
        self.loans.append(FakeLoan(t))
        return self.loans[-1]

    def budget_step(self, resolve_ratio: bool = True, peak: int | None = None) -> None:
        self.boundaries += 1
        self.tracked.clear()

    def budget_remeasure(self) -> bool:
        return False

    def budget(self) -> None:
        return None

    def segment_started(self) -> None:
        pass

    def segment_growth(self) -> int:
        return 0

    def segment_input_saved(self) -> None:
        pass


@contextlib.contextmanager
def tracking(ext: FakeExt, lend: bool = False):  # noqa: ANN201
    """A tracker on ext, its module hooks and saved-tensor hooks entered, as ``tp.budget`` enters them."""
    tr = _tracker.Tracker(ext, segment_depth=1, recompute=True, lend=lend)
    sub = _module_hooks.subscribe(tr.pre_forward, tr.post_forward)
    try:
        with torch.autograd.graph.saved_tensors_hooks(tr.pack, tr.unpack):
            yield tr
    finally:
        sub.remove()
        tr.close()
        if tr.lender is not None:
            tr.lender.close()


def recomputable(ext: FakeExt) -> list[FakeHandle]:
    return [h for h in ext.handles if h.recompute is not None]

"""Which segment's forward made a storage, and a forward's inputs held for its rerun (Note [Segments] in _tracker.py).

A saved tensor that is the output of an earlier segment (its input, or one
saved again later) is recomputable by rerunning that segment: ``Producers``
keeps, per storage, the segment whose forward returned it while the output
lives, and links a saved tensor to it. ``hold_inputs`` holds a finished
forward's arguments for the rerun.
"""

from __future__ import annotations

import weakref
from functools import partial

from tensorpager import _rerun

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class Producers:
    """Storage key -> (weak output, segment, output index, version) of one tracker's step."""

    def __init__(self, tracker: Any) -> None:
        self.tracker = tracker  # what a rerun is run for (seg.rerun's first argument)
        self.entries: dict[int, tuple[Any, _rerun.Segment, int, int]] = {}

    def clear(self) -> None:
        self.entries.clear()

    def add(self, key: int, out: Any, seg: _rerun.Segment, index: int) -> None:
        # The entry lives as long as the output tensor: only a live output can
        # later be adopted as another segment's input, and the segment (with
        # the inputs it keeps) must not outlive it for nothing.
        def forget(ref: Any) -> None:
            entry = self.entries.get(key)
            if entry is not None and entry[0] is ref:
                del self.entries[key]

        self.entries[key] = (weakref.ref(out, forget), seg, index, out._version)

    def link(self, h: Any) -> None:
        """Makes saved tensor h recomputable by the segment that returned its storage, if it still may."""
        entry = self.entries.get(h.key)
        if entry is None:
            return
        out_ref, seg, index, version = entry
        out = out_ref()
        # The weak reference guards against a reused address: the producer's
        # output must still be alive and still use this storage. A rerun
        # rebuilds the output as the producer returned it, so it may stand in
        # only while the storage is still at that version: not after a
        # consumer changed it in place (ReLU(inplace=True) at the start of the
        # next segment); Note [Recompute reproduces one version].
        if out is None or self.tracker.ext.storage_key(out) != h.key or h.version != version:
            return
        # whole: an output's rerun runs the whole forward (rerun_bytes in full).
        h.set_recompute(partial(_rerun.Segment.rerun, seg, self.tracker, "output"), seg.cost_ns, version, index,
                        True, seg.rerun_bytes)


def hold_inputs(ext: Any, producers: Producers, tree: Any, packed: dict[int, tuple[Any, Any]]) -> tuple[Any, bool]:
    """The tensors of tree as _rerun.HeldInputs, and whether one of them is
    foreign: memory of another allocator or device (a NumPy array's, say),
    which can change with no version to show it.

    packed: id -> (tensor, handle) for inputs the forward saved, each packed
    managed at the version it still has (the caller checked that no input
    changed): the handle is the one a new pack would give (the same view of
    the same storage, which its first pack already linked to its producer),
    so it is held as it is, for one C++ pack less per segment
    (bench/hook_cost_bench.py)."""
    import torch

    args, kwargs = tree
    if not kwargs and type(args) is tuple and len(args) == 1 and isinstance(args[0], torch.Tensor):
        held_one, foreign = _hold_one(ext, producers, packed, args[0])  # most calls: one tensor, no closures
        return ((held_one,), kwargs), foreign
    from torch.utils._pytree import tree_map

    held: dict[int, _rerun.HeldInput] = {}
    foreign = False

    def hold(x: Any) -> Any:
        nonlocal foreign
        if not isinstance(x, torch.Tensor):
            return x
        if id(x) in held:
            return held[id(x)]
        held[id(x)], reads_foreign = _hold_one(ext, producers, packed, x)
        foreign = foreign or reads_foreign
        return held[id(x)]

    if not kwargs and type(args) is tuple and all(isinstance(a, torch.Tensor) for a in args):
        return (tuple(hold(a) for a in args), kwargs), foreign  # most other calls, without pytree
    return tree_map(hold, tree), foreign


def _hold_one(ext: Any, producers: Producers, packed: dict[int, tuple[Any, Any]],
              x: Any) -> tuple[_rerun.HeldInput, bool]:
    """Tensor x held (hold_inputs), and whether it is foreign memory."""
    saved = packed.get(id(x))
    if saved is not None and saved[0] is x:
        return _rerun.HeldInput(saved[1], None, x.requires_grad), False
    if (x.is_leaf and x.requires_grad) or ext.storage_key(x) is None:
        return _rerun.HeldInput(None, x, x.requires_grad), False
    h = ext.pack(x)
    if not h.managed:
        return _rerun.HeldInput(h, None, x.requires_grad), x.numel() > 0
    if h.fresh:
        producers.link(h)
    return _rerun.HeldInput(h, None, x.requires_grad), False

"""Rerunning a recompute segment's forward (Note [Segments] in ``_tracker.py``):
what one forward of a segment module keeps so that it can run again with the
same RNG, autocast state and buffers, and hand back one saved tensor or output
of that run. The budget's tracker (``_tracker.Tracker``) creates the segments;
the runtime calls their rerun through the recompute functions it is given.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable


class _Captured(BaseException):
    """Raised by a rerun's pack hook once it holds the tensor it reruns for.

    Note [A rerun stops at its tensor]
    A saved tensor's rerun ends where the segment's first forward saved it:
    the pack hook raises as soon as it holds it, and the rest of the forward,
    which would only compute tensors nobody asked for while holding memory, is
    not run (a ResNet stage rerun for its first block's saved tensor ran
    its second block too). For the policies, such a tensor's recompute cost
    is the time the first forward took to reach it, not the whole segment's
    (``Tracker.pack``). A BaseException, so that a forward's own ``except
    Exception`` lets it through; a forward that swallows it anyway runs on to
    its end and hands back the same tensor. A rerun for an output runs the
    whole forward, and so does one for a tensor that the rest of the first
    forward changed in place: the storage must come back as the forward left
    it (Note [Recompute reproduces one version] in
    hooks/budget/saved_storage.hpp), and the tensor was saved before that.
    """


class Segment:
    """One forward of a segment module, and how to rerun it (Note [Segments])."""

    __slots__ = ("module", "rng", "cuda_rng", "autocast", "t0", "cost_ns", "packs", "pending",
                 "inputs", "input_keys", "input_versions", "packed_inputs", "args", "kwargs", "rerun_bytes")

    def __init__(self, module: Any, args: tuple, storage_key: Callable[[Any], int | None],
                 rng_state: Callable[[], Any]) -> None:
        """storage_key: the extension's (``_C.storage_key``): never ``t.untyped_storage()``, whose Python
        object the storage keeps alive as a holder, so it could never be evicted (Note [Saved storages]).
        rng_state: the CPU generator's state, as ``torch.get_rng_state()`` (``_C.RngSnapshots.cpu``: Note
        [One RNG state while the generator stands still] in hooks/budget/rng_snapshots.hpp)."""
        import torch

        self.module = module
        self.rng = rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        enabled, dtype = torch.is_autocast_enabled, torch.get_autocast_dtype
        self.autocast = _autocast_states(enabled("cpu"), dtype("cpu"), enabled("cuda"), dtype("cuda"))
        # The input tensors, so that the pack hook knows one (Tracker.pack): alive while the forward runs.
        # Inference tensors have no version counter (and autograd never saves them).
        if type(args) is tuple and len(args) == 1 and isinstance(args[0], torch.Tensor):
            a = args[0]  # most calls: one tensor, without flatten or comprehensions
            self.inputs = args
            key = storage_key(a)
            self.input_keys = () if key is None else (key,)  # a tuple of an int: no object for the GC
            self.input_versions = [] if a.is_inference() else [(a, a._version)]
        else:
            self.inputs = tensors = tuple(a for a in flatten(args) if isinstance(a, torch.Tensor))
            self.input_keys = {k for a in tensors if (k := storage_key(a)) is not None}
            self.input_versions = [(a, a._version) for a in tensors if not a.is_inference()]
        # id(input) -> (input, its managed handle) for the inputs the forward saved (Tracker.pack).
        self.packed_inputs: dict[int, tuple[Any, Any]] = {}
        self.packs = 0
        # (handle, pack index, ns from t0 to its pack, its version then)
        self.pending: list[tuple[Any, int, int, int]] = []
        self.args: Any = None
        self.kwargs: Any = None
        self.cost_ns = 0
        # What a rerun holds at its peak (Note [A rerun's working set] in runtime/resident_floor.hpp).
        self.rerun_bytes = 0
        self.t0 = time.perf_counter_ns()

    def rerun(self, tracker: Any, kind: str, index: int, whole: bool = False) -> Any:
        """Re-runs the forward; returns saved tensor `index` ("saved") or output `index` ("output").

        A rerun for a saved tensor stops once the forward has saved it,
        unless `whole` (Note [A rerun stops at its tensor])."""
        import torch
        from torch.utils._pytree import tree_map

        restored: dict[int, Any] = {}

        def restore(x: Any) -> Any:
            # One tensor per held input, so that arguments that were the same
            # tensor are again (MultiheadAttention takes another path when
            # query is key is value).
            if not isinstance(x, HeldInput):
                return x
            t = restored.get(id(x))
            if t is None:
                t = x.handle.unpack() if x.handle is not None else x.tensor
                t = t.detach()
                t = t.requires_grad_(True) if x.requires_grad else t
                restored[id(x)] = t
            return t

        captured: list[Any] = []
        count = [0]

        def capture(t: Any) -> Any:
            if kind == "saved" and count[0] == index:
                captured.append(t)
                if not whole:
                    raise _Captured  # Note [A rerun stops at its tensor]
            count[0] += 1
            return None

        # The forward reads them; lent again in the end.
        returned = tracker.lender.give_back_params(self.module) if tracker.lender is not None else []
        tracker.suspended += 1
        held: list = []  # buffers to put back (_swap_buffers)
        try:
            args = tree_map(restore, self.args)
            kwargs = tree_map(restore, self.kwargs)
            self._swap_buffers(held)
            devices = list(range(len(self.cuda_rng))) if self.cuda_rng is not None else []
            with torch.random.fork_rng(devices=devices):
                torch.set_rng_state(self.rng)
                if self.cuda_rng is not None:
                    torch.cuda.set_rng_state_all(self.cuda_rng)
                with torch.enable_grad(), autocast_states(self.autocast), \
                        torch.autograd.graph.saved_tensors_hooks(capture, lambda _: None):
                    try:
                        out = self.module(*args, **kwargs)
                    except _Captured:
                        out = None
            if kind == "saved":
                if not captured:
                    raise RuntimeError(
                        f"tensorpager: rerunning {type(self.module).__name__} saved {count[0]} tensors, "
                        f"fewer than the {index + 1} of its first run; its forward is not deterministic "
                        "in what it saves, so it cannot be recomputed")
                result = captured[0]
            else:
                result = [o for o in flatten(out) if isinstance(o, torch.Tensor)][index]
            result = result.detach()
            del out, captured, args, kwargs
            return result
        finally:
            for owner, name, b in held:
                owner._buffers[name] = b
            tracker.suspended -= 1
            if returned:
                tracker.lender.lend_again(returned)

    def _swap_buffers(self, held: list) -> None:
        """Gives every module of the segment clones of its buffers for the rerun.

        A rerun must not count twice in running statistics, and must not
        change the buffers in place even to put them back: their versions
        would move, and autograd saves some of them (batch norm's running
        statistics), so their unpack would raise (Note [In-place changes to
        saved tensors] in hooks/saved_version.hpp). Appends each
        (module, name, buffer) to `held` as it swaps, for the caller to put
        back.
        """
        clones: dict[int, Any] = {}  # one clone per buffer shared between modules
        for owner in modules_read(self.module):
            for name, b in owner._buffers.items():
                if b is None:
                    continue
                held.append((owner, name, b))
                owner._buffers[name] = clones.setdefault(id(b), b.detach().clone())


# Note [What else a forward reads]
# A rerun gives back the parameters, and swaps the buffers, of the modules a
# segment's forward reads. Those are its own tree, and the modules that a
# technique's module runs without calling them as children (the rest of a
# split chain, run by the split convolution: Note [Patching by class] in
# techniques/split.py). The runtime does not know the techniques: each registers, once,
# a function naming what a module of it reads besides its tree.
_also_read_by: list[Callable[[Any], Iterable[Any]]] = []


def register_also_reads(reads: Callable[[Any], Iterable[Any]]) -> None:
    """reads(module) names the modules module's forward runs without calling
    them as children, or nothing (Note [What else a forward reads])."""
    if reads not in _also_read_by:
        _also_read_by.append(reads)


def modules_read(module: Any) -> list:
    """The modules whose parameters and buffers a forward of module reads
    (Note [What else a forward reads])."""
    seen: dict[int, Any] = {}
    for m in module.modules():
        for other in (m, *(o for reads in _also_read_by for o in reads(m))):
            for o in other.modules():
                seen.setdefault(id(o), o)
    return list(seen.values())


_autocast_seen: dict[tuple, tuple] = {}


def _autocast_states(cpu_enabled: bool, cpu_dtype: Any, cuda_enabled: bool, cuda_dtype: Any) -> tuple:
    """The autocast states a segment records: one tuple per combination, shared by every segment that
    ran under it (a program sees one or two), so that segments, which live until their backward, keep
    no containers of their own for Python's cyclic GC (Tracker.post_forward)."""
    key = (cpu_enabled, cpu_dtype, cuda_enabled, cuda_dtype)
    states = _autocast_seen.get(key)
    if states is None:
        states = _autocast_seen.setdefault(key, (("cpu", cpu_enabled, cpu_dtype), ("cuda", cuda_enabled, cuda_dtype)))
    return states


class HeldInput:
    """A segment input kept for its rerun: managed (handle) or, when it is not
    tensorpager's to manage, the tensor itself."""

    __slots__ = ("handle", "tensor", "requires_grad")

    def __init__(self, handle: Any, tensor: Any, requires_grad: bool) -> None:
        self.handle = handle
        self.tensor = tensor
        self.requires_grad = requires_grad


def flatten(x: Any) -> list:
    """The leaves of x. A tensor, or a tuple or list of tensors (what most
    modules take and return), without pytree, which costs tens of
    microseconds per call (bench/hook_cost_bench.py)."""
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if type(x) in (tuple, list) and all(isinstance(a, torch.Tensor) for a in x):
        return list(x)
    from torch.utils._pytree import tree_leaves

    return tree_leaves(x)


class autocast_states:
    """Re-enters the autocast states a segment ran under."""

    def __init__(self, states: tuple) -> None:
        import contextlib

        import torch

        self._stack = contextlib.ExitStack()
        self._states = states
        self._torch = torch

    def __enter__(self) -> None:
        for dev, enabled, dtype in self._states:
            if dev == "cuda" and not self._torch.cuda.is_available():
                continue
            self._stack.enter_context(self._torch.autocast(dev, dtype=dtype, enabled=enabled))

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

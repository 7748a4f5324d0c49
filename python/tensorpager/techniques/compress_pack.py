"""tp.compress's saved-tensor hooks: which saved tensors are compressed, packed and restored.

While a selected module's forward runs (compress.py's ``Compression`` keeps
the stack of them, per thread, through enter() and leave()), autograd hands
every tensor it saves to _pack, which compresses it with the C++ kernels
(``_C.compress_pack``; Note [Compression methods] in
``hooks/compress/activation_codec.hpp``) or saves it as it would be saved
without compress; _unpack restores it for backward.

Note [Which saved tensors are compressed]
A tensor that autograd saves for backward is compressed when all of these hold:
  1. it is saved while a selected module's forward runs; the innermost selected
     module decides the method, and ``none`` keeps the tensors exact;
  2. it is not a parameter or buffer: it shares no storage with the parameters
     and buffers of ``model`` (of the selected module itself when no model is
     given; this catches views such as the ``weight.t()`` Linear saves), is no
     ``nn.Parameter``, and is no leaf that requires grad;
  3. with ``model``: it shares no storage with the tensors passed to the
     model's forward (the caller holds those, so compressing them saves
     nothing);
  4. it is a dense float64/32/16 or bfloat16 tensor of at least ``min_bytes``
     that the method makes smaller (bf16 leaves 16-bit tensors alone);
  5. for pool2: the module is an ``nn.Conv2d`` and the tensor is its input
     (same storage, offset and shape); its other saved tensors stay exact.
Everything else is saved as usual: by the saved-tensor hooks that were active
when the first selected module started (Note [Compress inside other hooks]),
or by autograd itself. Memory is saved only when the compressed
tensor was otherwise held by autograd alone: a tensor the program still
references, or one another op saves exactly (a ReLU's output, which the next
convolution also saves), keeps its full storage, and compressing it adds the
packed copy. Select the producers too (``Conv2d=pool2;ReLU=bf16``) and check
the allocator's peak, not only ``stats()``. Under autocast, the low-precision
copies autocast makes of weights are activations by these rules (and autocast
caches them, so compressing them saves nothing): prefer pool2 or class
selectors that exclude such layers there.

Note [Compress inside other hooks]
While a selected module runs, compress's hooks are the innermost ones, so an
enclosing ``tp.budget`` or ``save_on_cpu`` would never see that module's saved
tensors. So when compress pushes its hooks it keeps the pair that was on top,
and every tensor it leaves exact goes to that pair's pack hook (and comes back
through its unpack hook): under ``tp.budget`` those tensors are managed
(evicted, swapped, recomputed) like any other. A segment's rerun counts the
same saves as its first run, since compress makes the same decisions both
times. Compressed tensors stay with compress: they are already small, and the
budget's allocator counts their bytes. Storages are compared by the address
of their StorageImpl (``_C.storage_key``), never through
``t.untyped_storage()``, whose Python object would become a second owner of
the storage and make it unevictable.
"""

from __future__ import annotations

import threading
import weakref
from itertools import chain
from typing import Any

import torch
from torch import nn

from tensorpager import _ext, _install

_C = _ext.load()
_skipped: dict[str, int] = {}
# Per thread: .frames, the selected modules whose forward is running (innermost
# last); .packed, what _pack_once() has packed, by id of the tensor; .outer,
# the saved-tensor hooks that were on top when the first frame was entered.
_local = threading.local()

#: A selected module's forward while it runs: (module, method, its input when the method is pool2, the storages
#: of the parameters, the storages of the model's inputs, min_bytes).
Frame = tuple[nn.Module, str, torch.Tensor | None, frozenset[int], frozenset[int], int]


def storage_key(t: torch.Tensor) -> int | None:
    """The address of t's StorageImpl, or None. Not ``untyped_storage()``: the
    Python storage object it makes stays tied to the storage, and a storage
    with a second owner is one tp.budget can never evict (Note [Compress
    inside other hooks])."""
    return _C.storage_key(t)


def storages(module: nn.Module) -> frozenset[int]:
    return frozenset(
        k for t in chain(module.parameters(), module.buffers()) if t.numel() > 0 and (k := storage_key(t)) is not None
    )


def enter(frame: Frame) -> None:
    """A selected module's forward starts: its saved tensors reach _pack until leave(frame[0])."""
    frames = _frames()
    if not frames:
        # Saved tensors reach _pack only while a selected module runs; what
        # it leaves exact goes to the hooks below (Note [Compress inside
        # other hooks]).
        _local.outer = torch._C._autograd._top_saved_tensors_default_hooks(False)
        torch._C._autograd._push_saved_tensors_default_hooks(_pack, _unpack)
    frames.append(frame)


def leave(module: nn.Module) -> None:
    """The forward of module, the innermost selected module, has ended (else nothing happens)."""
    frames = _frames()
    if frames and frames[-1][0] is module:
        frames.pop()
        if not frames:
            torch._C._autograd._pop_saved_tensors_default_hooks()
            _local.outer = None


def _frames() -> list[Frame]:
    frames = getattr(_local, "frames", None)
    if frames is None:
        frames = _local.frames = []
    return frames


class _Outer:
    """A saved tensor compress left exact, as the enclosing pack hook packed it
    (Note [Compress inside other hooks])."""

    __slots__ = ("packed", "unpack")

    def __init__(self, packed: Any, unpack: Any) -> None:
        self.packed = packed
        self.unpack = unpack


def _exact(t: torch.Tensor) -> Any:
    """t saved as it would be without compress: by the enclosing hooks, if
    any, or else kept with its version, which unpack checks as autograd does
    without hooks (Note [In-place changes to saved tensors] in
    hooks/saved_version.hpp)."""
    outer = getattr(_local, "outer", None)
    if outer is None:
        return _C.pack(t, False)
    pack, unpack = outer
    return _Outer(pack(t), unpack)


def _skip(reason: str, t: torch.Tensor) -> Any:
    _skipped[reason] = _skipped.get(reason, 0) + 1
    return _exact(t)


def _pack(t: torch.Tensor) -> Any:
    frames = _frames()
    if not frames:
        return _exact(t)
    _, method, conv_input, params, caller, min_bytes = frames[-1]
    if method == "none":
        return _exact(t)
    if t.layout != torch.strided:
        return _skip("unsupported", t)
    storage = storage_key(t)
    if storage is None:  # tensor subclasses without plain storage
        return _skip("unsupported", t)
    if storage in params or isinstance(t, nn.Parameter) or (t.is_leaf and t.requires_grad):
        return _skip("parameter", t)
    if storage in caller:
        return _skip("input", t)
    if method == "pool2" and not (
        conv_input is not None and storage == storage_key(conv_input)
        and t.storage_offset() == conv_input.storage_offset() and t.shape == conv_input.shape
    ):
        return _skip("not_conv_input", t)
    if t.numel() * t.element_size() < min_bytes:
        return _skip("small", t)
    if _C.compress_why_not(t, method) is not None:
        return _skip("unsupported", t)
    return _pack_once(t, method)


def _pack_once(t: torch.Tensor, method: str) -> Any:
    """Packs t, or returns the packed form an earlier save of the same
    tensor (unchanged since) got: a ReLU's output is saved by the ReLU and by
    the layer after it, and one compressed copy serves both."""
    cache = _packed_cache()
    key = id(t)
    entry = cache.get(key)
    if entry is not None:
        tensor_ref, version, cached_method, packed_ref = entry
        packed = packed_ref()
        if tensor_ref() is t and version == t._version and cached_method == method and packed is not None:
            _skipped["shared"] = _skipped.get("shared", 0) + 1
            return packed
    packed = _C.compress_pack(t, method)
    # The entry dies with the tensor, and never keeps the packed form alive.
    cache[key] = (weakref.ref(t, lambda _, k=key: cache.pop(k, None)), t._version, method, weakref.ref(packed))
    return packed


def _packed_cache() -> dict[int, tuple[Any, int, str, Any]]:
    cache = getattr(_local, "packed", None)
    if cache is None:
        cache = _local.packed = {}
    return cache


def _unpack(packed: Any) -> torch.Tensor:
    if isinstance(packed, _C.SavedTensor):
        return packed.unpack()
    if isinstance(packed, _Outer):
        return packed.unpack(packed.packed)
    return packed.restore()


def skip_counts() -> dict[str, int]:
    """The counters kept here, not in C++: tensors of selected modules left exact, and shared saves."""
    out = {f"tensorpager.compress.skipped.{reason}": _skipped.get(reason, 0)
           for reason in ("parameter", "input", "not_conv_input", "small", "unsupported")}
    out["tensorpager.compress.shared"] = _skipped.get("shared", 0)
    return out


_install.add_stats_source(skip_counts)  # tp.stats() reports them too


def reset_skip_counts() -> None:
    """Zeroes the counters kept here (tp.compress.reset_stats())."""
    _skipped.clear()

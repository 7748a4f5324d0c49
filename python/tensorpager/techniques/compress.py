"""Compressed activations for backward: save less, compute the forward exactly.

The module is callable: ``tp.compress(spec, model=None, min_bytes=1024)`` is a
context manager under which the selected modules' saved activations are
stored compressed and restored when backward needs them::

    with tp.compress("Conv2d=pool2;ReLU=bf16", model=model):
        loss = loss_fn(model(x), y)
    loss.backward()                     # restores what was packed

Methods (Note [Compression methods] in ``hooks/compress/activation_codec.hpp``,
whose C++ kernels do the packing): ``pool2`` (2x2 average pooling of
convolution inputs, nearest upsampling in backward), ``bf16``, ``fp8`` (e4m3
with a per-tensor scale), ``none``. Gradients become approximate, so nothing
is compressed unless asked for.

Spec grammar (also the value of the ``compress`` configuration key)::

    spec     := method | rule { ";" rule }
    rule     := selector "=" method
    selector := a module class name ("Conv2d", "ReLU") or a glob over
                qualified module names ("layer1.*", "fc"); "*" is every module

A bare method selects ``Conv2d`` for pool2 and every module for bf16 and fp8.
A dict ``{selector: method}`` is accepted too, where a selector may also be a
module class (matched with isinstance). When several rules match a module the
last one wins (``"*=fp8;fc=none"``); pool2 applies to ``nn.Conv2d`` modules
only and is ignored on the others it matches. Name globs need ``model=``.

Accuracy (measured; tests/python/test_compress.py and bench/results): bf16 is
the safe choice (relative gradient error below 1%). fp8 costs 1-3% on
convolution and ReLU activations but about 13% on BatchNorm inputs of
ResNet-50: BatchNorm's backward re-centres the restored input, which magnifies
a per-tensor quantisation error, so write ``*=fp8;BatchNorm2d=bf16``. pool2's
error grows as feature maps shrink (3% on 32x32 maps, about 60% on ResNet-50
at 64x64 input whose last maps are 4x4 and 2x2); the paper's setting is
ImageNet-sized maps and a longer schedule.

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
(evicted, swapped, recomputed) like any other. A segment's replay counts the
same saves as its first run, since compress makes the same decisions both
times. Compressed tensors stay with compress: they are already small, and the
budget's allocator counts their bytes. Storages are compared by the address
of their StorageImpl (``_C.storage_key``), never through
``t.untyped_storage()``, whose Python object would become a second owner of
the storage and make it unevictable.

Importing this module imports torch and loads ``tensorpager._C``.
"""

from __future__ import annotations

import fnmatch
import sys
import threading
import types
import weakref
from collections.abc import Mapping
from itertools import chain
from typing import Any, Union

import torch
from torch import nn

from tensorpager import _ext, _install, _module_hooks

__all__ = ["Compression", "METHODS", "DEFAULT_MIN_BYTES", "parse_spec", "stats", "reset_stats", "enable", "disable"]

#: Every method name, "none" last.
METHODS: tuple[str, ...] = ("pool2", "bf16", "fp8", "none")

#: Tensors smaller than this are saved as they are: the packing costs more.
DEFAULT_MIN_BYTES = 1024

Selector = Union[str, type]
Spec = Union[str, Mapping[Selector, str], None]

_C = _ext.load()
_skipped: dict[str, int] = {}
# Per thread: .frames, the selected modules whose forward is running (innermost
# last); .packed, what _pack_once() has packed, by id of the tensor.
_local = threading.local()


def parse_spec(spec: Spec) -> list[tuple[Selector, str]]:
    """The (selector, method) rules of a spec, in order.

    Raises:
        ValueError: an unknown method, an empty selector or rule; the message
            names the input and lists what is accepted.
    """
    if spec is None:
        return []
    if isinstance(spec, Mapping):
        items = list(spec.items())
    elif isinstance(spec, str):
        text = spec.strip()
        if "=" not in text:
            method = _method(text, spec)
            return [] if method == "none" else [("Conv2d" if method == "pool2" else "*", method)]
        items = []
        for rule in text.split(";"):
            selector, sep, method = rule.partition("=")
            if not sep or not selector.strip():
                raise ValueError(f"compress: rule {rule!r} in {spec!r} is not selector=method; accepted: "
                                 "'Conv2d=pool2;ReLU=bf16', 'layer1.*=fp8', or a bare method")
            items.append((selector.strip(), method))
    else:
        raise TypeError(f"compress: spec {spec!r} is neither a str, a mapping nor None")
    rules: list[tuple[Selector, str]] = []
    for selector, method in items:
        if not (isinstance(selector, str) or (isinstance(selector, type) and issubclass(selector, nn.Module))):
            raise TypeError(f"compress: selector {selector!r} is neither a str nor an nn.Module subclass")
        rules.append((selector, _method(method, spec)))
    return rules


def _method(text: str, spec: object) -> str:
    method = str(text).strip().lower()
    if method not in METHODS:
        raise ValueError(f"compress: unknown method {text!r} in {spec!r}; accepted: {', '.join(METHODS)}")
    return method


def _matches(selector: Selector, name: str | None, module: nn.Module) -> bool:
    if isinstance(selector, type):
        return isinstance(module, selector)
    if selector == "*" or selector == type(module).__name__:  # "*" also without a model (enable())
        return True
    return name is not None and fnmatch.fnmatchcase(name, selector)


def _method_of(rules: list[tuple[Selector, str]], name: str | None, module: nn.Module) -> str | None:
    """The method the last matching rule gives module, or None when no rule
    applies (pool2 applies to nn.Conv2d only)."""
    method = None
    for selector, m in rules:
        if _matches(selector, name, module) and (m != "pool2" or isinstance(module, nn.Conv2d)):
            method = m
    return method


def _storage_key(t: torch.Tensor) -> int | None:
    """The address of t's StorageImpl, or None. Not ``untyped_storage()``: the
    Python storage object it makes stays tied to the storage, and a storage
    with a second owner is one tp.budget can never evict (Note [Compress
    inside other hooks])."""
    return _C.storage_key(t)


def _storages(module: nn.Module) -> frozenset[int]:
    return frozenset(
        k for t in chain(module.parameters(), module.buffers()) if t.numel() > 0 and (k := _storage_key(t)) is not None
    )


class Compression:
    """What ``tp.compress(...)`` returns: a context manager (entered once)
    that compresses the saved activations of the selected modules (Note
    [Which saved tensors are compressed]).

    Args:
        spec: the selection (see the module docs).
        model: the model whose modules are selected; without it every module
            of the process is considered (class-name selectors only).
        min_bytes: smaller tensors are saved as they are.

    Tensors packed inside the block are restored by backward even after the
    block has ended. While a selected module runs, these saved-tensor hooks
    are the innermost ones; the tensors they leave exact go to the enclosing
    ``saved_tensors_hooks`` (``tp.budget``, ``save_on_cpu``), and the
    compressed ones stay here (Note [Compress inside other hooks]). Thread-safety:
    each thread's forward is handled separately; enter and exit on one thread.
    """

    def __init__(self, spec: Spec, model: nn.Module | None = None, *, min_bytes: int = DEFAULT_MIN_BYTES) -> None:
        self.rules = parse_spec(spec)
        self.model = model
        self.min_bytes = int(min_bytes)
        self._handles: list[Any] = []
        self._selected: dict[int, str] = {}
        self._params: frozenset[int] | None = None
        self._caller: frozenset[int] = frozenset()  # storages of the model's current inputs
        if model is None:
            # Class names start with a capital letter; anything else is a name glob.
            names = [s for s, _ in self.rules if isinstance(s, str) and s != "*" and not s[:1].isupper()]
            if names:
                raise ValueError(f"compress: selectors {names} look like module names; name globs need model= "
                                 "(without a model, selectors are class names such as Conv2d, or '*')")
        else:
            self._selected = {id(m): method for name, m in model.named_modules()
                              if (method := _method_of(self.rules, name, m)) is not None}
            if not any(m != "none" for m in self._selected.values()) and self.rules:
                kinds = sorted({type(m).__name__ for m in model.modules()})
                raise ValueError(f"compress: {spec!r} selects no module of the model; its module types: {kinds}")

    def __enter__(self) -> Compression:
        if self._handles:
            raise RuntimeError("compress: this Compression is already active")
        if self.model is None:
            self._handles = [_module_hooks.subscribe(self._pre_hook, self._post_hook)]
        else:
            self._params = _storages(self.model)
            self._handles.append(self.model.register_forward_pre_hook(self._note_inputs))
            for m in self.model.modules():
                if id(m) in self._selected:
                    self._handles.append(m.register_forward_pre_hook(self._pre_hook))
                    self._handles.append(m.register_forward_hook(self._post_hook, always_call=True))
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    # -- module hooks: keep the stack of selected modules -----------------------

    def _note_inputs(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        flat = chain.from_iterable(a.values() if isinstance(a, dict) else a if isinstance(a, (list, tuple)) else (a,)
                                   for a in args)
        self._caller = frozenset(k for t in flat if isinstance(t, torch.Tensor) and t.layout == torch.strided
                                 and (k := _storage_key(t)) is not None)

    def _pre_hook(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        method = self._selected.get(id(module)) if self.model is not None else _method_of(self.rules, None, module)
        if method is None:
            return
        params = self._params if self._params is not None else _storages(module)
        conv_input = args[0] if method == "pool2" and args and isinstance(args[0], torch.Tensor) else None
        frames = _frames()
        if not frames:
            # Saved tensors reach _pack only while a selected module runs; what
            # it leaves exact goes to the hooks below (Note [Compress inside
            # other hooks]).
            _local.outer = torch._C._autograd._top_saved_tensors_default_hooks(False)
            torch._C._autograd._push_saved_tensors_default_hooks(_pack, _unpack)
        frames.append((module, method, conv_input, params, self._caller, self.min_bytes))

    def _post_hook(self, module: nn.Module, args: tuple[Any, ...], *rest: Any) -> None:
        frames = _frames()
        if frames and frames[-1][0] is module:
            frames.pop()
            if not frames:
                torch._C._autograd._pop_saved_tensors_default_hooks()
                _local.outer = None


def _frames() -> list[tuple[nn.Module, str, torch.Tensor | None, frozenset[int], frozenset[int], int]]:
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
    storage = _storage_key(t)
    if storage is None:  # tensor subclasses without plain storage
        return _skip("unsupported", t)
    if storage in params or isinstance(t, nn.Parameter) or (t.is_leaf and t.requires_grad):
        return _skip("parameter", t)
    if storage in caller:
        return _skip("input", t)
    if method == "pool2" and not (
        conv_input is not None and storage == _storage_key(conv_input)
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


def _skip_counts() -> dict[str, int]:
    """The counters kept here, not in C++: tensors of selected modules left exact, and shared saves."""
    out = {f"tensorpager.compress.skipped.{reason}": _skipped.get(reason, 0)
           for reason in ("parameter", "input", "not_conv_input", "small", "unsupported")}
    out["tensorpager.compress.shared"] = _skipped.get("shared", 0)
    return out


_install.add_stats_source(_skip_counts)  # tp.stats() reports them too


def stats() -> dict[str, int]:
    """Counters since the last reset, under ``tensorpager.compress.*`` keys:
    per method ``<m>.tensors``, ``<m>.bytes_in``, ``<m>.bytes_out``,
    ``<m>.restored``; ``bytes_saved``; ``live_bytes`` and
    ``live_bytes_peak`` (packed bytes held); ``skipped.<reason>`` for
    saved tensors of selected modules left exact (``parameter``, ``input``,
    ``not_conv_input``, ``small``, ``unsupported``); and ``shared``, saves
    served by a tensor already packed (saved by two ops)."""
    return {**{str(k): int(v) for k, v in _C.compress_stats().items()}, **_skip_counts()}


def reset_stats() -> None:
    """Zeroes the counters (``live_bytes`` keeps counting what is alive)."""
    _C.compress_reset_stats()
    _skipped.clear()


_process_wide: Compression | None = None


def enable(spec: Spec, *, min_bytes: int = DEFAULT_MIN_BYTES) -> None:
    """Compresses process-wide, for every module of the process (what the
    ``compress`` configuration key does), until disable(). Replaces an
    earlier enable(). Selectors are class names or ``*`` (there is no model
    to name modules by). Not thread-safe against a concurrent enable() or
    disable(); the forwards it applies to may run on any thread.

    Raises:
        ValueError: the spec is malformed or holds a name glob.
    """
    global _process_wide
    disable()
    _process_wide = Compression(spec, min_bytes=min_bytes).__enter__()


def disable() -> None:
    """Ends what enable() started; tensors already packed still restore."""
    global _process_wide
    if _process_wide is not None:
        _process_wide.__exit__(None, None, None)
        _process_wide = None


class _CallableModule(types.ModuleType):
    """Makes ``tensorpager.compress`` callable, so ``tp.compress(...)`` is the
    context manager and ``tp.compress.stats()`` its counters."""

    def __call__(self, spec: Spec, model: nn.Module | None = None, *,
                 min_bytes: int = DEFAULT_MIN_BYTES) -> Compression:
        return Compression(spec, model, min_bytes=min_bytes)


sys.modules[__name__].__class__ = _CallableModule

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

Which saved tensors are compressed, and how compress passes the others to
the saved-tensor hooks around it (``tp.budget``, ``save_on_cpu``): Note
[Which saved tensors are compressed] and Note [Compress inside other hooks]
in compress_pack.py, whose hooks pack and restore them. The spec is parsed
in compress_spec.py.

Importing this module imports torch and loads ``tensorpager._C``.
"""

from __future__ import annotations

import sys
import types
from itertools import chain
from typing import Any

import torch
from torch import nn

from tensorpager import _ext, _module_hooks
from tensorpager.techniques import compress_pack
# METHODS, Selector and Spec are compress's names too.
from tensorpager.techniques.compress_spec import METHODS, Selector, Spec, method_of, parse_spec  # noqa: F401

__all__ = ["Compression", "METHODS", "DEFAULT_MIN_BYTES", "parse_spec", "stats", "reset_stats", "enable", "disable"]

#: Tensors smaller than this are saved as they are: the packing costs more.
DEFAULT_MIN_BYTES = 1024

_C = _ext.load()


class Compression:
    """What ``tp.compress(...)`` returns: a context manager (entered once)
    that compresses the saved activations of the selected modules (Note
    [Which saved tensors are compressed] in compress_pack.py).

    Args:
        spec: the selection (see the module docs).
        model: the model whose modules are selected; without it every module
            of the process is considered (class-name selectors only).
        min_bytes: smaller tensors are saved as they are.

    Tensors packed inside the block are restored by backward even after the
    block has ended. While a selected module runs, these saved-tensor hooks
    are the innermost ones; the tensors they leave exact go to the enclosing
    ``saved_tensors_hooks`` (``tp.budget``, ``save_on_cpu``), and the
    compressed ones stay here (Note [Compress inside other hooks] in
    compress_pack.py). Thread-safety: each thread's forward is handled
    separately; enter and exit on one thread.
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
                              if (method := method_of(self.rules, name, m)) is not None}
            if not any(m != "none" for m in self._selected.values()) and self.rules:
                kinds = sorted({type(m).__name__ for m in model.modules()})
                raise ValueError(f"compress: {spec!r} selects no module of the model; its module types: {kinds}")

    def __enter__(self) -> Compression:
        if self._handles:
            raise RuntimeError("compress: this Compression is already active")
        if self.model is None:
            self._handles = [_module_hooks.subscribe(self._pre_hook, self._post_hook)]
        else:
            self._params = compress_pack.storages(self.model)
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
                                 and (k := compress_pack.storage_key(t)) is not None)

    def _pre_hook(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        method = self._selected.get(id(module)) if self.model is not None else method_of(self.rules, None, module)
        if method is None:
            return
        params = self._params if self._params is not None else compress_pack.storages(module)
        conv_input = args[0] if method == "pool2" and args and isinstance(args[0], torch.Tensor) else None
        compress_pack.enter((module, method, conv_input, params, self._caller, self.min_bytes))

    def _post_hook(self, module: nn.Module, args: tuple[Any, ...], *rest: Any) -> None:
        compress_pack.leave(module)


def stats() -> dict[str, int]:
    """Counters since the last reset, under ``tensorpager.compress.*`` keys:
    per method ``<m>.tensors``, ``<m>.bytes_in``, ``<m>.bytes_out``,
    ``<m>.restored``; ``bytes_saved``; ``live_bytes`` and
    ``live_bytes_peak`` (packed bytes held); ``skipped.<reason>`` for
    saved tensors of selected modules left exact (``parameter``, ``input``,
    ``not_conv_input``, ``small``, ``unsupported``); and ``shared``, saves
    served by a tensor already packed (saved by two ops)."""
    return {**{str(k): int(v) for k, v in _C.compress_stats().items()}, **compress_pack.skip_counts()}


def reset_stats() -> None:
    """Zeroes the counters (``live_bytes`` keeps counting what is alive)."""
    _C.compress_reset_stats()
    compress_pack.reset_skip_counts()


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

"""tensorpager: run PyTorch training under a GPU memory budget.

No code change::

    PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,manage:activations,budget:0.5" python train.py

or explicitly, before the first allocation::

    import tensorpager as tp
    tp.install(budget="12GiB", policy="hybrid")

This module is imported by the start-up hook in every interpreter, so it
imports nothing heavy at import time: torch and the C++ extension
``tensorpager._C`` are loaded by the first call that needs them.

Configuration keys, sizes and the grammar are described in the README and in
``tensorpager._keys``; the C++ parser (``config/``) validates.
"""

from __future__ import annotations

import os

from tensorpager import _key_appliers, _keys

# Note [A lazy package]
# Every interpreter imports this package at start (the start-up hook,
# tensorpager.pth), so it loads only the boot layer (configuration text and
# sizes; scripts/check_py_layers.py checks it). The names below come from the
# layers above on first use (PEP 562), as does every submodule by name
# (tp._ext, tp.timeline): the module that defines a name is loaded then,
# once, and the name is kept here.
_FORWARDED: dict[str, str] = {
    **dict.fromkeys(
        ("config", "device_kind", "empty_cache", "get_budget", "install", "is_installed", "memory_summary",
         "reset_peak_stats", "set_budget", "snapshot", "stats", "uninstall"),
        "_install",
    ),
    "ManagedProcessError": "_managed",
    "parse_size": "_budget_value",
    "budget": "_runtime",
    "step": "_runtime",
    **dict.fromkeys(
        ("dump_snapshot", "dump_timeline", "mark_step", "report", "start_timeline", "stop_timeline"), "timeline"
    ),
}

#: The techniques (tensorpager/techniques/) reached as tp.<name>.
_TECHNIQUES = ("compress", "optim", "microbatch", "split", "split_loss")

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

__all__ = [
    "install",
    "uninstall",
    "is_installed",
    "config",
    "stats",
    "memory_summary",
    "set_budget",
    "get_budget",
    "empty_cache",
    "reset_peak_stats",
    "snapshot",
    "device_kind",
    "parse_size",
    "KEYS",
    "optim",
    "compress",
    "microbatch",
    "start_timeline",
    "stop_timeline",
    "dump_timeline",
    "dump_snapshot",
    "report",
    "mark_step",
    "record_trace",
    "budget",
    "step",
    "split_channels",
    "split_cross_entropy",
    "ManagedProcessError",
]

#: Every configuration key tensorpager accepts.
KEYS = _keys.KEYS


def _apply_compress(ext: Any) -> None:
    from tensorpager import _conf
    from tensorpager.techniques import compress

    compress.enable(_conf.parse_to_dict(ext.config())["compress"])


def _undo_compress() -> None:
    import sys

    compress = sys.modules.get("tensorpager.techniques.compress")
    if compress is not None:  # nothing to end unless the key loaded it
        compress.disable()


def _apply_manage(ext: Any) -> None:
    from tensorpager import _managed

    _managed.start_if_configured(ext)


# Note [Keys a higher layer applies] in _key_appliers.py.
_key_appliers.register("compress", _apply_compress, undo=_undo_compress)
_key_appliers.register("manage", _apply_manage)


def __getattr__(name: str) -> Any:
    import importlib.util

    module = _FORWARDED.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f"tensorpager.{module}"), name)
        globals()[name] = value
        return value
    # A technique by name: tp.optim.AdamA, tp.compress(...) and
    # tp.microbatch(...) (callable modules).
    if name in _TECHNIQUES:
        value = importlib.import_module(f"tensorpager.techniques.{name}")
        globals()[name] = value
        return value
    # A submodule by name: tp._ext, tp.timeline.
    if not name.startswith("__") and importlib.util.find_spec(f"tensorpager.{name}") is not None:
        return importlib.import_module(f"tensorpager.{name}")
    raise AttributeError(f"module 'tensorpager' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # what the forwarded names are, for type checkers
    from tensorpager._install import (
        config,
        device_kind,
        empty_cache,
        get_budget,
        install,
        is_installed,
        memory_summary,
        reset_peak_stats,
        set_budget,
        snapshot,
        stats,
        uninstall,
    )
    from tensorpager._managed import ManagedProcessError
    from tensorpager._runtime import budget, step
    from tensorpager.timeline import (
        dump_snapshot,
        dump_timeline,
        mark_step,
        report,
        start_timeline,
        stop_timeline,
    )


def record_trace(path: str | os.PathLike[str], *, compute_scale: float = 1.0, model: Any = None) -> Any:
    """A context manager recording the operators run inside it (docs/trace_format.md).

    ``with tp.record_trace("step.trace", model=model): loss = ...; loss.backward()``
    writes a trace that ``tp-sim`` (``python -m tensorpager.sim``) replays under
    any budget and policy. The ``record_trace:path`` key records from
    ``import torch`` to exit instead. See ``tensorpager.trace.record_trace``.
    """
    from tensorpager import trace

    return trace.record_trace(path, compute_scale=compute_scale, model=model)


def split_channels(model: Any = None, *, chain: Any = None, chunk_bytes: int | str = 8 << 20) -> Any:
    """Runs model's Conv2d -> BatchNorm2d -> ReLU [-> MaxPool2d] stems in channel chunks, bit-identically.

    ``split = tp.split_channels(model)``; ``split.remove()`` undoes it. A
    stem's full-size intermediates then never exist, which lowers the floor
    that no eviction reaches (docs/techniques.md). See
    ``tensorpager.techniques.split.split_channels``.
    """
    from tensorpager.techniques import split

    return split.split_channels(model, chain=chain, chunk_bytes=chunk_bytes)


def split_cross_entropy(hidden: Any, weight: Any, target: Any, **options: Any) -> Any:
    """``F.cross_entropy((hidden @ weight.t()).reshape(-1, V), target.reshape(-1))``, bit-identically,
    with the logits never whole: a language model's head and loss in row chunks (docs/techniques.md).
    See ``tensorpager.techniques.split_loss.split_cross_entropy``."""
    from tensorpager.techniques import split_loss

    return split_loss.split_cross_entropy(hidden, weight, target, **options)

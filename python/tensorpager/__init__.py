"""tensorpager: run PyTorch training under a GPU memory budget.

No code change::

    PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,budget:12GiB" python train.py

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
import sys

from tensorpager import _conf, _keys, _sizes
from tensorpager._runtime import budget, step

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
]

#: Every configuration key tensorpager accepts.
KEYS = _keys.KEYS

parse_size = _sizes.parse_size

# How the installed configuration chose its device; reported by config().
_device_source: str | None = None


def _load_ext():  # noqa: ANN202
    from tensorpager import _ext as ext

    return ext.load()


def install(conf: str | None = None, **options: Any) -> None:
    """Installs tensorpager as the allocator of this process.

    Call it once, after ``import torch`` and before the first tensor is
    allocated on the managed device. With the start-up hook (the
    ``PYTORCH_CUDA_ALLOC_CONF`` or ``TENSORPAGER_CONF`` variable) it is called
    for you when torch is imported.

    Args:
        conf: configuration text, ``key:value,key:value``. None reads
            ``TENSORPAGER_CONF`` (empty when unset: every default).
        **options: more keys, each replacing conf's entry of the same name.
            Sizes may be ints (bytes) or strings (``"12GiB"``); ``budget`` may
            also be a float ratio of the device memory (``0.6``); None means
            ``none``; paths may be ``os.PathLike``.

    If neither conf nor options name ``device`` and ``torch.cuda.device_count()``
    is 0, the CPU adapter is installed (``device:cpu``) and
    ``config()["device_source"]`` says so. Installing makes no CUDA call (the
    device count comes from NVML, as PyTorch's does): a ``CUDA_VISIBLE_DEVICES``
    set afterwards still applies, and a process forked afterwards can use CUDA.

    Raises:
        ValueError: the configuration is invalid (unknown key, malformed size,
            impossible budget), or tensorpager is already installed with a
            different one (change the budget with set_budget() instead); the
            message names the input and lists what is accepted. Installing
            again with an equal configuration does nothing.
        TypeError: an option has a type with no text form.
        ImportError: the C++ extension is missing.
    """
    global _device_source
    text = _conf.merge_options(os.environ.get(_keys.ENV_CONF, "") if conf is None else conf, options)
    ext = _load_ext()
    source = "configuration"
    if "device" not in _conf.parse_to_dict(text):
        import torch

        # Not torch.cuda.is_available(): it initialises the CUDA driver
        # (cudaGetDeviceCount) unless PYTORCH_NVML_BASED_CUDA_CHECK is set,
        # and installing runs during `import torch` (Note [No CUDA call before
        # the first allocation] in hooks/cuda_adapter.cpp). device_count()
        # asks NVML, falling back to the runtime only where NVML is missing.
        if torch.cuda.device_count() > 0:
            source = "default"
        else:
            text = _conf.join_entries([*_conf.split_entries(text, bracket_aware=False), "device:cpu"])
            source = "auto: torch.cuda.device_count() is 0 and no device was configured"
    # The C++ install() reads TENSORPAGER_CONF when given "", which would
    # override an explicit install(""); "backend:tensorpager" is every default.
    ext.install(text or "backend:tensorpager")
    _device_source = source
    _track_phases_if_recording(ext)  # the timeline key starts a recording (timeline.py)
    _compress_if_configured(ext)  # the compress key (compress.enable)
    _record_trace_if_configured(ext)  # the record_trace key (trace.start_from_config)


def _record_trace_if_configured(ext: Any) -> None:
    """The ``record_trace`` key records from install until exit (once per process)."""
    global _trace_started
    path = _conf.parse_to_dict(ext.config()).get("record_trace", "")
    if path and not _trace_started:
        from tensorpager import trace

        trace.start_from_config(path)
        _trace_started = True


_trace_started = False


def uninstall() -> None:
    """Gives PyTorch back its own CPU allocator (``device:cpu`` only).

    Tensors allocated meanwhile stay valid. Does nothing when tensorpager is
    not installed.

    Raises:
        RuntimeError: the CUDA adapter is installed; PyTorch cannot switch CUDA
            allocators while tensors live.
    """
    global _device_source
    _load_ext().uninstall()
    _device_source = None
    if "tensorpager.compress" in sys.modules:
        sys.modules["tensorpager.compress"].disable()  # what the compress key enabled


def is_installed() -> bool:
    """True when tensorpager serves this process's allocations."""
    return bool(_load_ext().is_installed())


def config() -> dict[str, str]:
    """The installed configuration: every key, as configuration text.

    Returns:
        ``{key: value}`` for every key in ``KEYS`` (defaults filled in), plus
        ``"device_source"``: ``"configuration"`` (device was given),
        ``"default"``, or ``"auto: ..."`` (no CUDA device was counted, so the CPU
        adapter was chosen). An empty dict when tensorpager is not installed.
    """
    ext = _load_ext()
    if not ext.is_installed():
        return {}
    values = dict(_keys.DEFAULTS)
    values.update(_conf.parse_to_dict(ext.config()))
    values["device_source"] = _device_source or "configuration"
    return values


def stats() -> dict[str, int]:
    """Allocator statistics under ``torch.cuda.memory_stats()``'s key names.

    Includes ``"allocated_bytes.all.current"``, ``"reserved_bytes.all.peak"``,
    ``"num_ooms"``, ... and ``"tensorpager.budget"``; and the compression
    counters under ``"tensorpager.compress.*"`` (``tp.compress.stats()``:
    ``bytes_saved``, ``live_bytes``, per method ``<m>.tensors`` ...; zero
    until something is compressed).
    """
    ext = _load_ext()
    out = {str(k): int(v) for k, v in ext.stats().items()}
    compress = sys.modules.get("tensorpager.compress")
    if compress is not None:  # loaded: its stats() adds the Python-side skip counts
        out.update(compress.stats())
    elif hasattr(ext, "compress_stats"):
        out.update({str(k): int(v) for k, v in ext.compress_stats().items()})
    return out


def memory_summary() -> str:
    """A human-readable table of the allocator's state, like ``torch.cuda.memory_summary()``."""
    return str(_load_ext().memory_summary())


def _budget_bytes(value: int | float | str | None) -> int | None:
    """Turns a set_budget() argument into bytes, or None for no budget."""
    accepted = (
        "None or 'none' (no budget); an int number of bytes > 0; a size string ("
        + _sizes.ACCEPTED_SIZE_FORMS
        + "); or a ratio of the device's memory in (0, 1] as a float or a string with a"
        " decimal point (0.6, '1.0')"
    )
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"set_budget({value!r}): a bool is not a budget. Accepted: {accepted}")
    ratio: float | None = None
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"set_budget({value!r}): a budget must be > 0 bytes. Accepted: {accepted}")
        return value
    if isinstance(value, float):
        if not 0.0 < value <= 1.0:
            raise ValueError(f"set_budget({value!r}): a ratio must be in (0, 1]. Accepted: {accepted}")
        ratio = value
    elif isinstance(value, str):
        text = value.strip()
        if text.lower() == "none":
            return None
        if _sizes.looks_like_ratio(text):
            ratio = _sizes.parse_ratio(text)
            if ratio is None:
                raise ValueError(
                    f"set_budget({value!r}): a ratio must be in (0, 1]; for a size add a unit"
                    f" (e.g. {text}GiB). Accepted: {accepted}"
                )
        elif text in ("0", "1"):
            raise ValueError(
                f"set_budget({value!r}) is ambiguous: write 1.0 for the whole device, or a size"
                f" with a unit such as 12GiB. Accepted: {accepted}"
            )
        else:
            try:
                n = _sizes.parse_size(text)
            except ValueError as e:
                raise ValueError(f"set_budget({value!r}): {e}") from None
            if n == 0:
                raise ValueError(f"set_budget({value!r}): a budget must be > 0 bytes. Accepted: {accepted}")
            return n
    else:
        raise TypeError(
            f"set_budget({value!r}): expected int, float, str or None, not"
            f" {type(value).__name__}. Accepted: {accepted}"
        )
    return int(ratio * _device_total_bytes())


def _device_total_bytes() -> int:
    """Total memory of the managed device (the simulated capacity for the CPU adapter)."""
    if device_kind() == "cuda":
        import torch

        return int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
    return _sizes.parse_size(config().get("sim_capacity", _keys.DEFAULTS["sim_capacity"]))


def set_budget(value: int | float | str | None) -> None:
    """Changes the budget of the installed allocator.

    Args:
        value: bytes (int > 0), a size string (``"12GiB"``, ``"512MB"``), a
            ratio of the device's memory (``0.6`` or ``"0.6"``), or None /
            ``"none"`` for no budget.

    Raises:
        ValueError: value is not a budget (the message lists accepted forms),
            or the C++ side refuses it.
        TypeError: value has another type.
    """
    _load_ext().set_budget(_budget_bytes(value))


def get_budget() -> int | None:
    """The current budget in bytes, or None when there is none."""
    budget = _load_ext().budget()
    return None if budget is None else int(budget)


def empty_cache() -> None:
    """Returns cached, unused memory to the device (as ``torch.cuda.empty_cache()``)."""
    _load_ext().empty_cache()


def reset_peak_stats() -> None:
    """Resets the ``*.peak`` statistics to their current values."""
    _load_ext().reset_peak_stats()


def snapshot() -> list[dict[str, Any]]:
    """The allocator's memory, one dict per segment with its blocks.

    The fields follow the segments of ``torch.cuda.memory._snapshot()``; the
    C++ side (``hooks/python_module.cpp``) defines them.
    """
    return list(_load_ext().snapshot())


def device_kind() -> str:
    """``"cuda"`` or ``"cpu"``: which adapter the installed allocator uses."""
    return str(_load_ext().device_kind())


# --- memory timelines (timeline.py, docs/timelines.md) ------------------------


def start_timeline(max_events: int | None = None, *, track_phases: bool = True) -> None:
    """Starts recording a memory timeline; a recording in progress is replaced.

    The ``timeline:PATH`` configuration key starts one at install and writes it
    to PATH at exit.

    Args:
        max_events: the most events kept (80 bytes each); later ones are
            counted as dropped. None: the ``timeline_events`` configuration
            key (default 1048576).
        track_phases: label allocations with the module and the training phase
            (forward, backward, optimizer step) through PyTorch's global hooks.

    Raises:
        RuntimeError: tensorpager is not installed.
    """
    ext = _load_ext()
    ext.timeline_start(int(max_events or 0))
    if track_phases:
        from tensorpager import timeline

        timeline.start(ext)


def stop_timeline() -> None:
    """Stops recording (and phase tracking); what was recorded stays dumpable."""
    from tensorpager import timeline

    timeline.stop()
    _load_ext().timeline_stop()


def dump_timeline(path: str | os.PathLike[str], top: int = 20) -> None:
    """Writes the current (or last) recording, in the format the extension names.

    ``.json``: Perfetto / chrome://tracing; ``.pickle``: PyTorch's memory_viz;
    ``.html``: a self-contained page; ``.txt``: the text report. ``top`` rows
    in the tables of the largest blocks live at the peak.

    Raises:
        ValueError: another extension.
        RuntimeError: nothing was recorded, or the file cannot be written.
    """
    _load_ext().timeline_dump(os.fspath(path), int(top))


def dump_snapshot(path: str | os.PathLike[str]) -> None:
    """Writes the recording as a memory_viz snapshot pickle, whatever the file's name."""
    _load_ext().timeline_dump(os.fspath(path), 20, "pickle")


def report(top: int = 20) -> str:
    """The text report of the current (or last) recording: totals and the largest blocks at the peak."""
    return str(_load_ext().timeline_report(int(top)))


def mark_step() -> None:
    """Records a step boundary. Phase tracking does this after each optimizer step already."""
    from tensorpager import timeline

    timeline.mark_step(_load_ext())


def _compress_if_configured(ext: Any) -> None:
    """Applies the ``compress`` key process-wide (the C++ parser has checked
    it and writes "none" as nothing); it imports torch, as install() has."""
    spec = _conf.parse_to_dict(ext.config()).get("compress", "")
    if spec:
        from tensorpager import compress

        compress.enable(spec)


def _track_phases_if_recording(ext: Any) -> None:
    if ext.timeline_info()["recording"]:
        from tensorpager import timeline

        timeline.start(ext)


# Training techniques (issue 7), loaded on first access because each imports
# torch: tp.optim.AdamA, tp.compress(...) (a callable module: the context
# manager, plus tp.compress.stats()), tp.microbatch(...) (callable too).
_LAZY_SUBMODULES = ("optim", "compress", "microbatch")


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"tensorpager.{name}")
    raise AttributeError(f"module 'tensorpager' has no attribute {name!r}")


def record_trace(path: str | os.PathLike[str], *, compute_scale: float = 1.0, model: Any = None) -> Any:
    """A context manager recording the operators run inside it (docs/trace_format.md).

    ``with tp.record_trace("step.trace", model=model): loss = ...; loss.backward()``
    writes a trace that ``tp-sim`` (``python -m tensorpager.sim``) replays under
    any budget and policy. The ``record_trace:path`` key records from
    ``import torch`` to exit instead. See ``tensorpager.trace.record_trace``.
    """
    from tensorpager import trace

    return trace.record_trace(path, compute_scale=compute_scale, model=model)

"""Installing tensorpager and asking the installed allocator: the functions
behind ``tp.install``, ``tp.stats``, ``tp.set_budget`` and their neighbours
(the package's ``__init__`` re-exports them).

Imports nothing heavy: torch and the C++ extension are loaded by the first
call that needs them.
"""

from __future__ import annotations

import os
import sys

from tensorpager import _budget_value, _conf, _ext, _key_appliers, _keys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

# How the installed configuration chose its device; reported by config().
_device_source: str | None = None


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
            also be a float, a ratio of the first step's peak (``0.5``, with
            ``manage="activations"``; Note [Budget spellings]); None means
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
    ext = _ext.load()
    source = "configuration"
    device = _conf.parse_to_dict(text).get("device")
    if device is not None and device.strip().lower() == "cuda":
        import torch

        # Accepted (a GPU may appear, as in a child with other CUDA_VISIBLE_DEVICES),
        # but said once: nothing is managed until then. NVML, no driver call.
        if torch.cuda.device_count() == 0:
            sys.stderr.write("tensorpager: device:cuda, but torch sees no CUDA device (torch.cuda.device_count()"
                             " is 0): nothing will go through tensorpager until one is visible; without a GPU,"
                             " device:cpu puts CPU tensors under tensorpager\n")
    elif device is None:
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
    _manage_if_configured(ext)  # the manage key: Note [Managed process] in _managed.py
    if ext.device_kind() == "cuda":
        from tensorpager import _graphs

        _graphs.leave_refused_captures_where_they_began()


def _manage_if_configured(ext: Any) -> None:
    """The ``manage:activations`` key enters the process-wide budget (once per
    process; Note [Keys a higher layer applies] in _key_appliers.py)."""
    if _conf.parse_to_dict(ext.config()).get("manage", "none") != "none":
        _key_appliers.apply("manage", ext)


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
    _ext.load().uninstall()
    _device_source = None
    _key_appliers.undo_all()  # what the compress key enabled


def is_installed() -> bool:
    """True when tensorpager serves this process's allocations."""
    return bool(_ext.load().is_installed())


def config() -> dict[str, str]:
    """The installed configuration: every key, as configuration text.

    Returns:
        ``{key: value}`` for every key in ``KEYS`` (defaults filled in), plus
        ``"device_source"``: ``"configuration"`` (device was given),
        ``"default"``, or ``"auto: ..."`` (no CUDA device was counted, so the CPU
        adapter was chosen). An empty dict when tensorpager is not installed.
    """
    ext = _ext.load()
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
    ext = _ext.load()
    out = {str(k): int(v) for k, v in ext.stats().items()}
    if hasattr(ext, "compress_stats"):
        out.update({str(k): int(v) for k, v in ext.compress_stats().items()})
    for source in _stats_sources:  # the counters a technique keeps in Python
        out.update(source())
    return out


# What layers above add to stats(): compress registers its Python-side skip
# counts when it is loaded (the face does not know it by name).
_stats_sources: list[Callable[[], dict[str, int]]] = []


def add_stats_source(source: Callable[[], dict[str, int]]) -> None:
    """source() is merged into every stats() from now on."""
    _stats_sources.append(source)


def memory_summary() -> str:
    """A human-readable table of the allocator's state, like ``torch.cuda.memory_summary()``."""
    return str(_ext.load().memory_summary())


def _budget_bytes(value: int | float | str | None) -> int | None:
    """Turns a set_budget() argument into bytes, or None for no budget (_budget_value.py)."""
    checked = _budget_value.check(value, "tensorpager.set_budget")
    if checked is None:
        return None
    kind, amount = checked
    if kind == "bytes":
        return int(amount)
    if kind == "peak":  # Note [Budget spellings]: set_budget caps the allocator now
        raise ValueError(f"tensorpager.set_budget({value!r}): {amount} is a ratio of the first step's peak, which"
                         f" set_budget cannot know: it caps the allocator now. Write '{amount}device' for that share"
                         f" of the device's memory, or a size; tp.budget({amount}) trains at that share of the peak")
    return _budget_value.ratio_bytes(float(amount), _device_total_bytes(), "tensorpager.set_budget",
                                     "the device's memory")


def _device_total_bytes() -> int:
    """Total memory of the managed device (the simulated capacity for the CPU adapter)."""
    if device_kind() == "cuda":
        import torch

        return int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
    return _budget_value.parse_size(config().get("sim_capacity", _keys.DEFAULTS["sim_capacity"]))


def set_budget(value: int | float | str | None) -> None:
    """Changes the budget of the installed allocator.

    Args:
        value: bytes (int > 0), a size string (``"12GiB"``, ``"512MB"``), a
            share of the device's memory (``"0.6device"``), or None /
            ``"none"`` for no budget (Note [Budget spellings]).

    Raises:
        ValueError: value is not a budget (the message lists accepted forms),
            a ratio of the peak (``0.6``, ``"0.6"``: only ``tp.budget`` and
            ``manage:activations`` measure a step), or the C++ side refuses it.
        TypeError: value has another type.
    """
    _ext.load().set_budget(_budget_bytes(value))


def get_budget() -> int | None:
    """The current budget in bytes, or None when there is none."""
    budget = _ext.load().budget()
    return None if budget is None else int(budget)


def empty_cache() -> None:
    """Returns cached, unused memory to the device (as ``torch.cuda.empty_cache()``)."""
    _ext.load().empty_cache()


def reset_peak_stats() -> None:
    """Resets the ``*.peak`` statistics to their current values."""
    _ext.load().reset_peak_stats()


def snapshot() -> list[dict[str, Any]]:
    """The allocator's memory, one dict per segment with its blocks.

    The fields follow the segments of ``torch.cuda.memory._snapshot()``; the
    C++ side (``hooks/python_module.cpp``) defines them.
    """
    return list(_ext.load().snapshot())


def device_kind() -> str:
    """``"cuda"`` or ``"cpu"``: which adapter the installed allocator uses."""
    return str(_ext.load().device_kind())


def _compress_if_configured(ext: Any) -> None:
    """Applies the ``compress`` key process-wide (the C++ parser has checked
    it and writes "none" as nothing); it imports torch, as install() has."""
    if _conf.parse_to_dict(ext.config()).get("compress", ""):
        _key_appliers.apply("compress", ext)  # Note [Keys a higher layer applies]


def _track_phases_if_recording(ext: Any) -> None:
    if ext.timeline_info()["recording"]:
        from tensorpager import timeline

        timeline.track_phases_for(ext)

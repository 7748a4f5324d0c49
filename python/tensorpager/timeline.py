"""Memory timelines: recording, phase tracking, and the files (docs/timelines.md).

The C++ event log (``profiler/``) records every allocator event while a
timeline is recording. This module adds what only Python knows: which phase of
training an allocation belongs to and which module made it.

Phase tracking (Note [Categories are inferred] in
``profiler/timeline_analysis.hpp``) uses PyTorch's global hooks, so it needs no
change to the model or the loop:

* a global module forward pre-hook and forward hook: the innermost running
  module labels allocations (``"features.0 (Conv2d)"``), which count as
  ``activation``; the outermost module's output gets a gradient hook whose
  firing marks the start of backward, after which allocations count as
  ``gradient``;
* global optimizer step pre- and post-hooks: allocations during ``step()``
  count as ``optimizer_state``; after the step the parameters, their
  gradients and the optimizer's state tensors are tagged with what they are
  (the tag re-labels those blocks for their whole life), and a step boundary
  is recorded, unless a budget's runtime records them (Note [One step per
  iteration]);
* the first forward of each outermost module tags its parameters and
  buffers as ``parameter``.

Note [One step per iteration]
  A recording has one step boundary per training iteration. Without a budget
  the optimizer's post-hook records it, after ``step()``. Inside ``tp.budget``
  the runtime records it, at the first forward of the next iteration (its
  policies plan from the step it saw), and the block records the last one when
  it ends; the optimizer hook then records none, or every iteration would
  count twice.

Everything else is ``unknown``. The phase and the running module are one
per process, as the allocator's context is: with several threads running
forward at once (``nn.DataParallel``) the labels can mix, never the bytes.
The hooks cost a few microseconds per module call while recording, nothing
otherwise (they are removed by ``stop_timeline()``). This module imports torch
only when tracking starts.
"""

from __future__ import annotations

import os
import threading
import weakref

from tensorpager import _ext, _module_hooks

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

__all__ = ["start_timeline", "stop_timeline", "dump_timeline", "dump_snapshot", "report", "mark_step",
           "is_tracking"]

_lock = threading.Lock()
_tracker: _PhaseTracker | None = None
_boundaries = 0  # step boundaries recorded so far, by the hooks or by mark_step()


def _next_step() -> int:
    global _boundaries
    with _lock:
        index = _boundaries
        _boundaries += 1
    return index


class _PhaseTracker:
    """Sets the event log's context from PyTorch's hooks. One per process."""

    def __init__(self, ext: ModuleType) -> None:
        import torch.optim.optimizer as opt

        self._ext = ext
        self._labels: dict[str, int] = {}
        self._module_names: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._param_names: dict[int, str] = {}
        self._stack: list[int] = []  # label ids of the modules running forward
        self._phase = "unknown"
        self._handles = [
            _module_hooks.subscribe(self._forward_pre, self._forward_post),
            opt.register_optimizer_step_pre_hook(self._step_pre),
            opt.register_optimizer_step_post_hook(self._step_post),
        ]

    def reset(self) -> None:
        """Forgets what belongs to the previous recording: label ids are per log,
        and a new recording should tag the models' parameters again."""
        self._labels.clear()
        self._module_names = weakref.WeakKeyDictionary()
        self._param_names.clear()

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    # --- labels and context --------------------------------------------------

    def _label(self, text: str) -> int:
        label = self._labels.get(text)
        if label is None:
            label = int(self._ext.timeline_intern(text))
            self._labels[text] = label
        return label

    def _set(self, phase: str, label: int = 0) -> None:
        self._phase = phase
        self._ext.timeline_set_context(phase, label)

    def _tag(self, tensor: Any, category: str, name: str = "") -> None:
        try:
            address = tensor.untyped_storage().data_ptr()
        except (RuntimeError, AttributeError):
            return  # sparse, meta or otherwise storage-less
        if address:
            self._ext.timeline_tag(address, category, self._label(name) if name else 0)

    def _name_modules(self, root: Any) -> None:
        """Labels every submodule of root and tags its parameters and buffers."""
        root_type = type(root).__name__
        for name, m in root.named_modules():
            if m not in self._module_names:
                self._module_names[m] = f"{name} ({type(m).__name__})" if name else root_type
        for name, p in root.named_parameters():
            self._param_names[id(p)] = name
            self._tag(p, "parameter", f"{name} (parameter)")
        for name, b in root.named_buffers():
            self._tag(b, "parameter", f"{name} (buffer)")

    # --- hooks ---------------------------------------------------------------

    def _forward_pre(self, module: Any, args: Any) -> None:
        if not self._stack and module not in self._module_names:
            self._name_modules(module)
        name = self._module_names.get(module)
        if name is None:
            name = type(module).__name__
        label = self._label(name)
        self._stack.append(label)
        # A forward inside backward (checkpointing) recomputes activations.
        self._set("activation", label)

    def _forward_post(self, module: Any, args: Any, *rest: Any) -> None:
        output = rest[-1]  # None after a forward that raised (Note [One pair of global module hooks])
        if self._stack:
            self._stack.pop()
        if self._stack:
            self._set("activation", self._stack[-1])
            return
        self._set("activation")
        for t in _tensors(output):
            if t.requires_grad and t.grad_fn is not None:
                t.register_hook(self._backward_started)

    def _backward_started(self, grad: Any) -> None:
        self._set("gradient", self._label("backward"))

    def _step_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._set("optimizer_state", self._label(f"optimizer step ({type(optimizer).__name__})"))

    def _step_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        for group in optimizer.param_groups:
            for p in group["params"]:
                name = self._param_names.get(id(p), "")
                self._tag(p, "parameter", f"{name} (parameter)" if name else "")
                if p.grad is not None:
                    self._tag(p.grad, "gradient", f"{name} (gradient)" if name else "")
        kind = type(optimizer).__name__
        for p, state in optimizer.state.items():
            name = self._param_names.get(id(p), "")
            for key, value in state.items():
                if hasattr(value, "untyped_storage") and value.dim() > 0:
                    self._tag(value, "optimizer_state", f"{name} {kind}.{key}" if name else f"{kind}.{key}")
        # Note [One step per iteration]: under a budget the runtime records
        # the boundaries (it needs them for its policies); recording one here
        # too would count every iteration twice.
        if not self._ext.timeline_runtime_steps():
            self._ext.timeline_step(_next_step())
        self._set("unknown")


def _tensors(value: Any) -> list[Any]:
    """The tensors in a module's output (a tensor, or nested tuples, lists, dicts)."""
    import torch

    out: list[Any] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (tuple, list)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
    return out


def track_phases_for(ext: ModuleType) -> None:
    """Starts phase tracking for a new recording: steps count from 0 again.

    Idempotent for the hooks. Call it after the recording has started.
    """
    global _tracker, _boundaries
    with _lock:
        _boundaries = 0
        if _tracker is None:
            _tracker = _PhaseTracker(ext)
        else:
            _tracker.reset()


def stop_tracking() -> None:
    """Removes the hooks phase tracking installed (idempotent)."""
    global _tracker
    with _lock:
        if _tracker is not None:
            _tracker.close()
            _tracker = None


def is_tracking() -> bool:
    """Whether the phase-tracking hooks are installed."""
    return _tracker is not None


# --- the public functions (re-exported by the package) -----------------------


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
    ext = _ext.load()
    ext.timeline_start(int(max_events or 0))
    if track_phases:
        track_phases_for(ext)


def stop_timeline() -> None:
    """Stops recording (and phase tracking); what was recorded stays dumpable."""
    stop_tracking()
    _ext.load().timeline_stop()


def dump_timeline(path: str | os.PathLike[str], top: int = 20) -> None:
    """Writes the current (or last) recording, in the format the extension names.

    ``.json``: Perfetto / chrome://tracing; ``.pickle``: PyTorch's memory_viz;
    ``.html``: a self-contained page; ``.txt``: the text report. ``top`` rows
    in the tables of the largest blocks live at the peak.

    Raises:
        ValueError: another extension.
        RuntimeError: nothing was recorded, or the file cannot be written.
    """
    _ext.load().timeline_dump(os.fspath(path), int(top))


def dump_snapshot(path: str | os.PathLike[str]) -> None:
    """Writes the recording as a memory_viz snapshot pickle, whatever the file's name."""
    _ext.load().timeline_dump(os.fspath(path), 20, "pickle")


def report(top: int = 20) -> str:
    """The text report of the current (or last) recording: totals and the largest blocks at the peak."""
    return str(_ext.load().timeline_report(int(top)))


def mark_step() -> None:
    """Records a step boundary. Phase tracking does this after each optimizer step already."""
    ext = _ext.load()
    ext.timeline_step(_next_step())

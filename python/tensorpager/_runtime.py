"""Training under a budget: ``tp.budget()`` and ``tp.step()``.

::

    import tensorpager as tp
    with tp.budget("12GiB", policy="hybrid"):
        for batch in loader:
            loss = model(batch).sum(); loss.backward(); opt.step(); opt.zero_grad()

Inside the block tensorpager's runtime is the allocator's reclaimer: when an
allocation would pass the budget it evicts activations that autograd saved
for backward, copying them to pinned host memory (swap) or dropping those it
can recompute, and brings them back when backward needs them. The C++ side is
``hooks/budget/`` (Note [Saved storages], Note [Session lifetime]); this
module is the block; the saved-tensor hooks and module recompute that need
Python are in ``_tracker.py`` (Note [Segments]; Note [torch.compile] in ``_compiled.py``).

Note [Step boundaries]
The runtime learns one step's access sequence and uses it in the next
(prefetch ahead, plans). A step is one training iteration; where one ends,
and at which boundary a ratio budget is resolved, is Note [Where an
iteration ends] in ``_steps.py``. An explicit ``tp.step()`` is a boundary too.

Note [Peaks under a ratio budget]
A ratio budget measures its first step without a cap, so that step's peak is
above the budget it sets (by 1/ratio). A peak read at the end, with that step
in it, reads as a budget broken while every budgeted step kept to it. So when
the ratio takes effect the tracker keeps the measured peak
(``Tracker.measured_peak``) and resets the peak statistics: from then on
``tp.stats()`` (and ``torch.cuda.max_memory_reserved()``) give the peaks under
the budget, and the exit line of a managed process gives both, apart (Note
[The exit line] in ``_exit_report.py``). A user's own reset later wins, as always.

Note [What a budget covers]
The cap is the allocator's, so it is device-wide. The runtime manages what
the thread that entered the block saves for backward (autograd's own threads
unpack it for that thread); another thread's forwards and saved tensors pass
through untouched, neither steps nor segments, and so do ``no_grad`` and
``inference_mode`` sections. A managed process follows the first thread that
trains instead (Note [The managed thread] in ``_managed.py``).
"""

from __future__ import annotations

from tensorpager import _budget_value, _ext, _install, _module_hooks, _tracker
from tensorpager import timeline as _timeline

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["budget", "step", "active"]

# Note [Who holds the session]
# Whether a budget is active is the C++ side's to say (``_C.budget_active()``:
# one session per process, whoever opened it, a LibTorch budget_scope
# included). What Python keeps is which of its blocks holds that session, so
# that ``tp.step()`` reaches the block's tracker and a nested block's error
# names the holder. ``_holder`` is set right after ``budget_begin`` opened the
# session and cleared before ``budget_end`` closes it: never a block whose
# session is not the active one.
_holder: budget | None = None


def active() -> budget | None:
    """The ``budget`` block that holds the active session, or None."""
    return _holder


def step() -> None:
    """Marks a step boundary (Note [Step boundaries]); nothing without a budget."""
    if _holder is not None:
        _holder._tracker.step(by_hand=True)


class budget:
    """A context manager: training under a memory budget (module docstring).

    Args:
        size: the budget: bytes (int), a size string (``"12GiB"``), a ratio
            in (0, 1] of the first step's peak reserved bytes (``0.5`` or
            ``"0.5"``; Note [Step boundaries]), a share of the device's memory
            (``"0.9device"``), or None (manage and measure, evict nothing).
            Note [Budget spellings].
        policy: ``lru``, ``dtr``, ``capuchin`` or ``hybrid``; None: the
            configuration's ``policy`` key.
        timeline: a file to dump the block's memory timeline to at exit
            (``.json``, ``.pickle``, ``.html`` or ``.txt``); None: no dump.
        prefetch: prefetch swapped tensors ahead of their use, following the
            previous step's access sequence.
        recompute: allow dropping and recomputing activations (Note
            [Segments]); False: swap only.
        lend: let the runtime swap parameters and gradients out while a
            backward no longer needs them (Note [Lending parameters and
            gradients] in ``_lend.py``); False: they stay on the device;
            None: the extension's ``BUDGET_LENDS_BY_DEFAULT`` (True; C++
            ``budget_lends_by_default``, which tp-sim's ``--lend`` default
            reads too).
        segment_depth: the module depth of recompute segments (>= 1).

    tensorpager is installed first if it is not (``tp.install()``, which picks
    the CPU adapter when there is no CUDA device). Budgets do not nest.

    Raises:
        ValueError: a malformed size, a ratio outside (0, 1], an unknown
            policy, or a budget below memory in use; nothing changes.
        RuntimeError: a budget is already active (ManagedProcessError, a
            RuntimeError, when ``manage:activations`` manages the process:
            Note [Managed process] in ``_managed.py``).
        torch.OutOfMemoryError: inside the block, when evicting everything
            it may still leaves too little; the message has the breakdown.
    """

    def __init__(self, size: int | float | str | None = None, *, policy: str | None = None,
                 timeline: str | None = None, prefetch: bool = True, recompute: bool = True,
                 segment_depth: int = 1, lend: bool | None = None) -> None:
        # Hostile values and bad paths fail here, not at exit (Note [Budget spellings]).
        checked = _budget_value.check_block_arguments(size, timeline)
        self.bytes: int | None = None
        self.ratio: float | None = None  # of the first step's peak
        self._device_share: float | None = None  # resolved in __enter__, once installed
        if checked is not None:
            kind, amount = checked
            if kind == "bytes":
                self.bytes = int(amount)
            elif kind == "peak":
                self.ratio = float(amount)
            else:
                self._device_share = float(amount)
        if segment_depth < 1:
            raise ValueError(f"tensorpager.budget: segment_depth must be >= 1; got {segment_depth}")
        self.policy = policy
        self.timeline = None if timeline is None else str(timeline)
        self.prefetch = prefetch
        self.recompute = recompute
        self.segment_depth = segment_depth
        self.lend = lend
        self._previous: int | None = None
        self._handles: list[Any] = []
        self._hooks: Any = None
        self._tracker: _tracker.Tracker | None = None

    # A tp.budget block covers the thread that entered it (Note [What a
    # budget covers]); the managed process overrides this.
    _follows_training_thread = False

    def __enter__(self) -> budget:
        global _holder
        import torch

        if not _install.is_installed():
            _install.install()
        ext = _ext.load()
        if ext.budget_active():  # Note [Who holds the session]
            raise _holder._nested_error() if _holder is not None else self._nested_error()
        if self._device_share is not None:
            self.bytes = _budget_value.ratio_bytes(self._device_share, _install._device_total_bytes(),
                                                   "tensorpager.budget", "the device's memory")
        self._previous = ext.budget_begin(self.bytes, self.ratio, self.policy, self.prefetch)
        try:
            if self.timeline is not None:
                _timeline.start_timeline()
            lend = ext.BUDGET_LENDS_BY_DEFAULT if self.lend is None else bool(self.lend)
            self._tracker = tr = _tracker.Tracker(ext, self.segment_depth, self.recompute,
                                                  self._follows_training_thread, lend)
            tr.measuring, tr.ratio = self.ratio is not None, self.ratio  # Note [Peaks under a ratio budget]
            self._handles = [_module_hooks.subscribe(tr.pre_forward, tr.post_forward)]
            self._hooks = torch.autograd.graph.saved_tensors_hooks(tr.pack, tr.unpack)
            self._hooks.__enter__()
        except BaseException:
            self._remove_hooks()
            if self._tracker is not None and self._tracker.lender is not None:
                self._tracker.lender.close()  # its optimizer hook, and _lend's open lender
            ext.budget_end(self._previous)
            raise
        _holder = self
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        global _holder
        import warnings

        # The session always ends (Note [Session lifetime]); an error while
        # ending it never replaces the block's own exception.
        self._remove_hooks()
        _holder = None
        ext = _ext.load()
        tracker = self._tracker
        lend_error: Exception | None = None
        if tracker is not None and tracker.lender is not None:
            try:
                tracker.lender.close()  # ending the session restores what this could not
            except Exception as e:
                lend_error = e
        if tracker is not None and tracker.unpacked:
            ext.timeline_step(tracker.boundaries)  # the last iteration's end (Note [One step per iteration])
        if self.timeline is not None:
            # The block's timeline is the block's: what ending the session
            # brings back, with the budget lifted, is not part of it.
            _timeline.stop_timeline()
        try:
            lost = ext.budget_end(self._previous)
            if lost:
                warnings.warn(f"tensorpager.budget: {lost}", RuntimeWarning, stacklevel=2)
        except Exception:
            if exc_type is None:
                raise
        finally:
            if lend_error is not None and exc_type is None:
                warnings.warn(f"tensorpager.budget: a lent storage came back only as the session ended: {lend_error}",
                              RuntimeWarning, stacklevel=2)
            if self.timeline is not None:
                if exc_type is None:
                    _timeline.dump_timeline(self.timeline)
                else:
                    try:
                        _timeline.dump_timeline(self.timeline)
                    except Exception as e:  # the block's exception is the one to see
                        warnings.warn(f"tensorpager.budget: the timeline was not written: {e}", RuntimeWarning,
                                      stacklevel=2)

    def _nested_error(self) -> RuntimeError:
        """What entering another budget while this one is active raises."""
        return RuntimeError("tensorpager.budget: a budget is already active; budgets do not nest")

    def _remove_hooks(self) -> None:
        if self._tracker is not None:
            self._tracker.close()
        if self._hooks is not None:
            self._hooks.__exit__(None, None, None)
            self._hooks = None
        for h in self._handles:
            h.remove()
        self._handles = []

    @property
    def steps(self) -> int:
        """Training iterations so far, as the runtime counts them (Note [A step is an iteration] in
        ``runtime/runtime_stats.hpp``): the one in progress included."""
        return int(_ext.load().runtime_stats().get("tensorpager.runtime.steps", 0))

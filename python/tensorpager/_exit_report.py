"""What a managed process says: the line at exit, the peak of an unmanaged one, and its out-of-memory hint.

The managed process itself is ``_managed.py`` (Note [Managed process]); this
module makes its messages and holds no state of its own.

Note [The exit line]
  One line on stderr at exit (``exit_line``): the budget; the peak of
  reserved bytes under it, which is what a user compares with the budget;
  and, for a ratio, apart from it, the peak that the ratio was resolved on,
  measured without a budget (Note [A ratio is a share of a steady iteration]
  in ``hooks/budget/budget_api.hpp``) (Note [Peaks under a ratio budget]
  in ``_runtime.py``): one "peak reserved" that is the larger of the two
  reads as a budget broken while every budgeted step kept to it (Measured:
  docs/decisions.md, Note [The exit line]). Then what the runtime moved, how long
  the step waited for it, and the host waits on the device that giving memory
  back took (``tensorpager.num_device_syncs``: a ``cudaFree`` waits for the
  whole device, an unmap for its stream; each stops the host queueing work
  ahead, so a steady state should make none: Note [Giving memory back
  waits] in ``allocator/caching_allocator.hpp``), and the steps.

Note [The out-of-memory hint in a managed process]
  The allocator's out-of-memory message (``allocator/oom_report.cpp``) ends
  with a hint for a budget set alone: raise it, or "wrap the training loop in
  ``with tensorpager.budget(...)``" when no budget runtime is there (a
  managed session registers its runtime at its first saved tensor). In a
  managed process that block raises ManagedProcessError, and what works is the configuration: a larger budget, ``manage:all`` under
  ``manage:activations``, or the ``tp.split_*`` helpers for the operators no
  eviction can lower. The message is made in C++, which does not know the
  ``manage`` key, so the hint is replaced here (``mend_oom_hint``) where the
  exception passes through Python: the outermost module's forward hook (which
  torch runs, ``always_call``, inside its ``except`` block) and, for one
  raised elsewhere (a backward, an optimizer step, the top level) and never
  caught, the process's ``sys.excepthook`` and ``threading.excepthook``.

Note [The peak at exit]
  A process that the variable installed tensorpager in without ``manage``
  and without a budget (``backend:tensorpager`` alone, as a user measuring
  before choosing one) prints one line at exit too: the peak of reserved bytes, and the
  keys that would train under half of it. Nothing when it allocated nothing
  through tensorpager (a subprocess that only imports torch) or in a
  DataLoader worker.
"""

from __future__ import annotations

import sys

from tensorpager import _ext
from tensorpager._keys import MANAGE_ACTIVATIONS, MANAGE_ALL

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable


def report_peak() -> None:
    """Note [The peak at exit]: the line of a process the variable installed tensorpager in without ``manage``."""
    from tensorpager import _install

    if not _install.is_installed() or _install.get_budget() is not None:
        return  # a budget chosen already
    try:
        from torch.utils.data import get_worker_info

        if get_worker_info() is not None:
            return  # a DataLoader worker: its parent's peak is the one that matters
    except ImportError:
        pass
    stats = _ext.load().stats()
    peak = int(stats.get("reserved_bytes.all.peak", 0))
    if peak > 0:
        sys.stderr.write(peak_line(peak, int(stats.get("tensorpager.num_device_syncs", 0))) + "\n")
        sys.stderr.flush()


def peak_line(peak: int, device_syncs: int = 0) -> str:
    """Note [The peak at exit]; `device_syncs`: Note [The exit line]. Pure."""
    return (f"tensorpager: peak reserved {_ext.load().format_bytes(peak)} ({peak} B), {device_syncs} device syncs,"
            f" no budget; to train under one add manage:activations (or manage:all) and budget:0.5, or bytes such as"
            f" budget:{peak // 2}")


def exit_line(budget: int | None, peak: int, runtime: dict[str, int], steps: int, timeline: str,
              manage: str = MANAGE_ACTIVATIONS, *, ratio: float | None = None, measured_peak: int | None = None,
              device_syncs: int = 0, partitioner: float | None = None, compiling_again: bool = False) -> str:
    """Note [The exit line]. `peak`: reserved bytes since the budget took effect (all of them without one);
    `ratio`: the budget key's ratio, if it was one; `measured_peak`: the peak that ratio was resolved on (with
    no `budget`: refused), None before a second step began; `steps`: training iterations; `manage`: the key's
    value; `partitioner`: the activation_memory_budget the compiled regions were given, if any (Note [A
    partitioner budget for compiled regions] in _partitioner.py), and whether the ratio still waited on an
    iteration compiled with it. Pure."""
    human = _ext.load().format_bytes
    p = "tensorpager.runtime."
    where = f"timeline {timeline} (written at exit)" if timeline else "no timeline (add timeline:run.json)"
    compiled = ("" if partitioner is None else
                f" compiled regions recompiled with torch's activation_memory_budget {partitioner:g}, their backward"
                " recomputing what they no longer save;")
    if budget is None:
        unresolved = ("" if ratio is None else
                      f" (ratio {ratio:g} of the measured peak, set once a steady iteration has ended: none did)"
                      if measured_peak is None else
                      f" (ratio {ratio:g} of the measured peak, {human(measured_peak)}, set once an iteration of the"
                      " compiled regions compiled again has ended: none did)"
                      if compiling_again else
                      f" (ratio {ratio:g} of the measured peak, {human(measured_peak)}, was refused)")
        figures = f"budget none{unresolved}; peak reserved without a budget {human(peak)} ({peak} B)"
    else:
        measured = ("" if ratio is None or measured_peak is None else
                    f" = {ratio:g} x {human(measured_peak)} ({measured_peak} B), the peak reserved"
                    " measured without a budget")
        figures = (f"budget {human(budget)} ({budget} B){measured};"
                   f" peak reserved under the budget {human(peak)} ({peak} B)")
    return (f"tensorpager: manage:{manage}: {figures},"
            f" offloaded {human(runtime.get(p + 'offloaded_bytes', 0))}"
            f" ({runtime.get(p + 'offloads', 0)} offloads),"
            f" recomputed {human(runtime.get(p + 'recomputed_bytes', 0))}"
            f" ({runtime.get(p + 'recomputes', 0)} recomputes),"
            f" stalled {runtime.get(p + 'stall_ns', 0) / 1e6:.1f} ms,"
            f" {device_syncs} device syncs, {steps} steps;{compiled} {where}")


# The allocator's hint when the budget is what ran out (allocator/oom_report.cpp).
_BUDGET_HINT = " Hint: raise the budget"


def oom_hint(manage: str, budget: str) -> str:
    """Note [The out-of-memory hint in a managed process]: the hint that works
    under these keys' values. Pure."""
    more = ("" if manage == MANAGE_ALL else
            "; add manage:all so that the weights, gradients and optimizer state a backward no longer needs are"
            " swapped out too")
    return (f" Hint: this process is managed from the configuration (manage:{manage}, budget:{budget}): raise the"
            " budget (a larger ratio of the measured peak, up to 1.0, or more bytes) or reduce the batch size"
            f"{more}; or split the operators that hold the most at once, which no eviction lowers:"
            " tp.split_channels(model) for a convolution stem, tp.split_cross_entropy(hidden, weight, target) for a"
            " language model's head and loss (import tensorpager as tp).")


def mend_oom_hint(error: BaseException | None, configured: tuple[str, str] | None) -> None:
    """Replaces the hint of tensorpager's out-of-memory message in `error` by
    the managed process's (Note [The out-of-memory hint in a managed
    process]); `configured`: the manage and budget keys' values, None when the
    process is no longer managed. Leaves any other exception as it is."""
    if configured is None or error is None or not error.args:
        return
    message = error.args[0]
    if not isinstance(message, str) or not message.startswith("tensorpager: out of memory: "):
        return
    at = message.find(_BUDGET_HINT)
    if at < 0:
        return  # fragmentation or a full device: the allocator's own hint holds here too
    error.args = (message[:at] + oom_hint(*configured), *error.args[1:])


def mend_uncaught(mend: Callable[[BaseException | None], None]) -> None:
    """Note [The out-of-memory hint in a managed process]: the process's
    excepthooks call mend(error) on an uncaught error before it is printed."""
    import threading

    print_uncaught = sys.excepthook
    print_thread_uncaught = threading.excepthook

    def excepthook(kind: Any, error: Any, tb: Any) -> None:
        mend(error)
        print_uncaught(kind, error, tb)

    def thread_excepthook(args: Any) -> None:
        mend(args.exc_value)
        print_thread_uncaught(args)

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook

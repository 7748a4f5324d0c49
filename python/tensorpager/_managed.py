"""The process-wide runtime of the ``manage:activations`` key.

::

    PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,manage:activations,budget:0.5" python train.py

Note [Managed process]
  ``install()`` (reached from the start-up hook at ``import torch``) enters a
  ``tp.budget`` block for the whole process when the configuration says
  ``manage:activations``: the same saved-tensor hooks, module hooks and step
  detection (``_runtime.py``), entered once and ended at exit, never by the
  user. The budget is the ``budget`` key and the policy the ``policy`` key:

  - bytes (``budget:6GiB``, ``budget:4096``): that budget from the start;
  - a ratio of the peak (``budget:0.5``): a share of the peak reserved bytes
    of the first steady iteration, as ``tp.budget(0.5)`` (Note [A ratio is a
    share of a steady iteration] in ``hooks/budget/budget_api.hpp``): "train
    at half of what it needs" is what a user who sets one variable asks for.
    The allocator has no cap until that iteration ends;
  - a share of the device (``budget:0.9device``): the cap ``install()`` set
    from the start;
  - none: every saved tensor is managed and measured, nothing is evicted.

  The spellings are Note [Budget spellings] (``config/memory_budget.hpp``),
  the same at every front door.

  The saved-tensor hooks are torch's default hooks of the thread that
  imported torch, entered and kept (``saved_tensors_hooks.__enter__``), so a
  user's own ``saved_tensors_hooks``, ``torch.utils.checkpoint`` or
  ``save_on_cpu`` inside the script still wins where it is entered: PyTorch
  uses the innermost pair. What they save is theirs, not managed.

  A ``tp.budget`` block in a managed process raises ``ManagedProcessError``
  (a RuntimeError): budgets do not nest, and silently replacing the
  process's budget would undo what the variable asked for. Either drop the
  block or drop ``manage:activations``.

  At exit (Python's ``atexit``, before the C++ timeline dump) the session
  ends with no budget, so nothing can fail for want of memory at shutdown,
  and one line on stderr says what the runtime did (Note [The exit line] in
  ``_exit_report.py``, with Note [The peak at exit] and Note [The
  out-of-memory hint in a managed process]).

Note [The managed thread]
  Saved-tensor hooks are per thread, and the process budget is entered on the
  thread that imported torch. A script may train on another one (a worker
  thread, a GUI's or a server's). So the process budget follows the first
  thread that runs a forward with grad: if that is not the importing thread,
  the hooks are entered on it too and its forwards become the steps and
  segments (the runtime learns one thread's access sequence). Once a thread
  has trained, a forward with grad on any other thread is left alone, with
  one warning: two threads' steps interleaved would teach the runtime an
  access sequence that neither follows. A ``tp.budget`` block never moves:
  it covers the thread that entered it (Note [What a budget covers]).

Note [DataLoader workers]
  A DataLoader worker runs no autograd and must not hold a runtime of its
  own. A spawned (or forkserver) worker is a new interpreter: its start-up
  hook installs tensorpager and, at ``import torch``, enters a process budget
  like its parent's, which printed an exit line per worker. So torch's worker
  loop is wrapped (``_wrap_worker_loop``): on entry, a worker whose budget
  was entered in this very process ends it quietly (``stand_down``). A forked
  worker inherits its parent's session in copied memory: it is left as it is
  (ending it would wait on runtime threads that fork does not copy), and it
  prints nothing, since forked workers leave without running ``atexit``.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys

from tensorpager import _conf, _exit_report, _ext, _keys, _runtime
from tensorpager._keys import MANAGE_ACTIVATIONS, MANAGE_ALL

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any



class ManagedProcessError(RuntimeError):
    """A ``tp.budget`` block was entered in a process that ``manage:activations`` already manages."""


class process_budget(_runtime.budget):
    """The budget block of a managed process (Note [Managed process])."""

    _follows_training_thread = True  # Note [The managed thread]

    def __enter__(self) -> process_budget:
        super().__enter__()
        if self._tracker is not None:
            self._tracker.forward_raised = mend_oom_hint  # Note [The out-of-memory hint in a managed process]
        return self

    def _nested_error(self) -> RuntimeError:
        return ManagedProcessError(
            "tensorpager.budget: this process is already managed by manage:activations (from the"
            " configuration); a tp.budget block cannot nest in it. Remove the block, or remove"
            " manage:activations from PYTORCH_CUDA_ALLOC_CONF / TENSORPAGER_CONF")


# The process's budget while it is managed, and the pid that entered it
# (Note [DataLoader workers]).
_process: process_budget | None = None
_started_in: int | None = None
# The manage and budget keys' values of the managed process (Note [The
# out-of-memory hint in a managed process]).
_configured: tuple[str, str] | None = None


def managed() -> bool:
    """True while ``manage:activations`` manages this process."""
    return _process is not None


def budget_argument(text: str, ext: Any) -> int | float | None:
    """The ``budget`` key's value (as the C++ side writes it back) as tp.budget's size:
    bytes, a ratio of the measured peak, or None. Read by the C++ parser;
    a share of the device is None: the cap install() set from it, which each
    device gets as it opens (asking its size now would open the device at
    import: Note [A session opens its device at the first tensor])."""
    parsed = ext.parse_budget(text or "none")
    if parsed is None:
        return None
    kind, amount = parsed
    if kind == "device":
        return None
    return float(amount) if kind == "peak" else int(amount)


def start_if_configured(ext: Any) -> None:
    """Enters the process budget when the installed configuration says
    ``manage:activations`` (once per process; does nothing otherwise).

    Requires: torch is imported, tensorpager installed, on the thread whose
    forwards are to be managed.

    Raises:
        ManagedProcessError: a ``tp.budget`` block is active.
    """
    global _process, _started_in, _configured
    if _process is not None:
        return
    values = dict(_keys.DEFAULTS)
    values.update(_conf.parse_to_dict(ext.config()))
    if values["manage"] not in (MANAGE_ACTIVATIONS, MANAGE_ALL):
        return
    if ext.budget_active():
        raise ManagedProcessError("tensorpager: manage:activations while a tp.budget block is active;"
                                  " install before the block, or without manage")
    size = budget_argument(values["budget"], ext)
    block = process_budget(size, policy=values["policy"], lend=values["manage"] == MANAGE_ALL)
    block.__enter__()
    _process = block
    _started_in = os.getpid()
    _configured = (values["manage"], values["budget"])
    atexit.register(_finish, values["timeline"], values["manage"])
    _wrap_worker_loop()
    _mend_uncaught_oom_hints()


def _wrap_worker_loop() -> None:
    """Note [DataLoader workers]: torch's worker loop stands the runtime down first."""
    from torch.utils.data._utils import worker

    loop = worker._worker_loop
    if getattr(loop, "_tensorpager_stands_down", False):
        return

    @functools.wraps(loop)  # the same module and name: spawn pickles the target by name
    def _worker_loop(*args: Any, **kwargs: Any) -> Any:
        stand_down()
        return loop(*args, **kwargs)

    _worker_loop._tensorpager_stands_down = True  # type: ignore[attr-defined]
    worker._worker_loop = _worker_loop


def stand_down() -> None:
    """Ends the process budget with no exit line, if this process entered it
    (Note [DataLoader workers]); does nothing otherwise."""
    global _process
    block = _process
    if block is None or _started_in != os.getpid():
        return
    _process = None
    block._previous = None
    block.__exit__(None, None, None)


def _finish(timeline: str, manage: str = MANAGE_ACTIVATIONS) -> None:
    """Ends the process budget and writes the exit line (atexit)."""
    global _process
    block, _process = _process, None
    if block is None:
        return
    ext = _ext.load()
    budget = ext.budget()
    stats = ext.stats()
    peak = int(stats.get("reserved_bytes.all.peak", 0))
    syncs = int(stats.get("tensorpager.num_device_syncs", 0))
    runtime = {str(k): int(v) for k, v in ext.runtime_stats().items()}
    # Iterations, as the runtime counts them (Note [A step is an iteration] in runtime/runtime_stats.hpp).
    tracker = block._tracker
    steps = runtime.get("tensorpager.runtime.steps", 0)
    measured = tracker.measured_peak if tracker is not None else None  # Note [Peaks under a ratio budget]
    block._previous = None  # at exit: end with no budget, so nothing fails for want of memory
    lost = ""
    try:
        block.__exit__(None, None, None)
    except Exception as e:  # noqa: BLE001  (at exit the line is what matters)
        lost = f"; ending the session failed: {e}"
    line = _exit_report.exit_line(budget, peak, runtime, steps, timeline, manage, ratio=block.ratio,
                                  measured_peak=measured, device_syncs=syncs,
                                  partitioner=tracker.partitioner.chosen if tracker is not None else None,
                                  compiling_again=tracker is not None and tracker.compiling_again)
    sys.stderr.write(line + lost + "\n")
    sys.stderr.flush()


def report_peak_at_exit_if_unmanaged() -> None:
    """Note [The peak at exit] (in _exit_report.py): registers the line of a
    process the variable installed tensorpager in without ``manage`` (once per process)."""
    global _peak_reported
    if _process is not None or _peak_reported:
        return
    _peak_reported = True
    atexit.register(_report_peak)


_peak_reported = False


def _report_peak() -> None:
    if _process is None:  # a managed process writes its own line
        _exit_report.report_peak()


def mend_oom_hint(error: BaseException | None) -> None:
    """Note [The out-of-memory hint in a managed process] (in _exit_report.py), while this process is managed."""
    _exit_report.mend_oom_hint(error, _configured if _process is not None else None)


_hooks_wrapped = False


def _mend_uncaught_oom_hints() -> None:
    global _hooks_wrapped
    if not _hooks_wrapped:
        _hooks_wrapped = True
        _exit_report.mend_uncaught(mend_oom_hint)

"""The saved-tensor hooks and module hooks of a budget block (``tp.budget``
in ``_runtime.py``): what autograd saves goes to the runtime through them,
and the modules they see become recompute segments.

Note [Segments]
Recompute works at module granularity, as ``torch.utils.checkpoint`` does in
its non-reentrant form. The modules called at depth ``segment_depth`` below
the outermost module (1: the children of the model; a ``Sequential``'s layers,
a ResNet's stages) are segments. While a segment's forward runs, every
tensor autograd saves is numbered in order; once the forward has finished, a
saved storage that the segment created (not one of its inputs) becomes
droppable, and recomputing it reruns the segment from its inputs with the
RNG state (CPU and CUDA), autocast state and buffers of the original forward,
taking the saved tensor with the same number. A segment's outputs can be
recomputed the same way, so when a later segment keeps them as inputs they are
droppable too (recompute then chains backwards, as in DTR). A segment keeps
its inputs (managed, so they may be swapped or dropped in turn). A segment
whose forward changed one of its inputs in place cannot be rerun and saves
nothing droppable; neither can one with an input in memory tensorpager does
not manage (a tensor over a NumPy array, say): that memory can change with no
version to show it, and a rerun would then compute from other values than
the first run, which autograd's own saved tensors still hold. Which storages are dropped, and when, is the policy's
choice (``policy`` key), not the user's.

Note [A forward that a BaseException ended]
PyTorch runs ``always_call`` forward hooks when a forward raises an
Exception, not a BaseException: a KeyboardInterrupt (Ctrl-C, SIGINT) or a
SystemExit leaves the forwards it ended on the tracker's module stack, and
with them no outermost forward again, so no step boundary ever came and every
saved tensor after it stayed tracked. The tracker keeps the outermost
forward's frame while it runs; a module forward that finds it no longer among
its callers forgets the stack and the half-recorded segment, and starts at the
outermost level. Measured: docs/decisions.md, Note [A forward that a
BaseException ended].

What the hooks do under torch.compile is Note [torch.compile] in
``_compiled.py``. Steps (Note [Where an iteration ends]) are told apart in
``_steps.py``.
"""

from __future__ import annotations

import sys
import threading
import time
import types
from functools import partial

from tensorpager import _compiled, _lend, _module_hooks, _partitioner, _producers, _rerun, _steps

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable


class Tracker:
    """The saved-tensor hooks and module hooks of one budget block."""

    def __init__(self, ext: Any, segment_depth: int, recompute: bool, follow_training_thread: bool = False,
                 lend: bool = True) -> None:
        self.ext = ext
        # Note [Lending parameters and gradients] in _lend.py.
        self.lender: _lend.Lender | None = _lend.Lender(ext, lambda: self.thread) if lend else None
        self.segment_depth = segment_depth
        self.recompute = recompute
        # The budget covers the thread that entered it (and autograd's threads
        # working for it, which run no module forwards): forwards of other
        # threads are not its segments or steps (Note [What a budget covers]).
        self.thread = threading.get_ident()
        # A managed process follows the first thread that trains instead
        # (Note [The managed thread] in _managed.py).
        self.follow_training_thread = follow_training_thread
        self.trained = False  # self.thread has run a forward with grad
        self.warned_thread = False
        self.thread_hooks: Any = None  # a threading.local: the hooks entered on a followed thread
        self.stack: list[Any] = []
        self.outer_frame: Any = None  # the outermost forward's frame while it runs
        self.segment: _rerun.Segment | None = None  # the segment whose forward is running
        self.producers = _producers.Producers(self)
        self.unpacked = False
        self.suspended = 0  # > 0 while a rerun runs: hooks stand aside
        # The index of the iteration in progress, which the block's end records (Note [One step per iteration]).
        self.boundaries = 0
        # Note [Peaks under a ratio budget] in _runtime.py: True while a ratio
        # has not taken effect; the peak reserved it was measured on.
        self.measuring = False
        self.measured_peak: int | None = None
        self.ratio: float | None = None  # the block's ratio, while measuring
        self.refused = False  # the ratio, refused with the lowest partitioner budget
        # Called with the exception when the outermost module's forward raised
        # (the managed process mends its out-of-memory hint: Note [The
        # out-of-memory hint in a managed process] in _exit_report.py).
        self.forward_raised: Callable[[BaseException | None], None] | None = None
        # Note [Where an iteration ends] in _steps.py.
        self.iterations = _steps.Steps(lambda: self.thread, self._first_optimizer_step)
        self.warned_compiled = False  # a compiled module has run: Note [torch.compile] in _compiled.py
        self.partitioner = _partitioner.Partitioner()  # Note [A partitioner budget for compiled regions]
        self.compiled_whole = False  # the outermost module is compiled: one region
        self.scanned: set[int] = set()  # ids of outermost modules looked through for compiled ones
        self.rng_state = ext.RngSnapshots().cpu  # Note [One RNG state while the generator stands still]
        import torch

        # Bound once: the hooks run for every module and saved tensor (bench/hook_cost_bench.py).
        self.compiling = torch.compiler.is_compiling  # Note [torch.compile]
        self.grad_enabled = torch.is_grad_enabled
        _module_hooks.stay_eager(Tracker.pack, Tracker.unpack)  # Note [torch.compile]

    # --- saved-tensor hooks ------------------------------------------------------------
    def pack(self, t: Any) -> Any:
        # Every saved tensor comes back through a SavedTensor, managed or not,
        # so that unpack checks its version as autograd does without hooks
        # (Note [In-place changes to saved tensors] in hooks/saved_version.hpp).
        if self.compiling():
            return t  # traced by torch.compile: the compiled graph saves t itself (Note [torch.compile])
        seg = self.segment
        index = -1
        if seg is not None:
            index = seg.packs
            seg.packs += 1
        if (t.is_leaf and t.requires_grad) or (t._base is not None and t._base.is_leaf and t._base.requires_grad):
            h = self.ext.pack(t, False)  # a parameter, or a view of one: kept, and lent in backward
            return h if self.lender is None else self.lender.saved(h, t)
        h = self.ext.pack(t)
        if not h.managed:
            return h
        if seg is None:
            if h.fresh:
                self.producers.link(h)
            return h
        for a in seg.inputs:
            if a is t:  # an input: held for the rerun as saved here (Tracker.post_forward)
                seg.packed_inputs[id(t)] = (t, h)
                if h.fresh:
                    self.ext.segment_input_saved()  # counted in rerun_bytes apart (runtime/resident_floor.hpp)
                break
        if h.fresh:
            if h.key in seg.input_keys:
                self.producers.link(h)  # an input: recomputable by the segment that made it, if any
            else:
                seg.pending.append((h, index, time.perf_counter_ns() - seg.t0, h.version))
        return h

    def unpack(self, x: Any) -> Any:
        if self.compiling() or not hasattr(x, "unpack"):
            return x  # a tensor a compiled graph saved itself (Note [torch.compile])
        self.unpacked = True
        if self.lender is not None:
            if type(x) is _lend.SavedParameter:
                return self.lender.unpack_parameter(x)
            self.lender.boundary()
        return x.unpack()

    # --- module hooks ------------------------------------------------------------------
    # Called through _module_hooks, which calls nothing while torch.compile traces (Note [torch.compile]).
    def pre_forward(self, module: Any, args: tuple) -> None:
        if self.suspended:
            return
        if threading.get_ident() != self.thread and not self._follow_this_thread():
            return
        depth = len(self.stack)
        if depth and not self._outer_forward_running():
            self._forget_interrupted_forward()  # Note [A forward that a BaseException ended]
            depth = 0
        if depth == 0:
            self.outer_frame = _module_hooks.call_impl_frame()  # the outermost module's
        if depth == 0 and not self.warned_compiled and id(module) not in self.scanned:
            # A module compiled in place runs its hooks only while traced: look
            # for it from the outermost module, once (Note [torch.compile]).
            self.scanned.add(id(module))
            if any(_compiled.compiled(m) for m in module.modules()):
                self.warned_compiled = True
                self.compiled_whole = _compiled.compiled(module)  # one region: Note [A partitioner budget ...]
                import warnings

                warnings.warn(_compiled.WARNING, RuntimeWarning, stacklevel=4)  # _module_hooks, _call_impl
        self.stack.append(module)
        # Without grad (no_grad, inference_mode: evaluation) autograd saves
        # nothing, so a forward there neither starts a step nor is a segment.
        if not self.grad_enabled():
            return
        self.trained = True
        if depth == 0 and self.lender is not None and (self.lender.lent or self.lender.in_backward):
            self.lender.give_back_all()  # a backward that raised: its callback never ran
        if depth == 0 and self.iterations.ends_iteration(module, self.unpacked):
            self.step()
        if self.recompute and depth == self.segment_depth:
            self.segment = _rerun.Segment(module, args, self.ext.storage_key, self.rng_state)
            self.ext.segment_started()  # Note [A rerun's working set] in runtime/resident_floor.hpp

    def _outer_forward_running(self) -> bool:
        """Whether the outermost forward on the stack is still running (its frame is a caller's)."""
        f = sys._getframe(1)
        while f is not None:
            if f is self.outer_frame:
                return True
            f = f.f_back
        return False

    def _forget_interrupted_forward(self) -> None:
        self.stack.clear()
        self.segment = None  # half recorded: nothing it saved is recomputable
        self.outer_frame = None

    def _follow_this_thread(self) -> bool:
        """Whether the calling thread becomes the managed one: Note [The managed thread]."""
        import torch

        if not self.follow_training_thread or not torch.is_grad_enabled():
            return False
        if self.trained or self.stack:
            if not self.warned_thread:
                self.warned_thread = True
                import warnings

                warnings.warn(OTHER_THREAD_WARNING, RuntimeWarning, stacklevel=4)
            return False
        self.thread = threading.get_ident()
        hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
        hooks.__enter__()  # kept while the thread lives, as the importing thread's are
        self.thread_hooks = threading.local()
        self.thread_hooks.guard = _ExitWithThread(hooks)
        return True

    def post_forward(self, module: Any, args: tuple, *rest: Any) -> None:
        # (kwargs, output) normally; torch passes fewer when the forward
        # raised (always_call), and then the segment is dropped below.
        if self.suspended or not self.stack or threading.get_ident() != self.thread:
            return
        kwargs, output = rest if len(rest) == 2 else (None, None)
        self.stack.pop()
        if not self.stack:
            self.outer_frame = None  # held only while the outermost forward runs
        if len(rest) != 2 and not self.stack and self.forward_raised is not None:
            self.forward_raised(sys.exc_info()[1])  # torch runs always_call hooks in its except block
        seg = self.segment
        if seg is None or seg.module is not module or len(self.stack) != self.segment_depth:
            return
        self.segment = None
        if kwargs is None:
            return  # the forward raised: nothing it saved will be used
        seg.cost_ns = max(1, time.perf_counter_ns() - seg.t0)
        # What a rerun holds at its peak: the inputs it brings back and the forward's growth.
        inputs = seg.inputs
        seg.rerun_bytes = self.ext.segment_growth() + (
            inputs[0].nbytes if len(inputs) == 1 else sum(a.nbytes for a in inputs))
        # What only the forward needed goes, and nothing new stands in for it: a segment lives until its
        # backward, and every container it keeps is one more object for Python's cyclic GC to promote and
        # walk (a full collection of about 72 ms every 100 steps of bench/hook_cost_bench.py).
        versions, seg.input_versions = seg.input_versions, ()
        pending, seg.pending = seg.pending, ()
        packed, seg.packed_inputs = seg.packed_inputs, _NOTHING_PACKED
        input_keys, seg.input_keys = seg.input_keys, ()
        seg.inputs = ()
        for t, v in versions:
            if t._version != v:
                return  # changed an input in place: cannot be rerun (Note [Segments])
        (seg.args, seg.kwargs), foreign = _producers.hold_inputs(self.ext, self.producers, (args, kwargs),
                                                                 packed)  # one pass: aliases stay aliases
        if foreign:
            seg.args = seg.kwargs = None
            return  # reads memory tensorpager cannot vouch for (Note [Segments])
        # One for the segment, run as rerun(index, whole); of the function, not a bound method (one object less).
        rerun = partial(_rerun.Segment.rerun, seg, self, "saved")
        for h, index, ns, packed_at in pending:
            # A rerun leaves the saved tensor as this forward left it: at its
            # version now (Note [Recompute reproduces one version]). It stops
            # at the tensor, and costs the forward up to it, unless the rest
            # of the forward changed it in place (Note [A rerun stops at its tensor]).
            version = h.version
            whole = version != packed_at
            h.set_recompute(rerun, seg.cost_ns if whole else max(1, ns), version, index, whole, seg.rerun_bytes)
        import torch

        if isinstance(output, torch.Tensor):
            outputs: Any = (output,)  # most forwards, without flatten
        else:
            outputs = [o for o in _rerun.flatten(output) if isinstance(o, torch.Tensor)]
        for j, o in enumerate(outputs):
            key = self.ext.storage_key(o)
            if key is not None and key not in input_keys:
                self.producers.add(key, o, seg, j)

    # --- steps: Note [Where an iteration ends] in _steps.py ----------------------
    def _first_optimizer_step(self) -> None:
        if not self.measuring and self.ext.budget_remeasure():
            self.measuring = True  # the ratio was resolved before the optimizer state existed

    def step(self, by_hand: bool = False) -> None:
        """A step boundary; by_hand (tp.step()) resolves a pending ratio at once."""
        if self.stack and not self._outer_forward_running():
            self._forget_interrupted_forward()  # Note [A forward that a BaseException ended]
        self.unpacked = False
        self.producers.clear()
        self.boundaries += 1
        self.iterations.boundary()
        if not self.measuring:
            self.ext.budget_step()
            return
        if self.refused or (not by_hand and not self.iterations.steady):
            self.ext.budget_step(False)  # the iteration that ended was not a steady one, or the ratio refused
            return
        # Note [Peaks under a ratio budget] in _runtime.py: the peak the
        # boundary resolves the ratio on, then the peaks under the budget.
        before = self.ext.budget()
        peak = int(self.ext.stats().get("reserved_bytes.all.peak", 0))
        if self.partitioner.chosen is None:
            self.measured_peak = peak
        elif self.compiled_whole and not self._partitioner_fits(peak):
            return
        import torch

        try:
            self.ext.budget_step(True, self.measured_peak)
        except torch.OutOfMemoryError:  # the floor refused the ratio (Note [Budget floor])
            if not (self.warned_compiled and self._lower_partitioner()):
                self.refused = self.partitioner.chosen is not None
                raise
            return
        if self.ext.budget() != before:
            self.measuring = False
            self.ext.reset_peak_stats()

    # --- Note [A partitioner budget for compiled regions] in _partitioner.py ---------------
    def _lower_partitioner(self) -> bool:
        """Compiles the regions again with the next partitioner budget and measures another iteration on the
        same peak; False where no budget is left."""
        if not self.partitioner.lower():
            return False
        if not self.ext.budget_remeasure():  # after a refusal: the ratio pending again, the peaks reset
            self.ext.empty_cache()  # the ratio still pending: the next iteration's peak its own,
            self.ext.reset_peak_stats()  # without what this one left cached
        self.ext.budget_step(False)  # the iteration that ended is a step of its own
        return True

    def _partitioner_fits(self, peak: int) -> bool:
        """Whether the iteration compiled with the partitioner budget in force peaked within the ratio's
        bytes (its regions hold what they save at once); if not, the next budget is set, or the ratio refused."""
        assert self.ratio is not None and self.measured_peak is not None and self.partitioner.chosen is not None
        self.partitioner.peaks[self.partitioner.chosen] = peak
        if peak <= self.ratio * self.measured_peak:
            return True
        if self._lower_partitioner():
            return False
        import torch

        self.refused = True
        self.ext.budget_step(False)
        raise torch.OutOfMemoryError(self.partitioner.refusal(self.ratio, self.measured_peak))

    @property
    def compiling_again(self) -> bool:
        """Whether the ratio waits on an iteration compiled with a partitioner budget."""
        return self.measuring and self.partitioner.chosen is not None and not self.refused

    def close(self) -> None:
        """Removes the optimizer step hooks and gives back the partitioner budget (again: nothing)."""
        self.iterations.close()
        self.partitioner.close()


# A finished segment's packed_inputs: read-only, since it is shared (Tracker.pack writes the running segment's).
_NOTHING_PACKED: Any = types.MappingProxyType({})


class _ExitWithThread:
    """Exits saved-tensor hooks on the thread that entered them, when it ends.

    Held in a ``threading.local``: CPython drops a thread's locals on that
    thread as it ends, with the GIL held. Hooks left entered on an ended
    thread abort the process at exit (torch 2.11: "terminate called without
    an active exception", its thread-local hook stack freed without the GIL).
    """

    def __init__(self, hooks: Any) -> None:
        self.hooks = hooks
        self.thread = threading.get_ident()

    def __del__(self) -> None:
        if threading.get_ident() == self.thread:  # never pop another thread's hooks
            self.hooks.__exit__(None, None, None)


OTHER_THREAD_WARNING = (
    "tensorpager: manage:activations manages the thread that trained first; this forward with grad runs on"
    " another thread, and what it saves for backward stays on the device, outside the budget"
    " (Note [The managed thread] in tensorpager/_managed.py)."
)

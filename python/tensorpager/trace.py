"""Recording operator traces for the simulator (docs/trace_format.md).

``tp.record_trace(path)`` is a context manager; the configuration key
``record_trace:path`` records from ``import torch`` to interpreter exit. The
file it writes is read by ``tp-sim`` (``python -m tensorpager.sim``).

Note [How the recorder sees a step]
A ``TorchDispatchMode`` sees every ATen operator below autograd, forward and
backward (the autograd engine runs backward with the mode's thread-local
state), after composite operators have been decomposed. For each call it
notes the storages of the input tensors (a view is its base's storage), runs
the operator timing it with ``time.perf_counter_ns``, and classifies each
output storage: one it has not seen is new (an output, with its ``nbytes``);
one it has seen is a view or an in-place write (``mutates`` when the schema
marks that argument written). A storage first seen as an input was allocated
before recording: it is written as pre-existing. The end of a storage is
observed with ``weakref.finalize`` on its ``UntypedStorage``: PyTorch keeps a
storage's Python object alive exactly as long as the C++ storage (PyObject
preservation), so the finalizer fires when the memory is freed, even when
autograd alone still held it. ``saved_tensors_hooks`` mark the storages
autograd saves for backward. The phase is ``backward`` while the autograd
engine runs a node (``torch._C._current_autograd_node()``), and the module
label is the innermost running module (global forward hooks).

What it cannot see: memory a kernel allocates and frees inside one operator
(workspaces), and allocations made outside the dispatcher. Times are host
wall times of the call, including the mode's own overhead (a few
microseconds); ``compute_scale`` multiplies them as they are written, e.g.
to turn CPU times into an estimate for a faster device.

Only one recording at a time per process. Import cost: torch.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
import weakref

from tensorpager import _module_hooks

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["record_trace", "TraceRecorder"]

FORMAT = "tensorpager-trace"
VERSION = 1

_active_lock = threading.Lock()
_active: TraceRecorder | None = None


def _tensors(value: Any) -> list[Any]:
    """The tensors in value (lists, tuples, dicts and what else pytree flattens), in order."""
    import torch
    from torch.utils._pytree import tree_leaves

    return [v for v in tree_leaves(value) if isinstance(v, torch.Tensor)]


class TraceRecorder:
    """Records operators between start() and stop(), then writes the trace.

    Not thread-safe: record one thread's training step. Use through
    ``record_trace`` (a context manager) or the ``record_trace`` key.
    """

    def __init__(self, path: str | os.PathLike[str], compute_scale: float = 1.0, model: Any = None) -> None:
        if not isinstance(compute_scale, (int, float)) or not compute_scale > 0:
            raise ValueError(f"record_trace: compute_scale {compute_scale!r} must be a number > 0")
        self.path = os.fspath(path)
        if not self.path:
            raise ValueError("record_trace: the path is empty; give a file to write the trace to")
        from tensorpager import _ext

        _ext.load().check_output_path("record_trace: ", self.path, False)  # fails now, not after the run
        self.compute_scale = float(compute_scale)
        self._names = {id(m): n for n, m in model.named_modules()} if model is not None else {}
        self._ids: dict[int, int] = {}  # live storage (its _cdata) -> trace id
        self._bytes: dict[int, int] = {}  # trace id -> bytes
        self._finalizers: dict[int, weakref.finalize] = {}
        self._pre: list[dict[str, Any]] = []  # pre-existing storages, first seen order
        self._events: list[dict[str, Any]] = []
        self._by_output: dict[int, dict[str, Any]] = {}  # trace id -> its output record
        self._next_id = 1
        self._modules: list[Any] = []
        self._recording = False
        self._mode: Any = None
        self._saved: Any = None
        self._hooks: list[Any] = []

    # --- storages -------------------------------------------------------------
    def _storage_id(self, tensor: Any, *, create_pre_existing: bool) -> int | None:
        storage = tensor.untyped_storage()
        nbytes = int(storage.nbytes())
        if nbytes == 0:
            return None
        key = storage._cdata
        sid = self._ids.get(key)
        if sid is None and create_pre_existing:
            sid = self._new_storage(storage, nbytes)
            self._pre.append({"type": "storage", "id": sid, "bytes": nbytes})
        return sid

    def _new_storage(self, storage: Any, nbytes: int) -> int:
        sid = self._next_id
        self._next_id += 1
        key = storage._cdata
        self._ids[key] = sid
        self._bytes[sid] = nbytes
        fin = weakref.finalize(storage, self._freed, key, sid)
        fin.atexit = False
        self._finalizers[sid] = fin
        return sid

    def _freed(self, key: int, sid: int) -> None:
        self._finalizers.pop(sid, None)
        if self._ids.get(key) == sid:
            del self._ids[key]
        if self._recording:
            self._events.append({"type": "free", "id": sid})

    # --- the mode's callback ------------------------------------------------------
    def _op(self, func: Any, args: Any, kwargs: Any) -> Any:
        import torch

        inputs = _tensors((args, kwargs))
        in_ids: list[int] = []
        for t in inputs:
            sid = self._storage_id(t, create_pre_existing=True)
            if sid is not None and sid not in in_ids:
                in_ids.append(sid)
        written = self._written_ids(func, args, kwargs)
        t0 = time.perf_counter_ns()
        out = func(*args, **kwargs)
        elapsed = time.perf_counter_ns() - t0
        outputs: list[dict[str, Any]] = []
        for t in _tensors(out):
            storage = t.untyped_storage()
            nbytes = int(storage.nbytes())
            if nbytes == 0 or storage._cdata in self._ids:
                continue  # nothing, a view, or an in-place result
            sid = self._new_storage(storage, nbytes)
            record = {"id": sid, "bytes": nbytes, "saved": False}
            self._by_output[sid] = record
            outputs.append(record)
        backward = torch._C._current_autograd_node() is not None
        event: dict[str, Any] = {
            "type": "op",
            "name": str(func.overloadpacket.__name__) if hasattr(func, "overloadpacket") else str(func),
            "inputs": [i for i in in_ids if i not in written],
            "outputs": outputs,
            "time_ns": int(round(elapsed * self.compute_scale)),
            "phase": "backward" if backward else "forward",
        }
        if written:
            event["mutates"] = written
        if self._modules:
            m = self._modules[-1]
            event["module"] = self._names.get(id(m), type(m).__name__)
        self._events.append(event)
        return out

    def _written_ids(self, func: Any, args: Any, kwargs: Any) -> list[int]:
        schema = getattr(func, "_schema", None)
        if schema is None:
            return []
        written: list[int] = []
        for i, arg in enumerate(schema.arguments):
            if arg.alias_info is None or not arg.alias_info.is_write:
                continue
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            for t in _tensors(value):
                sid = self._storage_id(t, create_pre_existing=True)
                if sid is not None and sid not in written:
                    written.append(sid)
        return written

    def _pack(self, tensor: Any) -> Any:
        sid = self._storage_id(tensor, create_pre_existing=False)
        if sid is not None and sid in self._by_output:
            self._by_output[sid]["saved"] = True
        return tensor

    # --- control --------------------------------------------------------------------
    def start(self) -> TraceRecorder:
        global _active
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        with _active_lock:
            if _active is not None:
                raise RuntimeError("record_trace: a trace is already being recorded in this process")
            _active = self
        recorder = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
                return recorder._op(func, args, kwargs or {})

        self._modules = []

        def enter(module: Any, args: Any) -> None:  # must return None (it would replace args)
            self._modules.append(module)

        def leave(module: Any, args: Any, *rest: Any) -> None:  # must return None (it would replace output)
            if self._modules:
                self._modules.pop()

        self._hooks = [_module_hooks.subscribe(enter, leave)]
        self._saved = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._saved.__enter__()
        self._mode = _Mode()
        self._mode.__enter__()
        self._recording = True
        return self

    def step(self) -> None:
        """Marks a step boundary (the simulator replays steps in order)."""
        if self._recording:
            self._events.append({"type": "step"})

    def stop(self) -> None:
        """Stops recording and writes the file (idempotent)."""
        global _active
        if not self._recording:
            return
        self._recording = False
        try:
            self._mode.__exit__(None, None, None)
            self._saved.__exit__(None, None, None)
        finally:
            for h in self._hooks:
                h.remove()
            self._hooks = []
            for fin in list(self._finalizers.values()):
                fin.detach()
            self._finalizers.clear()
            with _active_lock:
                _active = None
        self.write()

    def write(self) -> None:
        """Writes the recorded trace to self.path (JSON lines)."""
        header = {"format": FORMAT, "version": VERSION, "source": "tensorpager.record_trace",
                  "compute_scale": self.compute_scale}
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            for record in (header, *self._pre, *self._events):
                f.write(json.dumps(record, separators=(",", ":")) + "\n")
        os.replace(tmp, self.path)

    def __enter__(self) -> TraceRecorder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def record_trace(path: str | os.PathLike[str], *, compute_scale: float = 1.0, model: Any = None) -> TraceRecorder:
    """A context manager that records the operators run inside it to ``path``.

    Example::

        with tp.record_trace("step.trace", model=model):
            loss = model(x).sum()
            loss.backward()

    Args:
        path: the trace file (docs/trace_format.md), written when the block
            exits.
        compute_scale: multiplies the measured operator times.
        model: optional; its ``named_modules()`` name the module labels.

    Raises:
        ValueError: an empty path or a compute_scale <= 0.
        RuntimeError: a trace is already being recorded.
    """
    return TraceRecorder(path, compute_scale=compute_scale, model=model)


def start_from_config(path: str) -> None:
    """The ``record_trace:path`` key: records from now until interpreter exit."""
    recorder = TraceRecorder(path).start()
    atexit.register(_stop_at_exit, recorder)


def _stop_at_exit(recorder: TraceRecorder) -> None:
    """Writes the record_trace key's trace at exit: a failure is one line on stderr, not a traceback."""
    try:
        recorder.stop()
    except Exception as e:  # noqa: BLE001 (exit: report, never raise)
        import sys

        sys.stderr.write(f"tensorpager: could not write the trace to {recorder.path}: {e}\n")

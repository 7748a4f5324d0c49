"""One pair of PyTorch's global module hooks for all of tensorpager.

Note [One pair of global module hooks]
The budget's tracker, timelines, operator traces and compression each follow
module forwards. Rather than each registering a pair of PyTorch's global
module hooks, they subscribe here, and one forward pre hook and one forward
hook (``always_call``, ``with_kwargs``) stay registered while anything is
subscribed. Each hook calls the subscribers in the order they subscribed,
as PyTorch calls hooks in the order they were registered.

- A post callback receives what PyTorch passes: ``(module, args, kwargs,
  output)`` after a forward that returned, ``(module, args, output)`` (output
  None) after one that raised an ``Exception``, from PyTorch's except block.
  So every subscriber can unwind its own stack after an exception; a
  ``BaseException`` (``KeyboardInterrupt``) calls nothing (Note [A forward
  that a BaseException ended] in _tracker.py).
- Callbacks return nothing: a value would replace the forward's arguments or
  output. The subscribers are a tuple swapped under a lock, so a forward on
  another thread sees the old list or the new one, whole.
- Under torch.compile both hooks run eagerly or not at all: traced inside a
  compiled region they return at once, and dynamo never compiles their
  frames (Note [torch.compile] in _compiled.py).

Allocator layer: imports torch when the first subscriber subscribes.
"""

from __future__ import annotations

import sys
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

    Pre = Callable[[Any, tuple], None]
    Post = Callable[..., None]

_lock = threading.Lock()
_subscribers: tuple[tuple[Pre, Post], ...] = ()
_handles: list[Any] = []  # PyTorch's handles of the pair, while anything is subscribed


def _pre(module: Any, args: tuple) -> None:
    if _compiling():
        return  # traced inside a compiled region: nothing in its graph (Note [torch.compile])
    for pre, _ in _subscribers:
        pre(module, args)


def _post(module: Any, args: tuple, *rest: Any) -> None:
    if _compiling():
        return
    for _, post in _subscribers:
        post(module, args, *rest)


def _not_compiling() -> bool:
    return False


_compiling: Callable[[], bool] = _not_compiling  # torch.compiler.is_compiling once a subscriber imported torch


class Subscription:
    """What subscribe() returns; remove() ends the subscription (idempotent)."""

    def __init__(self, pair: tuple[Pre, Post]) -> None:
        self._pair: tuple[Pre, Post] | None = pair

    def remove(self) -> None:
        global _subscribers
        with _lock:
            if self._pair is None:
                return
            _subscribers = tuple(s for s in _subscribers if s is not self._pair)
            self._pair = None
            if not _subscribers:
                for h in _handles:
                    h.remove()
                _handles.clear()


def subscribe(pre: Pre, post: Post) -> Subscription:
    """pre(module, args) before every module's forward, post(module, args,
    *rest) after it (Note [One pair of global module hooks])."""
    global _subscribers
    from torch.nn.modules import module as nn_module

    pair = (pre, post)
    with _lock:
        if not _handles:
            _stay_out_of_dynamo()
            _handles.append(nn_module.register_module_forward_pre_hook(_pre))
            _handles.append(nn_module.register_module_forward_hook(_post, with_kwargs=True, always_call=True))
        _subscribers = (*_subscribers, pair)
    return Subscription(pair)


def _stay_out_of_dynamo() -> None:
    global _compiling
    import torch

    _compiling = torch.compiler.is_compiling
    stay_eager(_pre, _post)


def call_impl_frame() -> Any:
    """The frame of the innermost ``nn.Module._call_impl`` running: the
    module call whose forward pre hooks run now (called from a subscriber's pre hook)."""
    from torch import nn

    code = nn.Module._call_impl.__code__
    f = sys._getframe(2)
    while f is not None and f.f_code is not code:
        f = f.f_back
    return f


def stay_eager(*functions: Any) -> None:
    """Dynamo never compiles a frame of these functions, nor of what they
    call, where one starts outside a traced region; traced inline, they are
    traced as any function (Note [torch.compile]). Idempotent; the flag lives
    on the code object, for every caller."""
    try:
        from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy
    except ImportError:  # a torch without it (tensorpager pins 2.11): the hooks still run in eager code
        return
    skip = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
    for f in functions:
        set_code_exec_strategy(getattr(f, "__func__", f).__code__, skip)

"""The lender of the budget block that is open, and what reaches it without the runtime.

A process has at most one budget block at a time, so at most one lender
(``_lend.Lender``). Two things reach it without asking the runtime for its
block: the split stem's backward (``techniques/split_chain.py``, which lends
its incoming gradient through ``Lender.lend_held``) and the wrapped engine
entry below.

Note [A backward that raises gives everything back]
The engine's callbacks run only when a backward completes. One that raises
(a hook's error; a KeyboardInterrupt, which lands where most of a step's
time goes) left the parameters, gradients and optimizer state it had lent
on the host behind stand-in storages until the next forward, so the
program's own handler could not save them (state_dict() raised "lent to
the budget runtime"). So the engine's entry, torch.autograd's
_engine_run_backward (every backward() and grad() goes through it), is
wrapped while a lender exists: on any exception the active lender gives
everything back before the exception reaches the program. A give-back that
fails too (out of memory) is added to the exception as a note; the loan
stays for give_back_all().
"""

from __future__ import annotations

import functools
import weakref

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_open: weakref.WeakSet[Any] = weakref.WeakSet()  # the open lender, if any (weakly: a block may be dropped)


def opened(lender: Any) -> None:
    """lender's block is open: it is the one to give back when a backward raises."""
    _wrap_the_engine()
    _open.add(lender)


def closed(lender: Any) -> None:
    _open.discard(lender)


def current() -> Any:
    """The open lender (a ``_lend.Lender``), or None."""
    return next(iter(_open), None)


def _wrap_the_engine() -> None:
    """Wraps torch.autograd's engine entry once (Note [A backward that raises gives everything back])."""
    import torch.autograd as autograd

    run = autograd._engine_run_backward
    if getattr(run, "_tensorpager_gives_back", False):
        return

    @functools.wraps(run)
    def _engine_run_backward(*args: Any, **kwargs: Any) -> Any:
        try:
            return run(*args, **kwargs)
        except BaseException as error:
            _give_back_after(error)
            raise

    _engine_run_backward._tensorpager_gives_back = True  # type: ignore[attr-defined]
    autograd._engine_run_backward = _engine_run_backward


def _give_back_after(error: BaseException) -> None:
    lender = current()
    if lender is None or not (lender.lent or lender.in_backward):
        return
    try:
        lender.give_back_all()
    except Exception as e:  # noqa: BLE001 - the program's exception is the one to raise
        error.add_note(f"tensorpager: giving back the state lent during this backward failed too: {e}")

"""CUDA graph capture, which tensorpager refuses (docs/not_supported.md).

Note [A refused capture leaves the stream as it was]
  ``torch.cuda.graph.__enter__`` makes its capture stream current, then calls
  ``capture_begin``, whose ``beginAllocateToPool`` tensorpager refuses
  (``NotImplementedError``, naming the way out). The exception leaves the
  ``with`` statement before its ``__exit__`` runs, so the thread stayed on the
  capture stream, and every later kernel of a program that caught the error
  and went on ran there, unordered with the default stream's work. With the
  CUDA adapter installed, ``__enter__`` is wrapped: when it raises after
  entering the stream context, the context is left, then the error goes on.
"""

from __future__ import annotations

import functools

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def leave_refused_captures_where_they_began() -> None:
    """Wraps ``torch.cuda.graph.__enter__`` once (Note [A refused capture leaves the stream as it was])."""
    from torch.cuda import graphs

    enter = graphs.graph.__enter__
    if getattr(enter, "_tensorpager_leaves_stream", False):
        return

    @functools.wraps(enter)
    def __enter__(self: Any) -> None:  # noqa: N807  (it replaces a dunder)
        try:
            enter(self)
        except NotImplementedError:
            self.stream_ctx.__exit__(None, None, None)
            raise

    __enter__._tensorpager_leaves_stream = True  # type: ignore[attr-defined]
    graphs.graph.__enter__ = __enter__  # type: ignore[method-assign]

"""Budgets and sizes given as Python values, checked alike at every Python front door.

``tp.set_budget``, ``tp.budget`` and ``tp.install(budget=...)`` take an int
(bytes), a float (a ratio of the first step's peak), a str or None. A str
follows Note [Budget spellings] (``config/memory_budget.hpp``) through the
C++ parser (``_C.parse_budget``: the package has no parser of its own); an
int is checked as the size ``"<int>B"``, so ``2**70`` gets the parser's "the
size is too large" instead of a binding's type error. A float is the bare ratio
``"0.5"``: a share of the peak at every front door. Whether a front door can
use a share of the peak (``set_budget`` cannot: it caps the allocator now)
and whether a budget fits the device are the front door's and the C++
side's checks (``resolve_for_device``).

Sizes (``parse_size``, ``positive_size``) go through ``_C.parse_size``, the
configuration parser's Note [Size grammar].
"""

from __future__ import annotations

import math

from tensorpager import _ext


def accepted() -> str:
    """The accepted budget forms, for messages."""
    return ("None or 'none' (no budget); an int number of bytes > 0; a float ratio of the first step's peak in"
            " (0, 1]; or a string: " + _ext.load().ACCEPTED_BUDGET_FORMS)


def parse_size(text: str) -> int:
    """A size as written (``"12GiB"``, ``"512 MB"``, ``"4096"``; Note [Size grammar]) in bytes.

    Raises:
        ValueError: text is not a size; the message quotes it, says what is
            wrong and lists the accepted forms.
        TypeError: text is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(f"a size must be a str, not {type(text).__name__} ({text!r})")
    return int(_ext.load().parse_size(text))


def positive_size(value: int | str, what: str) -> int:
    """value as bytes: a size string (Note [Size grammar]) or an int, > 0.

    Raises ValueError naming ``what`` (the argument, as the caller spells it),
    the value and the accepted forms."""
    detail = ""
    try:
        size = parse_size(value) if isinstance(value, str) else value
    except ValueError as e:
        size, detail = None, f" ({e})"
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise ValueError(f"{what} must be a positive size such as '8MiB' or 8388608, got {value!r}{detail}")
    return size


def check(value: object, door: str) -> tuple[str, int | float] | None:
    """The budget in value, as ``_C.parse_budget`` gives it: None,
    ``("bytes", n)``, ``("peak", r)`` or ``("device", r)``.

    Args:
        value: as the user gave it.
        door: names the front door in messages (``"tensorpager.set_budget"``).

    Raises:
        ValueError: value is no budget: 0 or negative, NaN or infinite, a
            ratio outside (0, 1], a size too large for 64 bits, a malformed
            string. The message names door, value and the accepted forms.
        TypeError: value has another type (a bool included).
    """
    shown = repr(value)
    where = f"{door}({shown if len(shown) <= 80 else shown[:80] + '...'})"
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"{where}: a {type(value).__name__} is not a budget. Accepted: {accepted()}")
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ValueError(f"{where}: a budget must be a finite number. Accepted: {accepted()}")
        if not 0.0 < value <= 1.0:
            raise ValueError(f"{where}: a ratio must be in (0, 1]. Accepted: {accepted()}")
        return ("peak", value)
    if isinstance(value, int) and value <= 0:
        raise ValueError(f"{where}: a budget must be > 0 bytes. Accepted: {accepted()}")
    try:
        return _ext.load().parse_budget(f"{value}B" if isinstance(value, int) else value)
    except ValueError as e:
        raise ValueError(f"{where}: {e}. Accepted: {accepted()}") from None


def ratio_bytes(ratio: float, total: int, door: str, of: str) -> int:
    """ratio of total bytes, rounded down; refuses a ratio that rounds to 0 bytes.

    Raises:
        ValueError: naming the ratio, the total and the smallest usable ratio.
    """
    n = int(ratio * total)
    if n == 0:
        raise ValueError(f"{door}({ratio!r}): budget ratio {ratio:.3g} of {of} ({total} bytes) rounds to 0 bytes;"
                         f" the smallest usable ratio is {1.0 / total:.3g} (one byte)")
    return n


def check_block_arguments(size: object, timeline: object) -> tuple[str, int | float] | None:
    """``tp.budget(size, timeline=...)``'s checks when the block is made, not at its end.

    size is checked by ``check``, whose answer it returns; timeline's folder
    and extension by the C++ ``check_output_path``, as the ``timeline``
    key's, so a bad path fails before training, not after it.

    Raises:
        ValueError, TypeError: as ``check``; ValueError for a timeline path
            whose folder is missing or not writable, or whose extension is
            not .json, .pickle, .html or .txt.
    """
    import operator

    if not isinstance(size, (bool, int, float, str)) and hasattr(size, "__index__"):
        size = operator.index(size)  # a NumPy integer, say
    checked = check(size, "tensorpager.budget")
    if timeline is not None:
        import os

        _ext.load().check_output_path("tensorpager.budget(timeline=...): ", os.fspath(timeline), True)  # type: ignore[arg-type]
    return checked

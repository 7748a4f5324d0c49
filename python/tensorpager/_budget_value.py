"""A budget given as a Python value, checked alike at every Python front door.

``tp.set_budget`` and ``tp.budget`` take an int (bytes), a float (a ratio), a
str or None. The text forms follow the configuration grammar (Note [Size
grammar] and Note [Budget: bytes or ratio] in ``config/``) through
``_sizes``, the row-by-row mirror of the C++ parser; an int is checked as the
size ``"<int>B"``, so ``2**70`` gets the parser's "the size is too large"
instead of a binding's type error. What a float ratio is a share of stays
each front door's own (the device's memory for ``set_budget``, the first
step's peak for ``tp.budget``); here a ratio is only checked to be a number
in (0, 1]. Whether a budget fits the device is the C++ side's check
(``resolve_for_device``), the same for every front door and the ``budget``
key.

This module imports only ``tensorpager._sizes``.
"""

from __future__ import annotations

import math

from tensorpager import _sizes

#: The accepted forms, for messages.
ACCEPTED = (
    "None or 'none' (no budget); an int number of bytes > 0; a size string ("
    + _sizes.ACCEPTED_SIZE_FORMS
    + "); or a ratio in (0, 1] as a float or, where the front door takes one, a string with a decimal point"
    " ('0.6', '1.0')"
)


def check(value: object, door: str, *, text_ratio: bool = True) -> int | float | None:
    """The budget in value: bytes (int), a ratio (float) or None (no budget).

    Args:
        value: as the user gave it.
        door: names the front door in messages (``"tensorpager.set_budget"``).
        text_ratio: whether a string such as ``"0.6"`` is a ratio here
            (``tp.budget`` has always refused it; it reads as a size).

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
        raise TypeError(f"{where}: a {type(value).__name__} is not a budget. Accepted: {ACCEPTED}")
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ValueError(f"{where}: a budget must be a finite number. Accepted: {ACCEPTED}")
        if not 0.0 < value <= 1.0:
            raise ValueError(f"{where}: a ratio must be in (0, 1]. Accepted: {ACCEPTED}")
        return value
    if isinstance(value, int) and value <= 0:
        raise ValueError(f"{where}: a budget must be > 0 bytes. Accepted: {ACCEPTED}")
    text = f"{value}B" if isinstance(value, int) else value.strip()
    if text.lower() == "none":
        return None
    if text_ratio and _sizes.looks_like_ratio(text):
        ratio = _sizes.parse_ratio(text)
        if ratio is None:
            raise ValueError(f"{where}: a ratio must be in (0, 1]; for a size add a unit (e.g. {text}GiB). "
                             f"Accepted: {ACCEPTED}")
        return ratio
    if text_ratio and text in ("0", "1"):
        raise ValueError(f"{where} is ambiguous: write 1.0 for the whole device, or a size with a unit such as"
                         f" 12GiB. Accepted: {ACCEPTED}")
    try:
        n = _sizes.parse_size(text)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    if n == 0:
        raise ValueError(f"{where}: a budget must be > 0 bytes. Accepted: {ACCEPTED}")
    return n


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


def check_block_arguments(size: object, timeline: object) -> None:
    """``tp.budget(size, timeline=...)``'s checks when the block is made, not at its end.

    size is checked by ``check`` (a string ratio is not one here); timeline's
    folder and extension by the C++ ``check_output_path``, as the
    ``timeline`` key's, so a bad path fails before training, not after it.

    Raises:
        ValueError, TypeError: as ``check``; ValueError for a timeline path
            whose folder is missing or not writable, or whose extension is
            not .json, .pickle, .html or .txt.
    """
    import operator

    if not isinstance(size, (bool, int, float, str)) and hasattr(size, "__index__"):
        size = operator.index(size)  # a NumPy integer, say
    check(size, "tensorpager.budget", text_ratio=False)
    if timeline is not None:
        import os

        from tensorpager import _ext

        _ext.load().check_output_path("tensorpager.budget(timeline=...): ", os.fspath(timeline), True)  # type: ignore[arg-type]

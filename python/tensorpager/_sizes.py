"""Sizes and ratios as people write them, parsed as the C++ parser does.

This mirrors ``config/parse_bytes.hpp`` (Note [Size grammar]) so that
Python can check a size before it reaches C++ (``tp.set_budget("12GiB")``)
and give the same answer the configuration parser would:

* a size is a number, optional blanks and an optional unit: ``B``;
  ``KB``, ``MB``, ``GB``, ``TB`` (powers of 1000); ``KiB``, ``MiB``, ``GiB``,
  ``TiB`` (powers of 1024); units are case-insensitive;
* a number without a unit is a whole number of bytes; a fractional number
  needs a unit and is rounded down to a whole byte (``1.5GB``);
* ``K``, ``M``, ``G``, ``T`` alone are rejected as ambiguous;
* a ratio is digits, a point and digits, no unit, in (0, 1] (``0.6``, ``1.0``);
* a budget (``parse_budget``) is a size, a ratio of the peak (``0.5``,
  ``0.5peak``), a ratio of the device (``0.9device``) or ``none``, as
  ``config/memory_budget.hpp`` parses it (Note [Budget spellings]).

``tests/python/test_sizes.py`` runs the C++ unit test's cases against it.
This module imports nothing.
"""

from __future__ import annotations

#: The accepted size forms, word for word as the C++ parser lists them.
ACCEPTED_SIZE_FORMS = (
    "a whole number of bytes (4096), or a number with a unit: B; KB, MB, GB, TB (powers of "
    "1000); KiB, MiB, GiB, TiB (powers of 1024); units are case-insensitive, e.g. 12GiB, "
    "512MB, 1.5GB, 100KB"
)

_SIZE_MAX = (1 << 64) - 1  # std::size_t on the 64-bit platforms torch supports
_BLANKS = " \t\n\r"
_DIGITS = "0123456789"

#: Units and their multipliers; looked up case-insensitively.
UNITS: dict[str, int] = {
    "B": 1,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
}
_UNITS_LOWER = {name.lower(): mult for name, mult in UNITS.items()}


def _split_number(text: str) -> tuple[str, str, str] | None:
    """Splits trimmed text into (whole digits, fraction digits, rest).

    Returns None when text does not start with digits, or has a point
    followed by no digits.
    """
    i = 0
    while i < len(text) and text[i] in _DIGITS:
        i += 1
    if i == 0:
        return None
    whole = text[:i]
    fraction = ""
    if i < len(text) and text[i] == ".":
        start = i + 1
        i = start
        while i < len(text) and text[i] in _DIGITS:
            i += 1
        if i == start:
            return None
        fraction = text[start:i]
    return whole, fraction, text[i:]


def size_error(text: str) -> str | None:
    """Why text is not a size, in words, or None when it is one."""
    try:
        parse_size(text)
    except ValueError as e:
        return str(e)
    return None


def parse_size(text: str) -> int:
    """Parses a size by Note [Size grammar] and returns bytes (rounded down).

    Args:
        text: the size as written, e.g. ``"12GiB"``, ``"512 MB"``, ``"4096"``.
            Blanks around it are ignored.

    Returns:
        The number of bytes, an int in [0, 2**64).

    Raises:
        ValueError: text is not a size. The message quotes text, says what is
            wrong and lists the accepted forms.
    """
    if not isinstance(text, str):
        raise TypeError(f"a size must be a str, not {type(text).__name__} ({text!r})")
    trimmed = text.strip(_BLANKS)

    def fail(problem: str) -> ValueError:
        shown = text if len(text) <= 80 else f"{text[:80]}... ({len(text)} characters)"
        return ValueError(f"'{shown}' is not a size: {problem}. Accepted: {ACCEPTED_SIZE_FORMS}")

    if not trimmed:
        raise fail("the size is empty")
    if trimmed[0] == "-":
        raise fail("a size cannot be negative")
    parts = _split_number(trimmed)
    if parts is None:
        raise fail("the size does not start with a number")
    whole, fraction, rest = parts
    unit = rest.strip(_BLANKS)
    multiplier = 1
    if unit:
        found = _UNITS_LOWER.get(unit.lower())
        if found is None:
            if len(unit) == 1 and unit in "kmgtKMGT":
                raise fail(
                    f"one-letter unit '{unit}' is ambiguous; write {unit.upper()}iB "
                    f"(powers of 1024) or {unit.upper()}B (powers of 1000)"
                )
            raise fail(f"unknown unit '{unit}'")
        multiplier = found
    elif fraction:
        raise fail("a number with a decimal point needs a unit to be a size (bytes are whole)")
    if len(whole.lstrip("0")) > len(str(_SIZE_MAX)):  # before int(): Python caps its digits
        raise fail("the size is too large")
    # floor(whole.fraction * multiplier), exactly, in integers.
    value = int(whole) * multiplier
    if fraction:
        fraction = fraction[:40]  # digits past the 40th move no byte of a 64-bit size
        value += int(fraction) * multiplier // 10 ** len(fraction)
    if value > _SIZE_MAX:
        raise fail("the size is too large")
    return value


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


def looks_like_ratio(text: str) -> bool:
    """True when text (trimmed) is digits, a point and digits, and nothing else."""
    parts = _split_number(text.strip(_BLANKS))
    return parts is not None and parts[1] != "" and parts[2] == ""


def parse_ratio(text: str) -> float | None:
    """The ratio in text, or None when text is not a ratio in (0, 1].

    A ratio is written with a decimal point and no unit: ``"0.6"``, ``"1.0"``.
    ``"1"``, ``".5"`` and ``"60%"`` are not ratios.
    """
    if not looks_like_ratio(text):
        return None
    value = float(text.strip(_BLANKS))
    return value if 0.0 < value <= 1.0 else None


#: The accepted budget forms, word for word as the C++ parser lists them.
ACCEPTED_BUDGET_FORMS = (
    "a size > 0 (12GiB, 4096), a ratio of the first step's peak (0.5 or 0.5peak), a ratio of the "
    "device's memory (0.9device), or none; a ratio has a decimal point and lies in (0, 1]"
)

_SHARE_WORDS = ("peak", "device")


def parse_budget(text: str) -> tuple[str, int | float] | None:
    """Parses a budget by Note [Budget spellings] (config/memory_budget.hpp).

    Returns None for ``"none"``, ``("bytes", n)`` for a size,
    ``("peak", r)`` for ``"0.5"`` or ``"0.5peak"`` (a share of the first
    step's peak) and ``("device", r)`` for ``"0.9device"`` (a share of the
    device's memory). The C++ parser gives the same answer for every text;
    ``tests/python/test_budget_spellings.py`` checks it row by row.

    Raises:
        ValueError: text is no budget; the message quotes it and says why.
    """
    t = text.strip(_BLANKS)
    if not t:
        raise ValueError("the budget is empty")
    if t.lower() == "none":
        return None
    for word in _SHARE_WORDS:
        if len(t) >= len(word) and t[-len(word):].lower() == word:
            number = t[: -len(word)].strip(_BLANKS)
            if not looks_like_ratio(number):
                raise ValueError(f"'{t}' is not a ratio of the {word}: write a number with a decimal point in (0, 1]"
                                 f" before '{word}' (e.g. 0.5{word}, 1.0{word})")
            ratio = parse_ratio(number)
            if ratio is None:
                raise ValueError(f"'{t}' is a ratio of the {word} outside (0, 1]")
            return (word, ratio)
    if looks_like_ratio(t):
        ratio = parse_ratio(t)
        if ratio is None:
            raise ValueError(f"'{t}' is a ratio (a number with a decimal point and no unit) outside (0, 1];"
                             f" for a size add a unit (e.g. {t}GiB)")
        return ("peak", ratio)
    if t in ("0", "1"):
        raise ValueError(f"'{t}' is ambiguous (Note [Budget spellings]): write 1.0 for the whole peak,"
                         " 1.0device for the whole device, or a size with a unit such as 12GiB")
    n = parse_size(t)
    if n == 0:
        raise ValueError(f"'{t}' is 0 bytes; a budget must be > 0 bytes")
    return ("bytes", n)


def format_size(n: int) -> str:
    """Formats n bytes exactly, with the largest unit that divides it.

    The result parses back to n: ``format_size(12 << 30) == "12GiB"``,
    ``format_size(1536) == "1536B"``... as ``format_size_exact`` in C++.
    """
    if n < 0:
        raise ValueError(f"a size cannot be negative: {n}")
    if n == 0:
        return "0B"
    best_name, best_mult = "B", 1
    for name, mult in UNITS.items():
        if n % mult == 0 and mult > best_mult:
            best_name, best_mult = name, mult
    return f"{n // best_mult}{best_name}"


def format_bytes_human(n: int) -> str:
    """Formats n bytes for people, in binary units with two decimals (``1.50 GiB``)."""
    value = float(n)
    for name in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or name == "TiB":
            return f"{int(value)} B" if name == "B" else f"{value:.2f} {name}"
        value /= 1024
    raise AssertionError("unreachable")

"""How install() applies the keys that layers above the allocator own.

Note [Keys a higher layer applies]
install() (_install.py, the allocator's face) acts on most configuration
keys itself, but two belong to layers above it: ``compress`` to a technique
(techniques/compress.py) and ``manage`` to the budget runtime (_managed.py). The face
must not import them (scripts/check_py_layers.py), so the package's
__init__, which Python runs before any module of the package, registers how
each is applied, and install() calls the applier, at its place in the order
of the keys, when the key is set. Boot layer: imports nothing.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

_appliers: dict[str, Callable[[Any], None]] = {}
_undoers: dict[str, Callable[[], None]] = {}


def register(key: str, apply: Callable[[Any], None], *, undo: Callable[[], None] | None = None) -> None:
    """apply(ext) is what install() calls when ``key`` is set; undo(), if
    given, what uninstall() calls to end what apply started (a no-op when it
    started nothing)."""
    _appliers[key] = apply
    if undo is not None:
        _undoers[key] = undo


def undo_all() -> None:
    """Ends what the appliers started, for uninstall()."""
    for undo in _undoers.values():
        undo()


def apply(key: str, ext: Any) -> None:
    """Applies ``key``, which the installed configuration sets.

    Raises:
        RuntimeError: nothing registered an applier for key (the package's
            __init__ did not run, which Python does not allow).
    """
    applier = _appliers.get(key)
    if applier is None:
        raise RuntimeError(f"tensorpager: no applier for the {key!r} key; the package's __init__ registers it")
    applier(ext)

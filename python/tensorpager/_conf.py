"""Configuration text: splitting, merging, and the start-up hook's surgery.

Grammar (Note [Configuration grammar] in ``config/config.hpp``):
``key:value,key:value``. The C++ parser validates; this module only moves
entries around, so it never judges a value. It must stay cheap: the start-up
hook runs it in every interpreter before torch is imported.

Note [Sharing PYTORCH_CUDA_ALLOC_CONF] (Python side)
  PyTorch rejects keys it does not know. When ``backend:tensorpager`` is in
  ``PYTORCH_ALLOC_CONF`` or ``PYTORCH_CUDA_ALLOC_CONF``, the start-up hook
  takes tensorpager's entries (by key name, from ``_keys.KEYS``) and
  ``backend:tensorpager`` out of the variable, keeps PyTorch's entries in
  their order (values may hold bracketed lists with commas:
  ``roundup_power2_divisions:[256:1,512:2]``), deletes the variable when
  nothing is left, and appends what it took to ``TENSORPAGER_CONF``. Another
  backend (``native``, ``cudaMallocAsync``) stays in the variable for PyTorch
  and is copied to tensorpager too, as the C++ ``split_alloc_conf`` does.

  Precedence when a key is given in more than one place: ``TENSORPAGER_CONF``
  (explicit) wins over ``PYTORCH_ALLOC_CONF``, which wins over
  ``PYTORCH_CUDA_ALLOC_CONF`` (PyTorch's own order). The losing entry is
  dropped and a notice names both. A key repeated inside one variable is
  kept twice, so the C++ parser reports it.

Note [PyTorch's keys under tensorpager]
  PyTorch's entries stay for PyTorch, which validates them, but its caching
  allocator serves nothing once tensorpager is the backend. The two that have
  a tensorpager meaning are honoured, unless tensorpager's own key is given:
  ``max_split_size_mb:N`` becomes ``max_split_size:NMiB`` and
  ``per_process_memory_fraction:F`` becomes ``budget:Fdevice`` (a share of
  the device, as PyTorch's cap is). Every other one (``garbage_collection_
  threshold``, ``roundup_power2_divisions``, ...) gets one notice saying it
  has no effect. ``expandable_segments`` is both allocators' key already.

This module imports only ``tensorpager._keys``.
"""

from __future__ import annotations

from tensorpager import _keys

TYPE_CHECKING = False  # typing is not imported at start-up; type checkers treat this as True
if TYPE_CHECKING:
    from collections.abc import Mapping, MutableMapping

_BLANKS = " \t\n\r"


def split_entries(text: str, *, bracket_aware: bool = True) -> list[str]:
    """Splits text at commas (outside square brackets when bracket_aware).

    Entries are trimmed; empty ones are dropped. Validates nothing.
    """
    entries: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if bracket_aware and ch == "[":
            depth += 1
        elif bracket_aware and ch == "]" and depth > 0:
            depth -= 1
        elif ch == "," and depth == 0:
            entries.append(text[start:i])
            start = i + 1
    entries.append(text[start:])
    return [e.strip(_BLANKS) for e in entries if e.strip(_BLANKS)]


def entry_key(entry: str) -> str:
    """The key of a ``key:value`` entry (the whole entry when it has no ':')."""
    return entry.split(":", 1)[0].strip(_BLANKS)


def entry_value(entry: str) -> str:
    """The value of a ``key:value`` entry ("" when it has no ':')."""
    parts = entry.split(":", 1)
    return parts[1].strip(_BLANKS) if len(parts) == 2 else ""


def is_tensorpager_backend(entry: str) -> bool:
    """True for ``backend:tensorpager`` (the value case-insensitively)."""
    return entry_key(entry) == "backend" and entry_value(entry).lower() == _keys.TENSORPAGER_BACKEND


def split_alloc_conf(text: str) -> tuple[list[str], list[str]]:
    """Splits a PyTorch alloc-conf value into (ours, theirs), in order.

    Mirrors C++ ``split_alloc_conf``: entries whose key is a tensorpager key go
    to ours; ``backend:tensorpager`` goes to ours only; any other backend, and
    ``expandable_segments`` (PyTorch's key too), go to both; everything else
    goes to theirs.
    """
    ours: list[str] = []
    theirs: list[str] = []
    for entry in split_entries(text, bracket_aware=True):
        key = entry_key(entry)
        if key == "backend":
            ours.append(entry)
            if not is_tensorpager_backend(entry):
                theirs.append(entry)
        elif key in _keys.SHARED_KEYS:
            ours.append(entry)
            theirs.append(entry)
        elif key in _keys.KEYS:
            ours.append(entry)
        else:
            theirs.append(entry)
    return ours, theirs


def _as_tensorpager(entry: str) -> str | None:
    """The tensorpager entry a PyTorch entry means, or None (Note [PyTorch's keys under tensorpager])."""
    key, value = entry_key(entry), entry_value(entry).strip(_BLANKS)
    if key == "max_split_size_mb":
        return f"max_split_size:{value}MiB"
    if key == "per_process_memory_fraction":
        return f"budget:{value if '.' in value else value + '.0'}device"  # "1" would be ambiguous
    return None


def join_entries(entries: list[str]) -> str:
    """Joins entries with ','."""
    return ",".join(entries)


def is_disabled(environ: Mapping[str, str]) -> bool:
    """True when ``TENSORPAGER_DISABLE`` is set to something other than 0/false/no/off/""."""
    value = environ.get(_keys.ENV_DISABLE, "").strip(_BLANKS).lower()
    return value not in ("", "0", "false", "no", "off")


def move_alloc_conf_keys(environ: MutableMapping[str, str]) -> list[str]:
    """Applies Note [Sharing PYTORCH_CUDA_ALLOC_CONF] to environ, in place.

    Args:
        environ: ``os.environ`` or a dict standing in for it.

    Returns:
        Notices for the user, one line each, without the ``tensorpager:``
        prefix (overridden keys, keys left for PyTorch, disabled hook).

    Postconditions: no ``PYTORCH_*ALLOC_CONF`` variable holds
    ``backend:tensorpager`` or (in one that held it) a tensorpager key; when
    one held ``backend:tensorpager`` and the hook is not disabled,
    ``TENSORPAGER_CONF`` is set. Never raises for any string values.
    """
    notices: list[str] = []
    disabled = is_disabled(environ)
    explicit = environ.get(_keys.ENV_CONF)
    merged = split_entries(explicit, bracket_aware=False) if explicit is not None else []
    seen = {entry_key(e): f"{_keys.ENV_CONF}'s '{e}'" for e in merged}
    requested = False

    for var in _keys.ENV_ALLOC_CONFS:
        text = environ.get(var)
        if text is None:
            continue
        ours, theirs = split_alloc_conf(text)
        if not any(is_tensorpager_backend(e) for e in ours):
            stray = [e for e in ours if entry_key(e) != "backend" and entry_key(e) not in _keys.SHARED_KEYS]
            if stray:
                notices.append(
                    f"{var} has tensorpager key(s) {', '.join(stray)} but no backend:tensorpager;"
                    f" left for PyTorch, which will reject them. Add backend:tensorpager to use"
                    f" tensorpager."
                )
            continue
        requested = True
        if theirs:
            environ[var] = join_entries(theirs)
        else:
            del environ[var]
        if disabled:
            notices.append(
                f"{_keys.ENV_DISABLE} is set: ignoring {join_entries(ours)} from {var};"
                f" PyTorch's allocator is in charge."
            )
            continue
        added: dict[str, str] = {}
        for entry in ours:
            key = entry_key(entry)
            if key in seen:
                notices.append(f"{var}'s '{entry}' is overridden by {seen[key]}.")
                continue
            merged.append(entry)
            added[key] = f"{var}'s '{entry}'"
        # Note [PyTorch's keys under tensorpager]: after tensorpager's own keys,
        # which win over PyTorch's spelling of the same setting.
        no_effect = []
        for entry in theirs:
            translated = _as_tensorpager(entry)
            if translated is None:
                if entry_key(entry) not in ("backend", *_keys.SHARED_KEYS):
                    no_effect.append(entry)
                continue
            key = entry_key(translated)
            if key not in seen and key not in added:
                merged.append(translated)
                added[key] = f"{var}'s '{entry}'"
        if no_effect:
            notices.append(
                f"{var}'s {', '.join(repr(e) for e in no_effect)}: no effect with backend:tensorpager (PyTorch's"
                f" allocator serves nothing; tensorpager's own keys are in its README)."
            )
        seen.update(added)

    if requested and not disabled:
        environ[_keys.ENV_CONF] = join_entries(merged)
    return notices


def option_to_text(key: str, value: object) -> str:
    """Writes one ``tp.install(**options)`` value as configuration text.

    A bool is True/False for a key that takes one (``expandable_segments``);
    ints (not bools) are bytes (``4096`` -> ``4096B``), or a count for a
    count key (``timeline_events=4096``); a float is a ratio
    (budget only); ``None`` is ``none``; ``os.PathLike`` is its path; a str is
    passed as written. The C++ parser judges the result.

    Raises:
        ValueError: key is not a tensorpager key, or value cannot be written
            (a ',' in it, a float for a key that takes no ratio).
        TypeError: value has a type that has no text form here.
    """
    import os  # already imported by the interpreter; local to keep this module's imports plain

    if key not in _keys.KEYS:
        raise ValueError(
            f"tensorpager.install(): unknown option '{key}={value!r}'. "
            f"Accepted keys: {', '.join(_keys.KEYS)}"
        )
    kind = _keys.KINDS[key]
    if value is None:
        text = "none"
    elif isinstance(value, bool) and key in _keys.BOOL_KEYS:
        text = "True" if value else "False"
    elif isinstance(value, bool):
        raise TypeError(f"tensorpager.install(): {key}={value!r}: a bool is not a valid value")
    elif isinstance(value, int) and kind == "count":
        text = str(value)
    elif isinstance(value, int):
        if "size" not in kind:
            raise TypeError(f"tensorpager.install(): {key}={value!r}: {key} takes a {kind}, not an int")
        text = f"{value}B" if value >= 0 else str(value)
    elif isinstance(value, float):
        if kind != "size or ratio":
            raise ValueError(
                f"tensorpager.install(): {key}={value!r}: only budget takes a ratio; give {key}"
                f" in bytes (an int) or as a size string such as '12GiB'"
            )
        text = repr(value)
    elif isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if not isinstance(text, str):
            raise TypeError(f"tensorpager.install(): {key}={value!r}: a path must be a str path")
    else:
        raise TypeError(
            f"tensorpager.install(): {key}={value!r}: expected str, int, float or None,"
            f" not {type(value).__name__}"
        )
    if "," in text:
        raise ValueError(
            f"tensorpager.install(): {key}={value!r}: the configuration grammar cannot carry ','"
        )
    return f"{key}:{text.strip(_BLANKS)}"


def merge_options(conf: str, options: Mapping[str, object]) -> str:
    """conf with options applied: an option replaces conf's entry for its key.

    Entries of conf are kept in order (not validated); options follow, in the
    order given.
    """
    new = [option_to_text(k, v) for k, v in options.items()]
    replaced = set(options)
    kept = [e for e in split_entries(conf, bracket_aware=False) if entry_key(e) not in replaced]
    return join_entries(kept + new)


def parse_to_dict(conf: str) -> dict[str, str]:
    """``"a:1,b:2"`` -> ``{"a": "1", "b": "2"}`` (last one wins; no validation)."""
    return {entry_key(e): entry_value(e) for e in split_entries(conf, bracket_aware=False)}

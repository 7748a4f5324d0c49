"""PyTorch's own entries of ``PYTORCH_ALLOC_CONF``, checked before torch reads them.

Note [Checking PyTorch's entries]
  With ``backend:tensorpager`` in ``PYTORCH_ALLOC_CONF`` or
  ``PYTORCH_CUDA_ALLOC_CONF``, the entries that are not tensorpager's stay in
  the variable for PyTorch (Note [Sharing PYTORCH_CUDA_ALLOC_CONF] in
  ``_conf.py``). PyTorch 2.11 parses the variable while ``import torch``
  loads ``libc10_cuda``; its tokenizer (``ConfigTokenizer`` in
  ``c10/core/AllocatorConfig.h``) splits at ``,``, ``:``, ``[`` and ``]`` and
  drops blanks, and a value it cannot read (an unbalanced ``[``, a key with
  no value, ``a:1:2``) fails an internal assert there, which aborts the
  process. A key it does not know is only refused when CUDA initialises
  (``CUDAAllocatorConfig::parseArgs``), so without CUDA a typo such as
  ``budgte:1GiB`` was silently ignored and the run had no budget.

  So when tensorpager is the backend, the start-up hook checks every entry
  that is not tensorpager's against PyTorch 2.11's keys and the shape of
  their values, and refuses the variable (it takes it out of the
  environment, so torch never reads it, and ``import torch`` raises
  ValueError) at the first problem:

  - ``entry := key ":" value``;
    ``value := word | "[" word ":" word {"," word ":" word} "]"``;
  - ``key`` is one of ``PYTORCH_KEYS`` (the keys of PyTorch 2.11's
    ``AcceleratorAllocatorConfig`` and ``CUDAAllocatorConfig``);
  - ``value`` has its key's kind (``True``/``False``, a whole number, a
    number, a backend, roundup_power2_divisions' list); ranges are left to
    PyTorch, which reports them with a clean error.

  Keys are compared as written (PyTorch drops blanks inside a key; this
  check does not, so ``max split_size_mb`` is refused rather than guessed).

  A value that names tensorpager in no entry ``backend:tensorpager`` (upper
  case ``BACKEND:tensorpager``, ``;`` between entries, ``backend=tensorpager``)
  is refused too, saying how entries are written: PyTorch reads the first two
  as settings of its own and installs nothing (no error without CUDA), and the
  third aborts the process in its tokenizer.

This module imports only ``tensorpager._keys`` and ``tensorpager._conf``.
"""

from __future__ import annotations

from tensorpager import _conf, _keys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import MutableMapping

_BOOL = "True or False"
_WHOLE = "a whole number"
_NUMBER = "a number"
_ROUNDUP = "a whole number, or a list such as [256:1,512:2,>:4]"
_BACKEND = "native or cudaMallocAsync"

#: PyTorch 2.11's allocator keys and the kind of value each takes:
#: c10/core/AllocatorConfig.h (getMutableKeys) and
#: c10/cuda/CUDAAllocatorConfig.h (getKeys) of torch 2.11.0.
PYTORCH_KEYS: dict[str, str] = {
    "backend": _BACKEND,
    "max_split_size_mb": _WHOLE,
    "max_non_split_rounding_mb": _WHOLE,
    "large_segment_size_mb": _WHOLE,
    "garbage_collection_threshold": _NUMBER,
    "roundup_power2_divisions": _ROUNDUP,
    "expandable_segments": _BOOL,
    "pinned_use_background_threads": _BOOL,
    "release_lock_on_cudamalloc": _BOOL,
    "release_lock_on_hipmalloc": _BOOL,
    "pinned_use_cuda_host_register": _BOOL,
    "pinned_use_hip_host_register": _BOOL,
    "graph_capture_record_stream_reuse": _BOOL,
    "pinned_num_register_threads": _WHOLE,
    "pinned_reserve_segment_size_mb": _WHOLE,
    "per_process_memory_fraction": _NUMBER,
}

_SHOWN = 80  # characters of an entry quoted in a message


def _shown(text: str) -> str:
    if len(text) <= _SHOWN:
        return text
    return f"{text[:_SHOWN]}... ({len(text)} characters)"


def _edit_distance(a: str, b: str) -> int:
    """Levenshtein distance, as ``edit_distance`` in config/config.cpp."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def _is_whole(word: str) -> bool:
    return word.isascii() and word.isdigit()


def _is_number(word: str) -> bool:
    whole, _, fraction = word.partition(".")
    return (_is_whole(whole) or whole == "") and (fraction == "" or _is_whole(fraction)) and word not in ("", ".")


def _value_problem(key: str, value: str) -> str | None:
    """Why value is not one PyTorch 2.11 reads for key, or None."""
    kind = PYTORCH_KEYS[key]
    if value == "":
        return f"the value of '{key}' is empty; {key} takes {kind}"
    inner = value[1:-1] if value.startswith("[") and value.endswith("]") else None
    if kind == _ROUNDUP and inner is not None:
        for item in inner.split(","):
            boundary, colon, divisions = item.partition(":")
            if not colon or not (_is_whole(boundary) or boundary == ">") or not _is_whole(divisions):
                return f"'{_shown(item)}' in the list of {key} is not SIZE:DIVISIONS or >:DIVISIONS; {key} takes {kind}"
        return None
    if any(ch in value for ch in ":[]"):
        return f"the value '{_shown(value)}' of '{key}' holds ':', '[' or ']'; {key} takes {kind}"
    ok = {
        _BOOL: value in ("True", "False"),
        _WHOLE: _is_whole(value),
        _NUMBER: _is_number(value),
        _ROUNDUP: _is_whole(value),
        _BACKEND: value in ("native", "cudaMallocAsync"),
    }[kind]
    return None if ok else f"'{_shown(value)}' is not {kind} (the value of '{key}')"


def _bracket_problem(text: str) -> str | None:
    """Why text's square brackets do not pair up (none nested), or None."""
    open_at = -1
    for i, ch in enumerate(text):
        if ch == "[":
            if open_at >= 0:
                return f"'[' at character {i + 1} opens a list inside another list"
            open_at = i
        elif ch == "]":
            if open_at < 0:
                return f"']' at character {i + 1} closes no '['"
            open_at = -1
    if open_at >= 0:
        return f"'[' at character {open_at + 1} is never closed by ']'"
    return None


def entry_problem(entry: str) -> str | None:
    """Why one PyTorch entry (not a tensorpager key) would not be read, or None."""
    key, colon, value = entry.partition(":")
    key = key.strip(" \t\n\r")
    value = value.strip(" \t\n\r")
    if key not in PYTORCH_KEYS:
        problem = f"unknown key '{_shown(key)}'"
        for name in (*_keys.KEYS, *PYTORCH_KEYS):
            if abs(len(name) - len(key)) <= 2 and _edit_distance(key, name) <= 2:
                problem += f" (did you mean '{name}'?)"
        return problem
    if not colon:
        return f"missing ':' between key and value; {key} takes {PYTORCH_KEYS[key]}"
    return _value_problem(key, value)


def accepted_keys() -> str:
    """Both key lists, for messages."""
    return (f"tensorpager's {', '.join(_keys.KEYS)}; PyTorch 2.11's {', '.join(PYTORCH_KEYS)}")


def problem(var: str, text: str) -> str | None:
    """The error for variable var holding text, or None when PyTorch can read
    what tensorpager leaves in it (Note [Checking PyTorch's entries]).

    Only for a value that names ``backend:tensorpager`` (anywhere, even past an
    unbalanced ``[``); any other value is PyTorch's alone.
    """
    flat = _conf.split_entries(text, bracket_aware=False)
    if not any(_conf.is_tensorpager_backend(e) for e in flat):
        if "tensorpager" not in text.lower():
            return None
        return (f"{var} names tensorpager in '{_shown(text)}', but no entry is backend:tensorpager, so nothing"
                f" would be installed. Entries are key:value, separated by ',', with keys in lower case: for"
                f" example backend:tensorpager,manage:all,budget:0.5")
    brackets = _bracket_problem(text)
    if brackets is not None:
        return (f"{var}: {brackets}; PyTorch cannot read the value (a list is [a:1,b:2]). "
                f"Entries are key:value separated by ','; accepted keys: {accepted_keys()}")
    _ours, theirs = _conf.split_alloc_conf(text)
    for entry in theirs:
        if _conf.entry_key(entry) == "backend":
            continue  # another backend beside tensorpager: the C++ parser reports the pair
        found = entry_problem(entry)
        if found is not None:
            return (f"{var}: in '{_shown(entry)}': {found}. Entries are key:value separated by ','; "
                    f"accepted keys: {accepted_keys()}")
    return None


def take_unreadable(environ: MutableMapping[str, str]) -> tuple[str, str] | None:
    """Checks each PyTorch variable naming tensorpager (Note [Checking PyTorch's
    entries]); the first refused one is removed from environ, so that torch
    never reads it, and returned as (variable, message). Never raises."""
    for var in _keys.ENV_ALLOC_CONFS:
        text = environ.get(var)
        if text is None:
            continue
        found = problem(var, text)
        if found is not None:
            del environ[var]
            return var, found
    return None

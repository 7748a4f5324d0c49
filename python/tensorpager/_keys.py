"""tensorpager's configuration keys, known without loading the C++ extension.

The start-up hook runs in every interpreter of the environment, before torch
is imported, and has to tell tensorpager's keys from PyTorch's in
``PYTORCH_CUDA_ALLOC_CONF``. It must stay cheap, so it cannot ask ``_C``.
This table is therefore a copy of the C++ one (``key_table`` in
``config/config.cpp``); ``tests/python/test_keys.py`` checks that the
two agree, row by row, so a key added on one side and not the other fails CI.

This module imports nothing.
"""

from __future__ import annotations

#: One row per key, in documentation order: (name, kind, default as written).
#: kind is one of "choice", "size or ratio", "size", "path", "count" (a whole
#: number), "spec" (compress's rules), as in C++.
KEY_TABLE: tuple[tuple[str, str, str], ...] = (
    ("backend", "choice", "tensorpager"),
    ("budget", "size or ratio", "none"),
    ("manage", "choice", "none"),
    ("host_budget", "size", "none"),
    ("host_fallback", "choice", "error"),
    ("max_split_size", "size", "none"),
    ("expandable_segments", "choice", "True"),
    ("policy", "choice", "hybrid"),
    ("timeline", "path", ""),
    ("timeline_events", "count", "1048576"),
    ("record_trace", "path", ""),
    ("device", "choice", "cuda"),
    ("sim_capacity", "size", "64GiB"),
    ("compress", "spec", "none"),
)

#: Every key tensorpager's parser accepts, in documentation order.
KEYS: tuple[str, ...] = tuple(row[0] for row in KEY_TABLE)

#: The default of each key, as configuration text ("" for an unset path).
DEFAULTS: dict[str, str] = {row[0]: row[2] for row in KEY_TABLE}

#: The kind of each key (see KEY_TABLE).
KINDS: dict[str, str] = {row[0]: row[1] for row in KEY_TABLE}

#: Keys PyTorch reads too: they stay in PyTorch's variable as well.
SHARED_KEYS: tuple[str, ...] = ("expandable_segments",)

#: Choice keys whose values are True and False (``tp.install(key=True)``).
BOOL_KEYS: tuple[str, ...] = ("expandable_segments",)

#: The values of the ``manage`` key that turn the runtime on process-wide:
#: ``all`` lends parameters, gradients and optimizer state during backward as
#: well (Note [Lending parameters and gradients] in _lend.py).
MANAGE_ACTIVATIONS = "activations"
MANAGE_ALL = "all"

#: The value of ``backend`` that selects tensorpager. Any other backend
#: (native, cudaMallocAsync) leaves PyTorch's allocator in charge.
TENSORPAGER_BACKEND = "tensorpager"

#: Environment variables, by role.
ENV_CONF = "TENSORPAGER_CONF"
ENV_DISABLE = "TENSORPAGER_DISABLE"
ENV_EXT_DIR = "TENSORPAGER_EXT_DIR"
#: PyTorch's variables, highest precedence first (PyTorch reads
#: PYTORCH_ALLOC_CONF and falls back to PYTORCH_CUDA_ALLOC_CONF).
ENV_ALLOC_CONFS: tuple[str, ...] = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")

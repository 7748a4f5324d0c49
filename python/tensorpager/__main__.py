"""``python -m tensorpager``: what is installed, with which configuration, and the statistics.

Importing torch here triggers the start-up hook's install when
``TENSORPAGER_CONF`` or ``backend:tensorpager`` in ``PYTORCH_CUDA_ALLOC_CONF``
asks for it; otherwise this reports that tensorpager is not installed.
Exit status: 0 when installed, 1 when not, 2 when the extension is missing
or the configuration is invalid.
"""

from __future__ import annotations

import os
import sys

import tensorpager as tp
from tensorpager import _ext, _keys


def _report() -> int:
    print(f"tensorpager {tp.__version__}")
    for var in (_keys.ENV_CONF, *_keys.ENV_ALLOC_CONFS, _keys.ENV_DISABLE):
        if var in os.environ:
            print(f"  {var}={os.environ[var]}")
    try:
        import torch

        print(f"torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}")
        installed = tp.is_installed()
    except (ImportError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not installed:
        print("installed: no (set PYTORCH_CUDA_ALLOC_CONF=backend:tensorpager,... or "
              "TENSORPAGER_CONF, or call tensorpager.install())")
        return 1
    print(f"installed: yes, device {tp.device_kind()}")
    print("configuration:")
    for key, value in tp.config().items():
        print(f"  {key}: {value}")
    print("statistics (current and peak; tp.stats() has every counter):")
    for key, value in sorted(tp.stats().items()):
        if "_pool." in key or key.endswith((".allocated", ".freed")):
            continue
        human = ("bytes" in key or key.endswith("budget")) and value > 0
        print(f"  {key}: {value}" + (f" ({_ext.load().format_bytes(value)})" if human else ""))
    print(tp.memory_summary())
    return 0


if __name__ == "__main__":
    sys.exit(_report())

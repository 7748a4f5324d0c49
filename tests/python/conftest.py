"""Shared helpers for tensorpager's Python tests.

Most tests that install tensorpager run in a subprocess: installing replaces
the process-wide allocator, which a test cannot undo. ``run_python`` starts
one with the package from ``python/`` (as the .pth line would import it) and
the extension found the same way the package finds it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO / "python"

if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))

from tensorpager import _ext, _keys  # noqa: E402

# The dev flow (scripts/test.sh) sets TENSORPAGER_EXT_DIR=build/hooks; default
# to it here too so that a plain `pytest` after a CMake build finds _C.
if not os.environ.get(_keys.ENV_EXT_DIR) and _ext.find_in_dir(str(REPO / "build" / "hooks")):
    os.environ[_keys.ENV_EXT_DIR] = str(REPO / "build" / "hooks")


def extension_path() -> str | None:
    """Where the package would load _C from, or None when it is not built."""
    found = _ext.find_in_dir(str(PYTHON_DIR / "tensorpager"))
    if found is None and os.environ.get(_keys.ENV_EXT_DIR):
        found = _ext.find_in_dir(os.path.abspath(os.environ[_keys.ENV_EXT_DIR]))
    return found


_NOT_BUILT = ("the C++ extension tensorpager._C is not built (build the CMake target _C with "
              "-DTP_WITH_TORCH=ON and set TENSORPAGER_EXT_DIR, or run scripts/test.sh)")
if extension_path() is None and os.environ.get("TP_REQUIRE_EXT") == "1":
    # scripts/test.sh sets it when it built _C: a missing extension there is a
    # broken build, not a reason to skip most of the suite.
    raise pytest.UsageError(f"TP_REQUIRE_EXT=1 but {_NOT_BUILT}")

requires_ext = pytest.mark.skipif(extension_path() is None, reason=_NOT_BUILT)


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any("gpu" in item.keywords for item in items) and not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


def clean_env(**overrides: str | None) -> dict[str, str]:
    """os.environ without tensorpager's and PyTorch's allocator variables, plus overrides.

    A value of None removes the variable.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (_keys.ENV_CONF, _keys.ENV_DISABLE, *_keys.ENV_ALLOC_CONFS)
    }
    for k, v in overrides.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def run_python(
    code: str,
    *,
    env: dict[str, str] | None = None,
    hook: bool = False,
    source_tree: bool = True,
    check: bool = True,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Runs ``python -c code`` and returns the finished process.

    Args:
        code: the program; dedented.
        env: the environment (default: clean_env()).
        hook: run ``import tensorpager._startup`` first, as tensorpager.pth
            does at interpreter start.
        source_tree: put python/ first on PYTHONPATH; False removes
            PYTHONPATH entirely (to test the pip-installed package).
        check: fail the test, showing stdout and stderr, on a non-zero exit.
        cwd: the working directory (default: the filesystem root, so that the
            current directory hides nothing).
    """
    env = dict(clean_env() if env is None else env)
    if source_tree:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(PYTHON_DIR), *filter(None, [env.get("PYTHONPATH")])]
        )
    else:
        env.pop("PYTHONPATH", None)
        env.pop(_keys.ENV_EXT_DIR, None)
    proc = subprocess.run(
        [sys.executable, "-c", ("import tensorpager._startup\n" if hook else "") + textwrap.dedent(code)],
        env=env,
        cwd=str(cwd) if cwd is not None else os.path.abspath(os.sep),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        pytest.fail(
            f"child exited with {proc.returncode}\n--- stdout ---\n{proc.stdout}"
            f"\n--- stderr ---\n{proc.stderr}"
        )
    return proc

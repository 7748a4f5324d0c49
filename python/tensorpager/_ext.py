"""Finds and loads the C++ extension ``tensorpager._C``.

Where it is looked for, in order:

1. inside the package directory (what ``pip install .`` produces);
2. in the directory named by ``TENSORPAGER_EXT_DIR`` (the dev flow:
   ``scripts/test.sh`` builds the CMake tree into ``build/`` and sets
   ``TENSORPAGER_EXT_DIR=build/hooks``; a relative path is taken from the
   current directory).

torch is imported first: the extension links against libtorch, and loading
torch puts those libraries in the process. Thread-safe after the first call
(the import lock serialises the first).
"""

from __future__ import annotations

import os
import sys

from tensorpager import _keys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType

_MODULE_NAME = "tensorpager._C"


def _package_dir() -> str:
    return os.path.dirname(os.path.abspath(__file__))


def find_in_dir(directory: str) -> str | None:
    """The path of an importable ``_C`` extension file in directory, or None."""
    from importlib.machinery import EXTENSION_SUFFIXES

    for suffix in EXTENSION_SUFFIXES:
        candidate = os.path.join(directory, "_C" + suffix)
        if os.path.isfile(candidate):
            return candidate
    return None


def load() -> ModuleType:
    """Returns ``tensorpager._C``, importing torch and the extension on first use.

    Raises:
        ImportError: the extension is in neither place; the message says where
            it looked and how to build it.
    """
    module = sys.modules.get(_MODULE_NAME)
    if module is not None:
        return module

    import importlib.util

    import torch  # noqa: F401  (loads libtorch before the extension that links to it)

    if find_in_dir(_package_dir()) is not None:
        return importlib.import_module(_MODULE_NAME)

    ext_dir = os.environ.get(_keys.ENV_EXT_DIR, "")
    path = find_in_dir(os.path.abspath(ext_dir)) if ext_dir else None
    if path is None:
        where = f"in {_package_dir()}"
        if ext_dir:
            where += f" or in {_keys.ENV_EXT_DIR}={ext_dir} ({os.path.abspath(ext_dir)})"
        else:
            where += f", and {_keys.ENV_EXT_DIR} is not set"
        raise ImportError(
            f"tensorpager: the C++ extension tensorpager._C was not found {where}. Build it with"
            f" 'pip install --no-build-isolation .' from the repository root, or build the CMake"
            f" target _C (-DTP_WITH_TORCH=ON) and set {_keys.ENV_EXT_DIR} to the folder that"
            f" holds _C*.so.",
            name=_MODULE_NAME,
        )
    spec = importlib.util.spec_from_file_location(_MODULE_NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"tensorpager: cannot load the extension at {path}", name=_MODULE_NAME)
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_MODULE_NAME]
        raise
    package = sys.modules.get("tensorpager")
    if package is not None:
        package._C = module  # as a normal import of a submodule would
    return module

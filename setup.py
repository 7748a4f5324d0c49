"""Builds tensorpager's C++ extension with CMake; the metadata lives in pyproject.toml.

    pip install --no-build-isolation .

``--no-build-isolation`` is required: the extension is compiled against the
torch already installed (an isolated build would fetch another torch, and the
GPU machine has no network). What this file adds to setuptools:

* ``build_ext`` configures the repository root with CMake
  (``-DTP_WITH_TORCH=ON -DTP_BUILD_TESTS=OFF -DCMAKE_PREFIX_PATH=<torch>``),
  builds the target ``_C`` into the package (``TP_PYTHON_MODULE_DIR``; if the
  module lands elsewhere in the build tree it is found and copied);
  ``-DTP_WITH_CUDA=ON`` when ``torch.version.cuda`` is set and nvcc is found,
  unless the environment variable ``TP_WITH_CUDA=0/1`` decides; warnings are
  not errors (``-DTP_WERROR=OFF``). Ninja is used
  when it is on PATH (and ``CMAKE_GENERATOR`` is unset). ``CMAKE_BUILD_TYPE``
  (default Release) and ``CMAKE_ARGS`` (extra arguments, split on blanks) are
  read from the environment.
* ``TP_BUILD_DIR=<folder>``: use a CMake build folder already configured with
  torch (``-DTP_WITH_TORCH=ON``) instead: its ``_C`` target is brought up to
  date and the module copied from it (scripts/test.sh does this, so the
  package it installs is the extension its tests ran against, built once).
* ``build_py`` writes ``tensorpager.pth`` (one line,
  ``import tensorpager._startup``) to the root of the wheel, which installs it
  into site-packages: the start-up hook.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


def _check_bdist_wheel() -> None:
    """Fails early, and clearly, when no bdist_wheel command exists.

    setuptools ships bdist_wheel from 70.1; older ones need the ``wheel``
    package. Build isolation would install it; ``--no-build-isolation`` does
    not, and setuptools then says only "invalid command 'bdist_wheel'".
    """
    try:
        import setuptools.command.bdist_wheel  # noqa: F401  (setuptools >= 70.1)
        return
    except ImportError:
        pass
    try:
        import wheel  # noqa: F401
    except ImportError:
        raise SystemExit(
            "setup.py: building a wheel needs setuptools>=70.1 or the 'wheel' package, and"
            " --no-build-isolation does not install build requirements: run"
            " 'pip install wheel' (or upgrade setuptools) in this environment first."
        ) from None


if any(cmd in sys.argv for cmd in ("bdist_wheel", "dist_info", "editable_wheel")):
    _check_bdist_wheel()
PTH_NAME = "tensorpager.pth"
PTH_LINE = "import tensorpager._startup\n"


class CMakeExtension(Extension):
    """An extension built by a CMake target of the repository root."""

    def __init__(self, name: str, target: str) -> None:
        super().__init__(name, sources=[])
        self.target = target


def _flag(name: str) -> bool | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    if value.strip().lower() in ("1", "on", "true", "yes"):
        return True
    if value.strip().lower() in ("0", "off", "false", "no"):
        return False
    raise SystemExit(f"setup.py: {name}={value!r}: expected 0 or 1")


def _find_nvcc() -> str | None:
    for candidate in (
        os.environ.get("CUDACXX"),
        shutil.which("nvcc"),
        os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc"),
    ):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


class cmake_build_ext(build_ext):
    """build_ext for CMakeExtension: configure, build one target, copy the module."""

    def build_extension(self, ext: Extension) -> None:
        if not isinstance(ext, CMakeExtension):
            super().build_extension(ext)
            return
        try:
            import torch
        except ImportError:
            raise SystemExit(
                "setup.py: torch is not importable. Install torch==2.11.0 first and build with "
                "'pip install --no-build-isolation .' so the extension is compiled against it."
            ) from None

        dest = os.path.abspath(self.get_ext_fullpath(ext.name))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if os.path.exists(dest):
            os.remove(dest)  # so a stale copy is never taken for the fresh build
        configured = os.environ.get("TP_BUILD_DIR")
        if configured:
            self._from_configured_build(os.path.abspath(configured), ext, dest)
            return
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        os.makedirs(build_dir, exist_ok=True)
        nvcc = _find_nvcc()
        with_cuda = _flag("TP_WITH_CUDA")
        if with_cuda is None:
            with_cuda = bool(torch.version.cuda) and nvcc is not None
        args = [
            "cmake",
            "-S", ROOT,
            "-B", build_dir,
            "-DTP_WITH_TORCH=ON",
            "-DTP_BUILD_TESTS=OFF",
            f"-DTP_WITH_CUDA={'ON' if with_cuda else 'OFF'}",
            f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
            f"-DCMAKE_BUILD_TYPE={os.environ.get('CMAKE_BUILD_TYPE', 'Release')}",
            # A user's compiler may warn where the developers' did not; that
            # must not fail an install (CMAKE_ARGS=-DTP_WERROR=ON restores it).
            "-DTP_WERROR=OFF",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DPython_EXECUTABLE={sys.executable}",
            # hooks/CMakeLists.txt writes the module there directly.
            f"-DTP_PYTHON_MODULE_DIR={os.path.dirname(dest)}",
        ]
        if with_cuda and nvcc is not None:
            args.append(f"-DCMAKE_CUDA_COMPILER={nvcc}")
        cache = os.path.join(build_dir, "CMakeCache.txt")
        if not os.environ.get("CMAKE_GENERATOR") and shutil.which("ninja") and not os.path.exists(cache):
            args += ["-G", "Ninja"]
        args += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        self.announce(" ".join(args), level=2)
        subprocess.run(args, check=True)

        jobs = self.parallel or os.cpu_count() or 1
        build = ["cmake", "--build", build_dir, "--target", ext.target, "--parallel", str(jobs)]
        self.announce(" ".join(build), level=2)
        subprocess.run(build, check=True)

        if not os.path.exists(dest):  # the module was put elsewhere: find and copy it
            built = self._find_module(build_dir, ext)
            shutil.copyfile(built, dest)
            shutil.copymode(built, dest)

    def _from_configured_build(self, build_dir: str, ext: CMakeExtension, dest: str) -> None:
        """TP_BUILD_DIR: brings the target up to date in a build folder the
        developer configured with torch (scripts/test.sh's), and copies the
        module from it, instead of configuring and compiling everything again."""
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            raise SystemExit(f"setup.py: TP_BUILD_DIR={build_dir} is not a configured CMake build folder")
        jobs = self.parallel or os.cpu_count() or 1
        subprocess.run(["cmake", "--build", build_dir, "--target", ext.target, "--parallel", str(jobs)], check=True)
        built = self._find_module(build_dir, ext)
        shutil.copyfile(built, dest)
        shutil.copymode(built, dest)

    @staticmethod
    def _find_module(build_dir: str, ext: CMakeExtension) -> str:
        """The module file the target produced, preferring this interpreter's suffix."""
        stem = ext.name.rsplit(".", 1)[-1]
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        for pattern in (stem + suffix, stem + ".so", stem + ".*.so", stem + ".pyd"):
            found = sorted(glob.glob(os.path.join(build_dir, "**", pattern), recursive=True))
            if found:
                return found[0]
        raise SystemExit(f"setup.py: target {ext.target} built, but no {stem}{suffix} under {build_dir}")


class build_py_with_pth(build_py):
    """build_py that also writes the start-up hook's .pth to the wheel's root."""

    def run(self) -> None:
        super().run()
        path = os.path.join(self.build_lib, PTH_NAME)
        with open(path, "w", encoding="utf-8") as f:
            f.write(PTH_LINE)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH_NAME)]


# setuptools' own folders go under build/pip, apart from the CMake build in
# build/, and the egg-info stays out of python/: there it would shadow the
# installed distribution for anything run with PYTHONPATH=python.
SETUPTOOLS_DIR = os.path.join("build", "pip")
os.makedirs(SETUPTOOLS_DIR, exist_ok=True)

setup(
    ext_modules=[CMakeExtension("tensorpager._C", target="_C")],
    cmdclass={"build_ext": cmake_build_ext, "build_py": build_py_with_pth},
    options={"build": {"build_base": SETUPTOOLS_DIR}, "egg_info": {"egg_base": SETUPTOOLS_DIR}},
)

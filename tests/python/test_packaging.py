"""The pip-installed package: the .pth start-up hook from a plain ``python -c``.

Skipped unless tensorpager is pip-installed in this interpreter's environment
(``pip install --no-build-isolation .``).

Why a subprocess: each test is a fresh ``python -c``: the .pth line acts only at interpreter start.
"""

from __future__ import annotations

import importlib.metadata
import os
import sysconfig
from pathlib import Path

import pytest
from conftest import PYTHON_DIR, clean_env, run_python


def _distribution() -> importlib.metadata.Distribution | None:
    """The tensorpager installed in site-packages (not metadata a source tree on PYTHONPATH may hold)."""
    site = [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
    for dist in importlib.metadata.distributions(path=site):
        if dist.metadata["Name"] == "tensorpager":
            return dist
    return None


DIST = _distribution()
pytestmark = pytest.mark.skipif(
    DIST is None, reason="tensorpager is not pip-installed (pip install --no-build-isolation .)"
)


def _pth_path() -> Path:
    assert DIST is not None
    for f in DIST.files or []:
        if f.name == "tensorpager.pth":
            return Path(DIST.locate_file(f))
    pytest.fail("the installed distribution lists no tensorpager.pth")


def test_pth_is_installed_at_the_site_packages_root() -> None:
    pth = _pth_path()
    assert pth.read_text().strip() == "import tensorpager._startup"
    roots = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
    assert os.path.realpath(pth.parent) in roots


def test_installed_package_has_the_extension() -> None:
    proc = run_python(
        "import tensorpager, tensorpager._ext as e, os;"
        " print(tensorpager.__file__); print(e.find_in_dir(os.path.dirname(tensorpager.__file__)))",
        env=clean_env(),
        source_tree=False,
    )
    package_file, ext = proc.stdout.split()
    assert not package_file.startswith(str(PYTHON_DIR))
    assert ext != "None"


def test_plain_python_runs_the_hook_and_installs_at_torch_import(tmp_path: Path) -> None:
    env = clean_env(PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,budget:1GiB,expandable_segments:False")
    proc = run_python(
        """
        import os, sys
        assert "tensorpager._startup" in sys.modules
        assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:False"
        import torch, tensorpager as tp
        print(tp.is_installed(), tp.get_budget(), tp.device_kind() if not torch.cuda.is_available() else "cpu")
        """,
        env=env,
        source_tree=False,
        cwd=tmp_path,
    )
    assert proc.stdout.split() == ["True", str(1 << 30), "cpu"]


def test_plain_python_without_variables_is_untouched(tmp_path: Path) -> None:
    proc = run_python(
        "import sys; print('tensorpager._startup' in sys.modules, 'torch' in sys.modules)",
        env=clean_env(),
        source_tree=False,
        cwd=tmp_path,
    )
    assert proc.stdout.split() == ["True", "False"]
    assert proc.stderr == ""

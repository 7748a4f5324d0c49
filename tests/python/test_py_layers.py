"""scripts/check_py_layers.py, in process: it finds what it must find.

The check itself runs in CI as the ctest Layers.NoPythonImportPointsUp; here
it is run on copies of the package with one violation added, to show that
each kind fails it, and on the package as it is, which passes.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("check_py_layers", ROOT / "scripts" / "check_py_layers.py")
assert _spec is not None and _spec.loader is not None
check_py_layers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_py_layers)


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A copy of python/tensorpager under tmp_path/python."""
    shutil.copytree(ROOT / "python" / "tensorpager", tmp_path / "python" / "tensorpager",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return tmp_path


def add_line(root: Path, module: str, line: str) -> None:
    path = root / "python" / "tensorpager" / f"{module}.py"
    path.write_text(path.read_text(encoding="utf-8") + "\n" + line + "\n", encoding="utf-8")


def test_the_package_as_it_is_passes() -> None:
    assert check_py_layers.check(ROOT) == []


def test_an_import_that_points_up_fails_even_inside_a_function(package: Path) -> None:
    add_line(package, "_conf", "def f():\n    from tensorpager import _runtime")
    problems = check_py_layers.check(package)
    assert any("_conf.py" in p and "imports _runtime (runtime), above its layer (boot)" in p for p in problems), problems


def test_an_import_under_type_checking_is_no_dependency(package: Path) -> None:
    add_line(package, "_conf", "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from tensorpager import _runtime")
    assert check_py_layers.check(package) == []


def test_a_new_circle_within_a_layer_fails(package: Path) -> None:
    add_line(package, "_keys", "def f():\n    from tensorpager import _conf")  # _conf imports _keys
    problems = check_py_layers.check(package)
    assert "import circle: _conf <-> _keys" in problems, problems


def test_only_ext_imports_the_extension(package: Path) -> None:
    add_line(package, "timeline", "def f():\n    from tensorpager import _C")
    problems = check_py_layers.check(package)
    assert any("timeline.py" in p and "imports tensorpager._C" in p for p in problems), problems


def test_what_the_start_up_hook_loads_is_boot_only(package: Path) -> None:
    add_line(package, "_startup", "from tensorpager.techniques import compress")
    problems = check_py_layers.check(package)
    assert any("loads techniques.compress (techniques) at interpreter start" in p for p in problems), problems


def test_the_runtime_cannot_name_a_technique(package: Path) -> None:
    add_line(package, "_tracker", "def f():\n    from tensorpager.techniques import split")
    problems = check_py_layers.check(package)
    assert any("_tracker.py" in p and "imports techniques.split (techniques), above its layer (runtime)" in p
               for p in problems), problems

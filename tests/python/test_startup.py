"""The start-up hook (Note [Start-up hook]) in a child interpreter.

The child runs ``import tensorpager._startup`` first, exactly what the line in
tensorpager.pth does at interpreter start; test_packaging.py covers the .pth
itself once the package is pip-installed.
"""

from __future__ import annotations

import pytest
from conftest import PYTHON_DIR, clean_env, requires_ext, run_python

from tensorpager import _ext

GiB = 1 << 30


@requires_ext
def test_alloc_conf_is_cleaned_and_tensorpager_installs_at_torch_import() -> None:
    env = clean_env(PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,budget:1GiB,expandable_segments:False")
    proc = run_python(
        """
        import os, sys
        assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:False", os.environ
        # expandable_segments is PyTorch's key and tensorpager's: both keep it (_keys.SHARED_KEYS)
        assert os.environ["TENSORPAGER_CONF"] == "backend:tensorpager,budget:1GiB,expandable_segments:False", os.environ
        assert "torch" not in sys.modules and "tensorpager._C" not in sys.modules
        import torch
        import tensorpager as tp
        assert tp.is_installed()
        assert tp.device_kind() == "cpu", tp.device_kind()
        assert tp.get_budget() == 1 << 30, tp.get_budget()
        assert tp.stats()["tensorpager.budget"] == 1 << 30, tp.stats()
        cfg = tp.config()
        assert cfg["device"] == "cpu" and cfg["device_source"].startswith("auto"), cfg
        x = torch.ones(1000)
        assert float(x.sum()) == 1000.0
        print("ok")
        """,
        hook=True,
        env=env,
    )
    assert proc.stdout.strip() == "ok"
    assert "tensorpager:" not in proc.stderr


@requires_ext
def test_tensorpager_conf_alone_installs_at_torch_import() -> None:
    proc = run_python(
        """
        import torch, tensorpager as tp
        print(tp.is_installed(), tp.get_budget())
        """,
        hook=True,
        env=clean_env(TENSORPAGER_CONF="budget:512MiB,policy:lru"),
    )
    assert proc.stdout.split() == ["True", str(512 << 20)]


@requires_ext
def test_pytorch_alloc_conf_is_handled_too() -> None:
    proc = run_python(
        """
        import os, torch, tensorpager as tp
        print(os.environ.get("PYTORCH_ALLOC_CONF"), tp.is_installed(), tp.get_budget())
        """,
        hook=True,
        env=clean_env(PYTORCH_ALLOC_CONF="backend:tensorpager,budget:2GiB"),
    )
    assert proc.stdout.split() == ["None", "True", str(2 * GiB)]


def test_no_variables_means_no_install_and_no_extension_load() -> None:
    proc = run_python(
        """
        import sys, torch
        print("tensorpager._C" in sys.modules)
        """,
        hook=True,
    )
    assert proc.stdout.strip() == "False"
    assert "tensorpager" not in proc.stderr


@requires_ext
@pytest.mark.parametrize(
    ("var", "value", "fragments"),
    [
        ("PYTORCH_CUDA_ALLOC_CONF", "backend:tensorpager,budget:12 gigs,expandable_segments:True",
         ["budget:12 gigs", "unknown unit 'gigs'", "KiB, MiB, GiB, TiB"]),
        ("TENSORPAGER_CONF", "budgit:1GiB",
         ["budgit", "backend", "budget", "host_budget", "policy", "sim_capacity"]),
    ],
)
def test_config_error_raises_at_torch_import_naming_input_and_origin(
    var: str, value: str, fragments: list[str]
) -> None:
    proc = run_python("import torch\n", env=clean_env(**{var: value}), hook=True, check=False)
    assert proc.returncode != 0
    assert "ValueError" in proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, (fragment, proc.stderr)
    assert f"configuration came from {var}" in proc.stderr
    assert "TENSORPAGER_DISABLE=1" in proc.stderr


def test_unknown_keys_in_pytorchs_variable_are_refused_before_torch_reads_them() -> None:
    # Issue 17 item 13: PyTorch reported them only at CUDA initialisation, so
    # without CUDA a typo went unnoticed (Note [Checking PyTorch's entries]).
    env = clean_env(PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,budgit:1GiB")
    proc = run_python("import os; print(os.environ.get('PYTORCH_CUDA_ALLOC_CONF'))\nimport torch", env=env,
                      hook=True, check=False)
    assert proc.stdout.strip() == "None"  # taken out: torch never reads it
    assert proc.returncode == 1
    assert "ValueError: tensorpager: PYTORCH_CUDA_ALLOC_CONF: in 'budgit:1GiB': unknown key 'budgit'" in proc.stderr


def test_config_error_does_not_break_programs_without_torch() -> None:
    env = clean_env(PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,budgit:1GiB,expandable_segments:False")
    proc = run_python("import json; print(json.dumps([1]))\n", env=env, hook=True)
    assert proc.stdout.strip() == "[1]"
    assert proc.stderr == ""


def test_missing_extension_raises_at_torch_import_with_a_hint() -> None:
    if _ext.find_in_dir(str(PYTHON_DIR / "tensorpager")) is not None:
        pytest.skip("an extension sits in python/tensorpager; cannot simulate its absence")
    env = clean_env(TENSORPAGER_CONF="budget:1GiB", TENSORPAGER_EXT_DIR="/nonexistent/tensorpager")
    proc = run_python("import torch\n", env=env, hook=True, check=False)
    assert proc.returncode != 0
    assert "ImportError" in proc.stderr
    assert "TENSORPAGER_EXT_DIR=/nonexistent/tensorpager" in proc.stderr
    assert "TENSORPAGER_DISABLE=1" in proc.stderr


def test_disable_keeps_pytorch_working_with_its_own_allocator() -> None:
    env = clean_env(
        PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,budget:1GiB,expandable_segments:False",
        TENSORPAGER_DISABLE="1",
    )
    proc = run_python(
        """
        import os, sys, torch
        print(os.environ["PYTORCH_CUDA_ALLOC_CONF"], "TENSORPAGER_CONF" in os.environ,
              "tensorpager._C" in sys.modules, float(torch.ones(3).sum()))
        """,
        hook=True,
        env=env,
    )
    assert proc.stdout.split() == ["expandable_segments:False", "False", "False", "3.0"]
    ours = [line for line in proc.stderr.splitlines() if "tensorpager" in line]
    assert len(ours) == 1 and ours[0].startswith("tensorpager: TENSORPAGER_DISABLE is set"), ours


def test_a_failing_hook_prints_one_line_and_the_interpreter_continues() -> None:
    proc = run_python(  # no hook: it imports a broken one itself
        """
        import sys, types
        broken = types.ModuleType("tensorpager._import_hook")
        def activate(environ):
            raise RuntimeError("boom")
        broken.activate = activate
        sys.modules["tensorpager._import_hook"] = broken
        import tensorpager
        tensorpager._import_hook = broken
        sys.modules.pop("tensorpager._startup", None)  # the .pth may have run it already
        import tensorpager._startup
        print("alive")
        """
    )
    assert proc.stdout.strip() == "alive"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tensorpager: ") and "boom" in lines[0]


def test_override_notice_names_both_sources() -> None:
    env = clean_env(
        PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,budget:1GiB", TENSORPAGER_CONF="budget:2GiB"
    )
    proc = run_python("import os; print(os.environ['TENSORPAGER_CONF'])\n", env=env, hook=True)
    assert proc.stdout.strip() == "budget:2GiB,backend:tensorpager"
    assert proc.stderr.strip() == (
        "tensorpager: PYTORCH_CUDA_ALLOC_CONF's 'budget:1GiB' is overridden by"
        " TENSORPAGER_CONF's 'budget:2GiB'."
    )


def test_import_watcher_keeps_torchs_real_loader() -> None:
    proc = run_python(
        """
        import sys
        from tensorpager import _import_hook
        calls = []
        assert "colorsys" not in sys.modules
        _import_hook.watch_import("colorsys", lambda: calls.append(sys.modules["colorsys"].ONE_THIRD))
        import colorsys
        print(calls, type(colorsys.__spec__.loader).__name__, "exec_module" in vars(colorsys.__spec__.loader),
              any(isinstance(f, _import_hook._ImportWatcher) for f in sys.meta_path))
        """
    )
    assert proc.stdout.split() == ["[0.3333333333333333]", "SourceFileLoader", "False", "False"]


def test_import_watcher_survives_find_spec_probes() -> None:
    proc = run_python(
        """
        import importlib.util, sys
        from tensorpager import _import_hook
        calls = []
        assert "colorsys" not in sys.modules
        _import_hook.watch_import("colorsys", lambda: calls.append("fired"))
        assert importlib.util.find_spec("colorsys") is not None  # a probe, as transformers does
        assert calls == []
        import colorsys
        import importlib; importlib.reload(colorsys)
        print(calls)
        """
    )
    assert proc.stdout.strip() == "['fired']"


@requires_ext
def test_backend_alone_prints_the_peak_at_exit_and_a_budget_that_parses() -> None:
    # Note [The peak at exit] in _exit_report.py: a user measures first, then chooses a budget.
    env = clean_env(PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager")
    proc = run_python("import torch\nx = torch.empty(8 << 20, dtype=torch.uint8)\n", env=env, hook=True)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("tensorpager: ")]
    assert len(lines) == 1 and lines[0].startswith("tensorpager: peak reserved "), proc.stderr
    peak = int(lines[0].split("(")[1].split(" B)")[0])
    assert peak >= 8 << 20
    suggested = lines[0].rsplit("budget:", 1)[1]
    assert int(suggested) == peak // 2
    quiet = run_python("import torch\n", env=env, hook=True)  # allocated nothing: says nothing
    assert "tensorpager" not in quiet.stderr


@requires_ext
def test_backend_alone_counts_the_host_waits_on_the_device_at_exit() -> None:
    # Issue 29: giving memory back can wait on the whole device; the line at exit says how often.
    env = clean_env(PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager")
    proc = run_python("""
        import torch, tensorpager as tp
        x = torch.empty(8 << 20, dtype=torch.uint8)
        del x
        tp.empty_cache()  # gives the segment back: a host wait on the (simulated) device
        print("syncs", tp.stats()["tensorpager.num_device_syncs"])
        """, env=env, hook=True)
    syncs = int(proc.stdout.split("syncs ", 1)[1])
    assert syncs > 0
    assert f" B), {syncs} device syncs, no budget; " in proc.stderr, proc.stderr

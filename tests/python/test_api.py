"""The Python API over tensorpager._C, on the CPU adapter (each case in a child process).

Installing replaces the process-wide CPU allocator, so every case that
installs runs in its own interpreter.
"""

from __future__ import annotations

import pytest
from conftest import clean_env, requires_ext, run_python

import tensorpager as tp
from tensorpager import _ext, _install, _keys

GiB, MiB = 1 << 30, 1 << 20


# --- set_budget's argument checks, in process (loading _C installs nothing) -------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), ("none", None), (" None ", None), (4096, 4096), ("12GiB", 12 * GiB),
     ("512MB", 512_000_000), ("1.5KiB", 1536), ("2", 2), ("1B", 1)],
)
@requires_ext
def test_budget_argument_sizes(value: object, expected: int | None) -> None:
    assert _install._budget_bytes(value) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "error", "fragment"),
    [
        ("12 gigs", ValueError, "unknown unit 'gigs'"),
        ("12G", ValueError, "ambiguous"),
        ("1", ValueError, "ambiguous"),
        ("0", ValueError, "ambiguous"),
        ("0GiB", ValueError, "> 0"),
        (0, ValueError, "> 0"),
        (-5, ValueError, "> 0"),
        (1.5, ValueError, "(0, 1]"),
        ("1.5", ValueError, "(0, 1]"),
        (0.5, ValueError, "ratio of the first step's peak"),  # Note [Budget spellings]
        ("0.5", ValueError, "Write '0.5device'"),
        (True, TypeError, "bool"),
        ([1], TypeError, "list"),
    ],
)
@requires_ext
def test_budget_argument_errors_name_input_and_list_forms(
    value: object, error: type, fragment: str
) -> None:
    with pytest.raises(error) as info:
        _install._budget_bytes(value)  # type: ignore[arg-type]
    message = str(info.value)
    assert fragment in message
    assert f"set_budget({value!r}" in message
    if value not in (0.5, "0.5"):  # those name the one spelling set_budget takes instead
        assert _ext.load().ACCEPTED_BUDGET_FORMS in message


def test_keys_are_exported() -> None:
    assert tp.KEYS == _keys.KEYS
    assert tp.parse_size("1KiB") == 1024


# --- with the extension ---------------------------------------------------------


def _run(code: str, **env: str) -> str:
    return run_python(code, env=clean_env(**env)).stdout


@requires_ext
def test_install_then_query_everything() -> None:
    out = _run(
        """
        import torch, tensorpager as tp
        assert not tp.is_installed()
        assert tp.config() == {}
        tp.install(budget="1GiB", policy="lru", sim_capacity=8 << 30)
        assert tp.is_installed() and tp.device_kind() == "cpu"
        cfg = tp.config()
        assert cfg["policy"] == "lru" and cfg["device"] == "cpu", cfg
        assert set(tp.KEYS) <= set(cfg), cfg
        assert tp.get_budget() == 1 << 30
        stats = tp.stats()
        for key in ("allocated_bytes.all.current", "reserved_bytes.all.peak", "num_ooms",
                    "tensorpager.budget"):
            assert key in stats, sorted(stats)
            assert isinstance(stats[key], int)
        assert isinstance(tp.memory_summary(), str) and tp.memory_summary()
        x = torch.ones(1 << 20)
        snap = tp.snapshot()
        assert isinstance(snap, list) and snap and all(isinstance(s, dict) for s in snap), snap
        del x
        tp.empty_cache()
        assert tp.stats()["reserved_bytes.all.current"] == 0, tp.stats()
        tp.reset_peak_stats()
        s = tp.stats()
        assert s["allocated_bytes.all.peak"] == s["allocated_bytes.all.current"], s
        # Installing again with the same configuration is allowed.
        tp.install(budget="1GiB", policy="lru", sim_capacity=8 << 30)
        print("ok")
        """
    )
    assert out.strip() == "ok"


@requires_ext
def test_set_budget_accepts_sizes_ratios_and_none() -> None:
    out = _run(
        """
        import torch, tensorpager as tp
        tp.install(sim_capacity="8GiB")
        tp.set_budget("2GiB"); print(tp.get_budget())
        tp.set_budget(3 << 20); print(tp.get_budget())
        tp.set_budget("0.5device"); print(tp.get_budget())
        tp.set_budget("0.25 Device"); print(tp.get_budget())
        tp.set_budget(None); print(tp.get_budget())
        """
    )
    assert out.split() == [str(2 * GiB), str(3 * MiB), str(4 * GiB), str(2 * GiB), "None"]


@requires_ext
def test_allocated_bytes_follow_a_tensor_rounded_to_512() -> None:
    out = _run(
        """
        import torch, tensorpager as tp
        tp.install(budget="1GiB")
        key = "allocated_bytes.all.current"
        base = tp.stats()[key]
        for n in (1, 1000, 4096, 100_000, 3 << 20):
            x = torch.empty(n, dtype=torch.uint8)
            grown = tp.stats()[key] - base
            del x
            back = tp.stats()[key] - base
            print(n, grown, back)
        """
    )
    for line in out.strip().splitlines():
        n, grown, back = map(int, line.split())
        assert grown == -(-n // 512) * 512, line
        assert back == 0, line


@requires_ext
def test_budget_smaller_than_one_tensor_raises_torch_out_of_memory() -> None:
    out = _run(
        """
        import torch, tensorpager as tp
        tp.install(budget="1MiB")
        try:
            torch.empty(4 << 20, dtype=torch.uint8)
        except torch.OutOfMemoryError as e:
            print(str(e).replace("\\n", " "))
        else:
            raise SystemExit("no OutOfMemoryError")
        assert tp.stats()["num_ooms"] >= 1
        x = torch.ones(1024)  # small allocations still work
        print(float(x.sum()))
        """
    )
    message, small = out.strip().splitlines()
    assert "tried to allocate" in message
    assert "Budget" in message
    assert small == "1024.0"


@pytest.mark.parametrize(
    ("call", "fragments"),
    [
        ('tp.install("budgit:1GiB")', ["budgit", *_keys.KEYS]),
        ('tp.install("budget:12 gigs")', ["budget:12 gigs", "unknown unit 'gigs'", "ACCEPTED_SIZE_FORMS"]),
        ('tp.install(budget="12G")', ["budget:12G", "ambiguous"]),
        ('tp.install(budget="0GiB")', ["budget:0GiB", "is 0 bytes"]),
        ('tp.install(budget=0.5)', ["budget:0.5", "needs manage:activations", "0.5device"]),
        ('tp.install(budget=1.5)', ["budget:1.5", "(0, 1]"]),
        ('tp.install("policy:fifo")', ["fifo", "lru, dtr, capuchin, hybrid"]),
        ('tp.install(budgit=1)', ["budgit", *_keys.KEYS]),
    ],
)
@requires_ext
def test_config_errors_are_value_errors_naming_input(call: str, fragments: list[str]) -> None:
    out = _run(
        f"""
        import torch, tensorpager as tp
        try:
            {call}
        except ValueError as e:
            print(e)
        else:
            raise SystemExit("no ValueError")
        assert not tp.is_installed()
        """
    )
    for fragment in fragments:
        fragment = getattr(_ext.load(), fragment) if fragment.startswith("ACCEPTED_") else fragment
        assert fragment in out, (fragment, out)


@requires_ext
def test_impossible_budgets_are_rejected() -> None:
    out = _run(
        """
        import torch, tensorpager as tp
        for conf in ("budget:0.0", "budget:0GiB", "budget:0"):
            try:
                tp.install(conf)
            except ValueError as e:
                print("ValueError", conf)
        tp.install(budget="1GiB")
        x = torch.empty(4 << 20, dtype=torch.uint8)
        try:
            tp.set_budget("1MiB")  # below what is in use
        except ValueError as e:
            print("ValueError", tp.get_budget(), str(e).replace("\\n", " "))
        """
    )
    lines = out.strip().splitlines()
    assert lines[:3] == ["ValueError budget:0.0", "ValueError budget:0GiB", "ValueError budget:0"]
    assert lines[3].startswith(f"ValueError {GiB} "), lines[3]  # the old budget is kept


@requires_ext
def test_python_dash_m_reports_state() -> None:
    proc = run_python(
        "import runpy; runpy.run_module('tensorpager', run_name='__main__')",
        env=clean_env(TENSORPAGER_CONF="budget:1GiB"),
        hook=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "installed: yes, device cpu" in proc.stdout
    assert "budget: 1GiB" in proc.stdout
    proc = run_python("import runpy; runpy.run_module('tensorpager', run_name='__main__')", check=False)
    assert proc.returncode == 1, proc.stderr
    assert "installed: no" in proc.stdout

"""Hostile configuration at the front doors that install: every one refuses bad input with a named
error, never a crash (the in-process doors: test_hostile_config.py).

Each row is (input, the fragment its error message must hold). Rows that need
the extension or an installed allocator run in one child interpreter per
table (installing is process-wide; device:cpu can be uninstalled between
rows); rows that involve the start-up hook run in a child of their own, since
it reads the environment at interpreter start. A child must end with the
named error or succeed: no signal, no abort, no traceback but the named
error's.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import clean_env, requires_ext, run_python
from hostile_values import BIG, CRASH_SIGNS, GiB


# --- configuration text, set_budget, tp.budget, tp-sim: one child ------------------

_TABLE_CHILD = r"""
import json, math, sys, torch
import tensorpager as tp
rows = json.loads(sys.stdin.read())
out = []
def attempt(fn):
    try:
        fn()
        return "ok"
    except Exception as e:
        return f"{type(e).__name__}: {e}"
for kind, arg in rows:
    if kind == "conf":
        conf = arg if "device:" in arg else (arg + ",device:cpu" if arg.strip() else "device:cpu")
        got = attempt(lambda: tp.install(conf))
        if tp.is_installed():
            tp.uninstall()
    elif kind == "set_budget":
        tp.install("device:cpu")
        value = eval(arg)
        got = attempt(lambda: tp.set_budget(value))
        tp.set_budget(None)
        tp.uninstall()
    elif kind == "budget":
        tp.install("device:cpu")
        def block():
            with eval(arg):
                pass
        got = attempt(block)
        tp.uninstall()
    elif kind == "budget_steps":  # a ratio is resolved at the first step boundary
        tp.install("device:cpu")
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
        def train():
            with eval(arg):
                for _ in range(3):
                    model(torch.randn(32, 64)).sum().backward()
        got = attempt(train)
        tp.uninstall()
    elif kind == "sim":
        status, _out, err = tp._ext.load().sim_main(["missing.trace", "--budget", arg])
        got = f"status {status}: {err}"
    out.append(got)
print(json.dumps(out))
"""


def _table_rows(tmp: str) -> list[tuple[str, str, str]]:
    return [
        # configuration text (the budget key and the other keys; TENSORPAGER_CONF and tp.install)
        ("conf", "budget:", "the budget is empty"),
        ("conf", "budget:-1GiB", "a size cannot be negative"),
        ("conf", "budget:0", "ambiguous"),
        ("conf", "budget:0GiB", "is 0 bytes"),
        ("conf", "budget:nan", "does not start with a number"),
        ("conf", "budget:inf", "does not start with a number"),
        ("conf", "budget:1e-300", "unknown unit 'e-300'"),
        ("conf", "budget:99999999999999999999999GiB", "the size is too large"),
        ("conf", "budget:" + BIG, "the size is too large"),
        ("conf", "budget:0.00000000001device", "is 0 bytes on the simulated device"),
        ("conf", "budget:0.5", "needs manage:activations"),
        ("conf", "budget:1TiB", "is more than the 64.00 GiB of the simulated device"),
        ("conf", "budgte:1GiB", "unknown key 'budgte' (did you mean 'budget'?)"),
        ("conf", "budget:1GiB,budget:2GiB", "key 'budget' is given twice"),
        ("conf", "backend:tensorpager,backend:native", "key 'backend' is given twice"),
        ("conf", "backend:bogus", "'bogus' is not one of the choices"),
        ("conf", "policy:l r u", "'l r u' is not one of the choices"),
        ("conf", "budget:\uff11GiB", "does not start with a number"),
        ("conf", "budget:1GiB,policy:", "the value is empty"),
        ("conf", "budget", "missing ':' between key and value"),
        ("conf", "max_split_size:1MiB", "below the minimum of 20MiB"),
        ("conf", "timeline_events:0", "0 would keep no events"),
        ("conf", "compress:zip", "zip"),
        ("conf", "timeline:/nonexistent-tp-folder/x.html", "the folder '/nonexistent-tp-folder' does not exist"),
        ("conf", f"timeline:{tmp}/x.svg", "cannot tell the timeline format"),
        ("conf", f"timeline:{tmp}/dir.json", "is a folder"),
        ("conf", f"timeline:{tmp}/file.txt/x.json", "is not a folder"),
        ("conf", "record_trace:/nonexistent-tp-folder/t.trace", "does not exist"),
        ("conf", " budget : 1GiB , policy : LRU ", "ok"),
        # tp.set_budget (a share of the device; 64 GiB simulated)
        ("set_budget", "'0.00000000001device'", "rounds to 0 bytes; the smallest usable ratio is"),
        ("set_budget", "1e-300", "is a ratio of the first step's peak"),
        ("set_budget", "2**70", "the size is too large"),
        ("set_budget", "'1TiB'", "is more than the 64.00 GiB of the simulated device"),
        ("set_budget", "1 << 40", "is more than the 64.00 GiB of the simulated device"),
        ("set_budget", "float('nan')", "finite"),
        ("set_budget", "0.0", "(0, 1]"),
        ("set_budget", "'1GiB'", "ok"),
        # tp.budget (ratio: a share of the first step's peak)
        ("budget", "tp.budget(2**70)", "the size is too large"),
        ("budget", "tp.budget(float('nan'))", "finite"),
        ("budget", "tp.budget('1TiB')", "is more than the 64.00 GiB of the simulated device"),
        ("budget", "tp.budget(1 << 50)", "is more than the 64.00 GiB of the simulated device"),
        ("budget", "tp.budget(timeline='/nonexistent-tp-folder/x.html')", "does not exist"),
        ("budget", f"tp.budget(timeline='{tmp}/x.svg')", "cannot tell the timeline format"),
        ("budget_steps", "tp.budget(1e-300)", "rounds to 0 bytes; the smallest usable ratio is"),
        # tp-sim --budget
        ("sim", "nan", "--budget 'nan'"),
        ("sim", "0", "--budget '0': '0' is ambiguous"),
        ("sim", "2.5", "--budget '2.5': '2.5' is a ratio"),
        ("sim", "0.5device", "is a share of a device"),
        ("sim", "-1GiB", "a size cannot be negative"),
    ]


@requires_ext
def test_front_doors_refuse_hostile_values_with_named_errors(tmp_path) -> None:  # noqa: ANN001
    (tmp_path / "dir.json").mkdir()
    (tmp_path / "file.txt").write_text("x")
    rows = _table_rows(str(tmp_path))
    import subprocess

    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(sys.path[0]), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-c", _TABLE_CHILD], input=json.dumps([r[:2] for r in rows]),
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not any(sign in proc.stderr for sign in CRASH_SIGNS), proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    wrong = [(kind, arg[:80], want, result[:400]) for (kind, arg, want), result in zip(rows, got)
             if not (result == "ok" if want == "ok" else want in result and result.split(":")[0] in (
                 "ValueError", "TypeError", "OutOfMemoryError", "RuntimeError") or (kind == "sim" and want in result))]
    assert not wrong, "\n".join(map(str, wrong))


# --- the start-up hook, in children of their own ------------------------------------


def _hook_child(env_overrides: dict[str, str], code: str = "import torch\nprint('imported')"):  # noqa: ANN202
    proc = run_python(code, hook=True, env=clean_env(**env_overrides), check=False, timeout=120)
    assert proc.returncode in (0, 1), (proc.returncode, proc.stderr[-2000:])  # no signal, no abort
    assert not any(sign in proc.stderr for sign in CRASH_SIGNS), proc.stderr[-2000:]
    return proc


@requires_ext
@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("backend:tensorpager,roundup_power2_divisions:[256:1," + "9" * 100_000, "is never closed by ']'"),
        ("backend:tensorpager,budgte:1GiB", "unknown key 'budgte' (did you mean 'budget'?)"),
        ("backend:tensorpager,timeline:/nonexistent-tp-folder/x.html", "does not exist"),
        # Issue 30 item 6: spellings that installed nothing and said nothing, or aborted in c10's tokenizer.
        ("BACKEND:tensorpager,MANAGE:all,BUDGET:0.5", "no entry is backend:tensorpager, so nothing would be installed"),
        ("backend:tensorpager;manage:all;budget:0.5", "no entry is backend:tensorpager, so nothing would be installed"),
        ("backend=tensorpager,manage=all,budget=0.5", "no entry is backend:tensorpager, so nothing would be installed"),
    ],
    ids=["unbalanced-bracket-100KB", "typo", "timeline-folder", "upper-case", "semicolons", "equals"],
)
def test_hook_refuses_with_a_named_error_before_torch_runs(value: str, fragment: str) -> None:
    proc = _hook_child({"PYTORCH_CUDA_ALLOC_CONF": value})
    assert proc.returncode == 1 and "imported" not in proc.stdout
    last = proc.stderr.strip().splitlines()
    assert any(line.startswith("ValueError: ") and fragment in line for line in last), proc.stderr[-2000:]


@requires_ext
def test_conflicting_variables_keep_the_explicit_one_and_say_so() -> None:
    proc = _hook_child(
        {"TENSORPAGER_CONF": "budget:1GiB", "PYTORCH_CUDA_ALLOC_CONF": "backend:tensorpager,budget:2GiB"},
        "import torch, tensorpager as tp\nprint(tp.get_budget())",
    )
    assert proc.returncode == 0 and proc.stdout.split() == [str(GiB)]
    assert "PYTORCH_CUDA_ALLOC_CONF's 'budget:2GiB' is overridden by TENSORPAGER_CONF's 'budget:1GiB'" in proc.stderr


@requires_ext
def test_outputs_that_fail_at_exit_are_one_line_not_a_traceback(tmp_path) -> None:  # noqa: ANN001
    out = tmp_path / "out"
    out.mkdir()
    code = f"""
        import shutil, torch
        x = torch.ones(1000) * 2
        shutil.rmtree({str(out)!r})  # the folder goes away during the run
        print("ran")
    """
    proc = _hook_child({"TENSORPAGER_CONF": f"device:cpu,timeline:{out}/t.json,record_trace:{out}/t.trace"}, code)
    assert proc.returncode == 0 and proc.stdout.strip() == "ran", proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "tensorpager: could not write the trace to" in proc.stderr
    assert "tensorpager: could not write the memory timeline to" in proc.stderr

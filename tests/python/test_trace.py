"""tp.record_trace and the record_trace key (python/tensorpager/trace.py), and the
simulator replaying what they record (python/tensorpager/sim.py).

Why a subprocess: the recordings run in fresh interpreters: they install the allocator process-wide,
and the record_trace key acts from interpreter start to exit.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import REPO, clean_env, extension_path, requires_ext, run_python


def _simulator_built() -> bool:
    """Whether _C has the simulator (sim is built only with nlohmann-json)."""
    path = extension_path()
    return path is not None and b"sim_main" in Path(path).read_bytes()


requires_sim = pytest.mark.skipif(
    not _simulator_built(),
    reason="tensorpager._C was built without the simulator (sim needs nlohmann-json)",
)

# A small model trained one step on the CPU. The recorded step is the first
# use of everything it allocates, so the allocator's figures and the trace's
# cover the same storages.
MODEL = """
import json, sys, torch
import torch.nn as nn
import tensorpager as tp
torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, 10))
data = torch.randn(64, 256)
"""


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _check_trace(records: list[dict]) -> None:
    """The rules of docs/trace_format.md, checked independently of the C++ reader."""
    header, body = records[0], records[1:]
    assert header["format"] == "tensorpager-trace" and header["version"] == 1
    live: set[int] = set()
    seen_op = False
    for r in body:
        if r["type"] == "storage":
            assert not seen_op, "storage lines come before the first op"
            assert r["bytes"] > 0 and r["id"] not in live
            live.add(r["id"])
        elif r["type"] == "op":
            seen_op = True
            assert r["time_ns"] >= 0 and r["phase"] in ("forward", "backward")
            for sid in r["inputs"] + r.get("mutates", []):
                assert sid in live, f"{r['name']} reads storage {sid}, which is not live"
            for out in r["outputs"]:
                assert out["bytes"] > 0 and out["id"] not in live
                live.add(out["id"])
        elif r["type"] == "free":
            assert r["id"] in live
            live.remove(r["id"])


def test_record_trace_sees_operators_saved_tensors_phases_and_frees(tmp_path: Path) -> None:
    path = tmp_path / "step.trace"
    run_python(
        MODEL
        + f"""
with tp.record_trace({str(path)!r}, model=model):
    model(data).square().mean().backward()
"""
    )
    records = _read(path)
    _check_trace(records)
    ops = [r for r in records if r.get("type") == "op"]
    names = {r["name"] for r in ops}
    assert {"addmm", "relu", "tanh", "mm", "threshold_backward", "tanh_backward"} <= names
    assert {r["phase"] for r in ops} == {"forward", "backward"}
    assert all(r["phase"] == "forward" for r in ops if r["name"] in ("relu", "tanh"))
    # relu and tanh save their outputs for backward; the first addmm's output is not saved.
    saved = {r["name"]: r["outputs"][0]["saved"] for r in ops if r["phase"] == "forward" and r["outputs"]}
    assert saved["relu"] and saved["tanh"]
    labels = {r.get("module") for r in ops if r["name"] == "relu"}
    assert labels == {"1"}
    assert any(r.get("type") == "free" for r in records)
    pre = [r for r in records if r.get("type") == "storage"]
    assert sorted(r["bytes"] for r in pre)[-1] == 512 * 512 * 4  # the largest weight


def test_record_trace_rejects_bad_arguments(tmp_path: Path) -> None:
    run_python(
        f"""
import torch, tensorpager as tp
for bad in (dict(path=""), dict(path={str(tmp_path / "a.trace")!r}, compute_scale=0)):
    try:
        tp.record_trace(**bad)
    except ValueError as e:
        assert "record_trace" in str(e), e
    else:
        raise SystemExit(f"no error for {{bad}}")
with tp.record_trace({str(tmp_path / "b.trace")!r}):
    try:
        tp.record_trace({str(tmp_path / "c.trace")!r}).start()
    except RuntimeError as e:
        assert "already being recorded" in str(e)
    else:
        raise SystemExit("two recordings at once")
"""
    )


# Note [Peak of a recorded run]
# The trace is recorded under tensorpager's CPU adapter, and the simulator
# replays it through the same caching allocator code, so the peaks must match
# when the trace holds every allocation of the run: the model's parameters and
# the input (pre-existing, allocated first, in the order the step first uses
# them, which here is their creation order), then each operator's outputs and
# frees in order. The run starts from an empty cache (empty_cache, peaks
# reset) so that no block from before the recording changes placement.
@requires_sim
def test_simulated_peak_equals_the_allocators_peak_for_the_recorded_run(tmp_path: Path) -> None:
    path = tmp_path / "step.trace"
    out = run_python(
        "import torch, tensorpager as tp\ntp.install(device='cpu')\n"
        + MODEL
        + f"""
tp.empty_cache()
tp.reset_peak_stats()
with tp.record_trace({str(path)!r}, model=model):
    model(data).square().mean().backward()
s = tp.stats()
from tensorpager import sim
r = sim.simulate({str(path)!r})
print(json.dumps({{"reserved": s["reserved_bytes.all.peak"], "allocated": s["allocated_bytes.all.peak"],
                  "sim_reserved": r["peak_reserved"], "sim_allocated": r["peak_allocated"],
                  "fits": r["fits"], "slowdown": r["slowdown"]}}))
""",
        env=clean_env(),
    ).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["fits"] and got["slowdown"] == 1.0
    assert got["allocated"] > 512 * 512 * 4
    assert got["sim_allocated"] == got["allocated"], got
    assert got["sim_reserved"] == got["reserved"], got


@requires_ext
def test_record_trace_key_records_from_import_torch_to_exit(tmp_path: Path) -> None:
    path = tmp_path / "keyed.trace"
    proc = run_python(
        MODEL + "model(data).sum().backward()\n",
        env=clean_env(TENSORPAGER_CONF=f"device:cpu,record_trace:{path}"),
        hook=True,
    )
    assert "record_trace" not in proc.stderr, proc.stderr  # no "not acted on" notice
    records = _read(path)
    _check_trace(records)
    assert {"addmm", "mm"} <= {r["name"] for r in records if r.get("type") == "op"}


@requires_sim
def test_tp_sim_command_line_replays_a_dtr_log_and_rejects_bad_input() -> None:
    log = REPO / "bench" / "traces" / "dtr" / "resnet32-bs56.log"
    code = textwrap.dedent(
        f"""
        import sys
        from tensorpager import sim
        sys.exit(sim.main([{str(log)!r}, "--budget", "0.6", "--policy", "dtr"]))
        """
    )
    proc = run_python(code, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "fits:              yes" in proc.stdout
    assert "slowdown:" in proc.stdout
    bad = run_python(
        "from tensorpager import sim\nimport sys\n"
        f"sys.exit(sim.main([{str(log)!r}, '--policy', 'fifo']))",
        check=False,
    )
    assert bad.returncode == 2
    assert "unknown policy 'fifo'; accepted: lru, dtr, capuchin, hybrid" in bad.stderr


@requires_sim
def test_simulate_lends_when_asked() -> None:
    """The recorded ResNet-18 step fits in 160 MiB only when the simulator lends
    weights, gradients and momentum during the backward (bench/results/sim_lending.md:
    the least budget is 212 MiB without lending, 143 MiB with it)."""
    trace = REPO / "bench" / "traces" / "resnet18.trace"
    got = run_python(
        f"""
import json
from tensorpager import sim
runs = {{lend: sim.simulate({str(trace)!r}, "160MiB", policy="hybrid", compute_scale=0.01,
                           expandable_segments=True, lend=lend) for lend in (False, True)}}
print(json.dumps({{str(k): {{"fits": r["fits"], "peak": r["peak_reserved"], "offloaded": r["offloaded_bytes"]}}
                  for k, r in runs.items()}}))
"""
    )
    r = json.loads(got.stdout.splitlines()[-1])
    assert not r["False"]["fits"]
    assert r["True"]["fits"] and r["True"]["peak"] <= 160 << 20 and r["True"]["offloaded"] > 0


@requires_sim
def test_simulate_defaults_are_tp_sims() -> None:
    """simulate() without the two keywords replays as tp-sim does: with the runtime's
    defaults, expandable segments and lending (Note [The simulator's defaults]), not
    DTR's setting (both False), which gives another peak on the recorded ResNet-18."""
    trace = REPO / "bench" / "traces" / "resnet18.trace"
    got = run_python(
        f"""
import json
from tensorpager import sim
def run(**flags):
    r = sim.simulate({str(trace)!r}, "160MiB", policy="hybrid", compute_scale=0.01, **flags)
    return [r["fits"], r["peak_reserved"], r["step_ns"], r["offloaded_bytes"]]
print(json.dumps([run(), run(expandable_segments=True, lend=True), run(expandable_segments=False, lend=False)]))
"""
    )
    default, runtimes, dtrs = json.loads(got.stdout.splitlines()[-1])
    assert default == runtimes
    assert default != dtrs


@requires_sim
def test_simulate_rejects_a_bad_budget() -> None:
    log = REPO / "bench" / "traces" / "dtr" / "resnet32-bs56.log"
    run_python(
        f"""
from tensorpager import sim
for bad in (0, -5, 1.5, "half", "0.5device", True):
    try:
        sim.simulate({str(log)!r}, bad)
    except ValueError as e:
        pass
    else:
        raise SystemExit(f"no error for {{bad!r}}")
"""
    )

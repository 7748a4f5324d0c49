"""Memory timelines from Python: the JSON file, the memory_viz pickle, the
report, phase tracking and ``python -m tensorpager.viz``.

One child process records a run (timeline_record.py: training steps, exact
allocations with markers, synthetic runtime events, since the runtime does not
emit yet) and writes every format; the tests read its files. The HTML page and
its rendering are in test_timeline_html.py; starting, capping and dumping a
recording, and the timeline keys, in test_timeline_recording.py.
"""

from __future__ import annotations

import json
import pickle
import pickletools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import PYTHON_DIR, clean_env, requires_ext, run_python
from timeline_record import RECORD

pytestmark = requires_ext


@pytest.fixture(scope="session")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("timeline")
    proc = run_python(RECORD.format(out_dir=str(out)))
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["dir"] = out
    return result


def load_json(run: dict[str, Any]) -> dict[str, Any]:
    return json.loads((run["dir"] / "run.json").read_text())


# --- Perfetto JSON ---------------------------------------------------------------


def test_json_parses_and_carries_the_saved_timeline(run: dict[str, Any]) -> None:
    doc = load_json(run)
    assert doc["otherData"]["producer"] == "tensorpager"
    assert doc["otherData"]["dropped_events"] == 0
    saved = doc["tensorpager"]
    assert saved["format"] == "tensorpager.timeline"
    # The log stores a free that completes at once as one event; the saved
    # timeline expands it into free_requested + free_completed at the same
    # time and address (Note [Folded frees] in profiler/event_log.hpp).
    kinds, events = saved["kinds"], saved["events"]
    expanded = sum(1 for a, b in zip(events, events[1:])
                   if kinds[a[1]] == "free_requested" and kinds[b[1]] == "free_completed" and a[0] == b[0]
                   and a[5] == b[5])
    assert expanded > 0
    assert len(events) - expanded == run["info"]["events"]


def test_json_async_begins_have_ends(run: dict[str, Any]) -> None:
    open_slices: dict[tuple[str, str, int], int] = {}
    begins = 0
    unfinished = 0
    for e in load_json(run)["traceEvents"]:
        if e["ph"] not in ("b", "e"):
            continue
        key = (e["cat"], e["name"], e["id"])
        if e["ph"] == "b":
            open_slices[key] = open_slices.get(key, 0) + 1
            begins += 1
        else:
            assert open_slices.get(key, 0) > 0, f"an end without a begin: {e}"
            open_slices[key] -= 1
            unfinished += bool(e.get("args", {}).get("unfinished"))
    assert begins == 4  # offload 1, prefetch 1, recompute 2, offload 3 (still running)
    assert all(n == 0 for n in open_slices.values())
    assert unfinished == 1


def test_json_timestamps_are_monotone_per_track(run: dict[str, Any]) -> None:
    last: dict[tuple[Any, ...], float] = {}
    for e in load_json(run)["traceEvents"]:
        if e["ph"] == "M":
            continue
        track = (e["pid"], e["name"]) if e["ph"] == "C" else (e["pid"], e["tid"])
        assert last.get(track, float("-inf")) <= e["ts"], f"{track} goes back in time at {e}"
        last[track] = e["ts"]


def test_json_counters_equal_the_allocator_statistics_at_each_marker(run: dict[str, Any]) -> None:
    doc = load_json(run)
    counters: dict[str, list[tuple[float, int]]] = {}
    markers: dict[int, float] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "C":
            counters.setdefault(e["name"], []).append((e["ts"], e["args"]["bytes"]))
        elif e["ph"] == "i" and e["name"] == "stall":
            markers[e["args"]["tensor"]] = e["ts"]

    def value_at(name: str, ts: float) -> int:
        return [v for t, v in counters[name] if t <= ts][-1]

    assert len(markers) == len(run["stats_at"]) == 7
    for marker, allocated, reserved in run["stats_at"]:
        assert value_at("allocated", markers[marker]) == allocated, marker
        assert value_at("reserved", markers[marker]) == reserved, marker
    assert value_at("budget", markers[1006]) == 512 << 20
    assert value_at("host (offloaded)", markers[1005]) == 3 << 20
    assert value_at("host (offloaded)", markers[1006]) == 0



# --- memory_viz pickle ----------------------------------------------------------

# The opcodes of MemoryViz.js's unpickler (Note [Pickle opcodes]).
MEMORY_VIZ_OPCODES = {
    "PROTO", "APPEND", "APPENDS", "LIST", "TUPLE", "NEWFALSE", "NEWTRUE", "NONE", "BINGET", "BININT", "BININT1",
    "BININT2", "EMPTY_DICT", "EMPTY_LIST", "FRAME", "LONG1", "LONG_BINGET", "MARK", "MEMOIZE", "BINPUT",
    "LONG_BINPUT", "SETITEMS", "SETITEM", "DICT", "SHORT_BINUNICODE", "BINUNICODE", "STOP", "EMPTY_TUPLE",
    "TUPLE1", "TUPLE2", "TUPLE3", "BINFLOAT",
}


def load_pickle(run: dict[str, Any], name: str = "run.pickle") -> tuple[bytes, dict[str, Any]]:
    data = (run["dir"] / name).read_bytes()
    return data, pickle.loads(data)


def test_pickle_loads_with_protocol_4_and_memory_viz_opcodes(run: dict[str, Any]) -> None:
    data, snap = load_pickle(run)
    ops = [op.name for op, _, _ in pickletools.genops(data)]
    assert ops[0] == "PROTO" and data[1] <= 4
    assert set(ops) <= MEMORY_VIZ_OPCODES, set(ops) - MEMORY_VIZ_OPCODES
    assert (run["dir"] / "snapshot.bin").read_bytes() == data  # dump_snapshot() writes the same, any name


def test_pickle_has_the_keys_and_actions_memory_viz_needs(run: dict[str, Any]) -> None:
    _, snap = load_pickle(run)
    assert {"segments", "device_traces"} <= snap.keys()
    for seg in snap["segments"]:
        assert {"device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream",
                "segment_type", "blocks"} <= seg.keys()
        assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
        for b in seg["blocks"]:
            assert {"address", "size", "requested_size", "state", "frames"} <= b.keys()
            assert b["state"] in ("active_allocated", "active_pending_free", "inactive")
    actions = {e["action"] for e in snap["device_traces"][0]}
    # Expandable segments by default: granules are mapped (segment_map), as
    # PyTorch records them; plain segments (segment_alloc) serve what a
    # granule would not fit (none here).
    assert {"alloc", "free_requested", "free_completed", "segment_map"} <= actions
    assert actions <= {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
                       "segment_unmap", "oom"}
    assert all(s["is_expandable"] for s in snap["segments"])
    for e in snap["device_traces"][0]:
        assert {"action", "addr", "size", "stream", "frames", "time_us"} <= e.keys()
    categories = {e.get("category") for e in snap["device_traces"][0]}
    assert "unknown" in categories  # memory_viz needs it once categories are used
    assert {"activation", "gradient", "parameter", "optimizer_state"} <= categories


def test_pickle_distinguishes_offloaded_and_prefetched_memory(run: dict[str, Any]) -> None:
    _, snap = load_pickle(run)
    log = snap["device_traces"][0]
    freed_to_host = [e for e in log if e["action"] == "free_requested"
                     and any("offloaded to host (tensor 1)" in f["name"] for f in e["frames"])]
    assert len(freed_to_host) == 1 and freed_to_host[0]["size"] >= 3 << 20
    prefetched = [e for e in log if e["action"] == "alloc" and e["category"].endswith("(prefetched)")]
    assert len(prefetched) == 1


def test_the_allocator_log_sums_to_the_final_statistics(run: dict[str, Any]) -> None:
    _, snap = load_pickle(run)
    allocated = reserved = active = segments = 0
    for e in snap["device_traces"][0]:
        size = e["size"]
        allocated += {"alloc": size, "free_requested": -size}.get(e["action"], 0)
        active += {"alloc": size, "free_completed": -size}.get(e["action"], 0)
        reserved += {"segment_alloc": size, "segment_free": -size, "segment_map": size,
                     "segment_unmap": -size}.get(e["action"], 0)
    final = run["final"]
    assert allocated == final["allocated_bytes.all.current"]
    assert reserved == final["reserved_bytes.all.current"]
    assert active == final["active_bytes.all.current"]
    # Each mapped range is a segment (Note [Expandable segments]).
    assert final["segment.all.current"] == len(snap["segments"])
    assert sum(s["total_size"] for s in snap["segments"]) == reserved
    assert sum(s["allocated_size"] for s in snap["segments"]) == allocated


def test_torchs_own_memory_viz_tools_read_the_pickle(run: dict[str, Any]) -> None:
    from torch.cuda import _memory_viz

    _, snap = load_pickle(run)
    assert "TOTAL MEM" in _memory_viz.trace(snap)
    assert "segments" in _memory_viz.segsum(snap)
    assert "snapshot.pickle" in _memory_viz.trace_plot(snap)


# --- report, phases -------------------------------------------------------------


def test_report_and_txt_agree_and_name_the_figures(run: dict[str, Any]) -> None:
    text = (run["dir"] / "run.txt").read_text()
    assert text == run["report"]
    for figure in ("peak allocated", "peak reserved", "offloaded to host     3.00 MiB in 1 transfer",
                   "recomputed", "stalls", "largest blocks live at the peak", "4 steps"):
        assert figure in text, figure


def test_phase_tracking_labels_modules_and_categories(run: dict[str, Any]) -> None:
    saved = load_json(run)["tensorpager"]
    kinds, cats = saved["kinds"], saved["categories"]
    allocs = [e for e in saved["events"] if kinds[e[1]] == "alloc"]
    labels = {saved["labels"][e[12]] for e in allocs}
    assert {"0 (Linear)", "2 (Linear)"} <= labels
    seen = {cats[e[2]] for e in allocs}
    assert {"activation", "gradient", "optimizer_state"} <= seen
    tags = [e for e in saved["events"] if kinds[e[1]] == "tag"]
    assert {cats[e[2]] for e in tags} >= {"parameter", "gradient", "optimizer_state"}
    assert "0.weight (parameter)" in saved["labels"]



# --- python -m tensorpager.viz ----------------------------------------------------


def viz(*args: str) -> subprocess.CompletedProcess[str]:
    env = clean_env(PYTHONPATH=str(PYTHON_DIR))
    return subprocess.run([sys.executable, "-m", "tensorpager.viz", *args], env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("source", ["run.json", "run.pickle"])
def test_viz_converts_to_every_format(run: dict[str, Any], tmp_path: Path, source: str) -> None:
    for target in ("out.json", "out.pickle", "out.html", "out.txt"):
        proc = viz(str(run["dir"] / source), "-o", str(tmp_path / target), "--top", "10")
        assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out.txt").read_text() == (run["dir"] / "run.txt").read_text()
    assert json.loads((tmp_path / "out.json").read_text())["tensorpager"] == load_json(run)["tensorpager"]
    assert pickle.loads((tmp_path / "out.pickle").read_bytes()) == load_pickle(run)[1]


def test_viz_reads_a_pytorch_snapshot(run: dict[str, Any], tmp_path: Path) -> None:
    _, snap = load_pickle(run)
    del snap["tensorpager"]  # as PyTorch would write it
    src = tmp_path / "torch.pickle"
    src.write_bytes(pickle.dumps(snap))
    proc = viz(str(src), "-o", str(tmp_path / "from_torch.txt"))
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "from_torch.txt").read_text()
    assert "peak allocated" in text


def test_viz_rejects_other_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": []}')
    proc = viz(str(bad), "-o", str(tmp_path / "x.html"))
    assert proc.returncode == 2
    assert "not a tensorpager timeline" in proc.stderr

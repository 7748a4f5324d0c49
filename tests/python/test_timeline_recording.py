"""Timeline recordings from Python, each in its own child process: the cap on a recording's events
and what the JSON says when it is hit, a new recording started over an old one, the timeline and
timeline_events keys, and dumping without a recording. The formats of one recorded run:
test_timeline.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import clean_env, requires_ext, run_python

pytestmark = requires_ext


def test_json_reports_dropped_events_when_the_cap_is_hit(tmp_path: Path) -> None:
    proc = run_python(f"""
        import torch, tensorpager as tp
        tp.install(device="cpu")
        tp.start_timeline(max_events=40)
        for _ in range(100):
            t = torch.empty(4096)
            del t
        tp.dump_timeline({str(tmp_path / "capped.json")!r})
        print(tp.report())
    """)
    doc = json.loads((tmp_path / "capped.json").read_text())
    dropped = doc["otherData"]["dropped_events"]
    assert dropped > 0
    assert doc["otherData"]["max_events"] == 40
    assert len(doc["tensorpager"]["events"]) + dropped >= 200  # alloc and a folded free each
    assert any(e["ph"] == "i" and e["name"] == "events dropped: log full" and e["args"]["dropped_events"] == dropped
               for e in doc["traceEvents"])
    assert "WARNING: the log was full" in proc.stdout


def test_a_new_recording_labels_and_tags_afresh(tmp_path: Path) -> None:
    path = tmp_path / "second.json"
    run_python(f"""
        import torch, torch.nn as nn, tensorpager as tp
        tp.install(device="cpu")
        model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
        opt = torch.optim.Adam(model.parameters())
        def step():
            model(torch.randn(8, 64)).sum().backward()
            opt.step()
            opt.zero_grad()
        tp.start_timeline()
        step()
        tp.start_timeline()  # a new log: label ids start again
        step()
        tp.dump_timeline({str(path)!r})
    """)
    saved = json.loads(path.read_text())["tensorpager"]
    kinds, cats, labels = saved["kinds"], saved["categories"], saved["labels"]
    allocs = [e for e in saved["events"] if kinds[e[1]] == "alloc"]
    assert all(e[12] < len(labels) for e in saved["events"])
    assert "0 (Linear)" in {labels[e[12]] for e in allocs}
    tagged = {labels[e[12]]: cats[e[2]] for e in saved["events"] if kinds[e[1]] == "tag"}
    assert tagged.get("0.weight (parameter)") == "parameter"
    assert tagged.get("0.weight Adam.exp_avg") == "optimizer_state"
    assert [e[8] for e in saved["events"] if kinds[e[1]] == "step"] == [0]


def test_timeline_key_dumps_at_exit(tmp_path: Path) -> None:
    path = tmp_path / "exit.json"
    proc = run_python("""
        import torch
        t = torch.ones(1 << 20)
        del t
    """, env=clean_env(TENSORPAGER_CONF=f"device:cpu,timeline:{path}"), hook=True)
    doc = json.loads(path.read_text())
    assert len(doc["tensorpager"]["events"]) >= 3
    assert f"wrote the memory timeline to {path}" in proc.stderr


def test_timeline_events_key_caps_the_recording_and_later_logs(tmp_path: Path) -> None:
    path = tmp_path / "capped.json"
    proc = run_python("""
        import torch, tensorpager as tp
        C = tp._ext.load()
        print("cap:", C.timeline_info()["max_events"])
        for _ in range(100):
            t = torch.empty(4096)
            del t
        tp.start_timeline()  # a new log started without a cap takes the key's
        print("restarted:", C.timeline_info()["max_events"])
        tp.start_timeline(max_events=7)  # an explicit cap wins
        print("explicit:", C.timeline_info()["max_events"])
        tp.install(timeline_events=50, timeline=%r, device="cpu")  # an int is a count
    """ % str(path), env=clean_env(TENSORPAGER_CONF=f"device:cpu,timeline:{path},timeline_events:50"), hook=True)
    assert "cap: 50" in proc.stdout and "restarted: 50" in proc.stdout and "explicit: 7" in proc.stdout
    doc = json.loads(path.read_text())
    assert doc["otherData"]["max_events"] == 7


def test_timeline_key_with_an_unknown_extension_is_refused(tmp_path: Path) -> None:
    proc = run_python(f"""
        import tensorpager as tp
        try:
            tp.install("device:cpu,timeline:{tmp_path}/run.trace")
        except ValueError as e:
            print("refused:", e)
        print("installed:", tp.is_installed())
    """)
    assert "refused:" in proc.stdout and ".json" in proc.stdout
    assert "installed: False" in proc.stdout


def test_dump_without_a_recording_says_how_to_start_one() -> None:
    proc = run_python("""
        import tensorpager as tp
        tp.install(device="cpu")
        try:
            tp.dump_timeline("/tmp/never.json")
        except RuntimeError as e:
            print("error:", e)
    """)
    assert "start_timeline()" in proc.stdout

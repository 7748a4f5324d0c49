"""``python -m tensorpager.viz IN -o OUT [--top N]``: convert a memory timeline.

IN is a file tensorpager wrote (``.json`` or ``.pickle``: both carry the saved
timeline under the key ``"tensorpager"``, Note [Saved timeline] in
``profiler/saved_timeline.hpp``) or a snapshot PyTorch wrote
(``torch.cuda.memory._dump_snapshot``), whose allocator log (its
``device_traces``) is read as allocator events. OUT's extension chooses the
format: ``.json`` (Perfetto / chrome://tracing), ``.pickle`` (memory_viz),
``.html`` (a self-contained page), ``.txt`` (a text report). The writers are
tensorpager's C++ ones, so this loads ``tensorpager._C`` (and torch); it
installs nothing.

Exit status: 0 on success, 2 when IN cannot be read or converted.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_FORMAT = "tensorpager.timeline"
_FIELDS = ["t_ns", "kind", "category", "device", "stream", "address", "bytes", "id", "detail",
           "allocated_bytes", "reserved_bytes", "host_bytes", "label"]
#: What ``load`` reads, for error messages.
READS = (
    "tensorpager.viz reads a .json or .pickle timeline written by tensorpager (tp.dump_timeline,"
    " the timeline key) or a PyTorch memory snapshot pickle (torch.cuda.memory._dump_snapshot);"
    " .html and .txt are outputs only"
)

_LOG_ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom", "segment_map",
                "segment_unmap")
_GROW = ("segment_alloc", "segment_map")  # reserved bytes up (segment_map: expandable segments)
_SHRINK = ("segment_free", "segment_unmap")


def load(path: str) -> dict[str, Any]:
    """The saved timeline in the file at path (see the module docstring).

    Raises:
        ValueError: the file is neither a tensorpager timeline nor a PyTorch snapshot.
        OSError: it cannot be read.
    """
    with open(path, "rb") as f:
        head = f.read(2)
        f.seek(0)
        try:
            if head[:1] == b"\x80":
                data = pickle.load(f)  # noqa: S301 (the user's own file, as torch's own tools do)
            else:
                data = json.load(f)
        except Exception as e:  # noqa: BLE001 (any decoding failure means: not a file we read)
            kind = "pickle" if head[:1] == b"\x80" else "JSON"
            raise ValueError(f"{path}: cannot be read as {kind} ({type(e).__name__}: {e}). {READS}") from None
    if isinstance(data, dict) and isinstance(data.get("tensorpager"), dict):
        saved = data["tensorpager"]
        if saved.get("format") != _FORMAT:
            raise ValueError(f"{path}: the 'tensorpager' entry is not a saved timeline")
        return saved
    if isinstance(data, dict) and "device_traces" in data:
        return from_torch_snapshot(data)
    raise ValueError(f"{path}: not a tensorpager timeline nor a PyTorch memory snapshot. {READS}")


def from_torch_snapshot(snapshot: dict[str, Any]) -> dict[str, Any]:
    """A saved timeline from a PyTorch memory snapshot's allocator log (its ``device_traces``).

    PyTorch keeps the last entries in a ring, so the log may begin mid-run:
    the totals before its first entry are the snapshot's final segments minus
    what the log did. Categories come from entries' ``category`` where they
    name one of tensorpager's, labels from the first frame; all else is unknown.
    """
    kinds = list(_LOG_ACTIONS)
    categories = ["unknown", "parameter", "activation", "gradient", "optimizer_state", "compressed"]
    labels = [""]
    label_ids: dict[str, int] = {"": 0}
    final: dict[int, list[int]] = {}  # device -> [allocated, reserved]
    for seg in snapshot.get("segments", []):
        d = int(seg.get("device", 0))
        tot = final.setdefault(d, [0, 0])
        tot[1] += int(seg["total_size"])
        tot[0] += sum(int(b["size"]) for b in seg.get("blocks", []) if b.get("state") == "active_allocated")
    rows: list[list[int]] = []
    for d, log in enumerate(snapshot.get("device_traces", [])):
        entries = [e for e in log if e.get("action") in _LOG_ACTIONS]
        net_alloc = sum(int(e["size"]) for e in entries if e["action"] == "alloc") - sum(
            int(e["size"]) for e in entries if e["action"] == "free_requested")
        net_res = sum(int(e["size"]) for e in entries if e["action"] in _GROW) - sum(
            int(e["size"]) for e in entries if e["action"] in _SHRINK)
        allocated = final.get(d, [0, 0])[0] - net_alloc
        reserved = final.get(d, [0, 0])[1] - net_res
        for i, e in enumerate(entries):
            action, size = e["action"], int(e.get("size", 0))
            allocated += size if action == "alloc" else -size if action == "free_requested" else 0
            reserved += size if action in _GROW else -size if action in _SHRINK else 0
            category = e.get("category", "unknown")
            label = 0
            frames = e.get("frames") or []
            if action == "alloc" and frames:
                f = frames[0]
                text = f"{f.get('name', '')} ({f.get('filename', '')}:{f.get('line', 0)})"
                label = label_ids.setdefault(text, len(labels))
                if label == len(labels):
                    labels.append(text)
            t_ns = int(e["time_us"]) * 1000 if "time_us" in e else i
            rows.append([t_ns, kinds.index(action), categories.index(category) if category in categories else 0,
                         d, int(e.get("stream") or 0), int(e.get("addr", 0)), size, 0, size if action == "alloc" else 0,
                         allocated, reserved, -1, label])
    rows.sort(key=lambda r: r[0])
    return {"format": _FORMAT, "version": 1, "event_fields": _FIELDS, "kinds": kinds, "categories": categories,
            "events": rows, "labels": labels, "devices": [], "dropped": 0, "max_events": 0, "initial": []}


def convert(src: str | os.PathLike[str], dst: str | os.PathLike[str], top: int = 20) -> None:
    """Reads the timeline in src and writes it to dst in the format of dst's extension.

    Raises:
        ValueError: src is not a timeline, or dst's extension names no format.
        OSError, RuntimeError: a file cannot be read or written.
    """
    from tensorpager import _ext

    saved = load(os.fspath(src))
    _ext.load().timeline_convert(saved, os.fspath(dst), int(top))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tensorpager.viz",
        description="Convert a memory timeline between formats: .json (Perfetto), .pickle (memory_viz), "
        ".html (self-contained page), .txt (report).",
    )
    parser.add_argument("input", help="a .json or .pickle written by tensorpager, or a PyTorch memory snapshot")
    parser.add_argument("-o", "--output", required=True, help="the file to write; its extension chooses the format")
    parser.add_argument("--top", type=int, default=20, help="rows in the largest-blocks tables (default 20)")
    args = parser.parse_args(argv)
    try:
        convert(args.input, args.output, args.top)
    except (OSError, ValueError, RuntimeError, pickle.UnpicklingError, json.JSONDecodeError) as e:
        print(f"tensorpager.viz: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The budget spellings table: each front door x each spelling -> bytes or an error.

Note [Budget spellings] (config/memory_budget.hpp) gives one meaning to each
spelling: a size is bytes, a bare ratio (or ``<r>peak``, or a Python float) is
a share of the first step's peak, ``<r>device`` a share of the device's
memory. A front door that cannot measure what a ratio is a share of refuses it.
The table below is that rule, door by door; one child interpreter runs every
cell on the CPU adapter (a simulated device of 1 GiB) and the test compares.

The parser exists once, in C++; the package reaches it through the
extension (``_C.parse_budget``).
"""

from __future__ import annotations

import json
import math

import pytest
from conftest import REPO, requires_ext, run_python

MiB, GiB = 1 << 20, 1 << 30
DEVICE = GiB  # sim_capacity of the child's simulated device

# --- what a cell may hold ---------------------------------------------------------


def B(n: int) -> tuple[str, float]:  # noqa: N802 - a table's shorthand
    """That many bytes, from the start."""
    return ("bytes", n)


def DEV(r: float) -> tuple[str, float]:  # noqa: N802
    """floor(r x the device's memory), from the start."""
    return ("bytes", math.floor(r * DEVICE))


def PEAK(r: float) -> tuple[str, float]:  # noqa: N802
    """No cap until the first step, then floor(r x that step's peak reserved bytes)."""
    return ("peak", r)


NONE = ("none", 0)
NA = ("n/a", 0)  # the door takes no such value (tp-sim takes text)


def E(fragment: str) -> tuple[str, str]:  # noqa: N802
    """Refused: a ValueError whose message holds fragment."""
    return ("error", fragment)


PEAK_ONLY = "needs manage:activations"  # the key without manage
NOT_NOW = "is a ratio of the first step's peak"  # set_budget
NO_DEVICE = "is a share of a device"  # tp-sim
TOO_BIG = "more than the 1.00 GiB"  # of the simulated device; tp-sim replays on none

DOORS = ("key", "key+manage", "set_budget", "budget", "tp-sim")

# spelling (as Python source)  key                      key+manage    set_budget     tp.budget     tp-sim --budget
TABLE = [
    ('"12MiB"',      B(12 * MiB),           B(12 * MiB),  B(12 * MiB),   B(12 * MiB),  B(12 * MiB)),
    ('"4096"',       B(4096),               B(4096),      B(4096),       B(4096),      B(4096)),
    ('"1.5GB"',      E(TOO_BIG),            E(TOO_BIG),   E(TOO_BIG),    E(TOO_BIG),   B(1_500_000_000)),
    ('"0.5"',        E(PEAK_ONLY),          PEAK(0.5),    E(NOT_NOW),    PEAK(0.5),    PEAK(0.5)),
    ('"0.5peak"',    E(PEAK_ONLY),          PEAK(0.5),    E(NOT_NOW),    PEAK(0.5),    PEAK(0.5)),
    ('" 0.25 PEAK "', E(PEAK_ONLY),         PEAK(0.25),   E(NOT_NOW),    PEAK(0.25),   PEAK(0.25)),
    ('"0.5device"',  DEV(0.5),              DEV(0.5),     DEV(0.5),      DEV(0.5),     E(NO_DEVICE)),
    ('"1.0device"',  DEV(1.0),              DEV(1.0),     DEV(1.0),      DEV(1.0),     E(NO_DEVICE)),
    ('"none"',       NONE,                  NONE,         NONE,          NONE,         NONE),
    ('"1"',          E("ambiguous"),        E("ambiguous"), E("ambiguous"), E("ambiguous"), E("ambiguous")),
    ('"0"',          E("ambiguous"),        E("ambiguous"), E("ambiguous"), E("ambiguous"), E("ambiguous")),
    ('"0GiB"',       E("0 bytes"),          E("0 bytes"), E("0 bytes"),   E("0 bytes"),  E("0 bytes")),
    ('"1.5"',        E("(0, 1]"),           E("(0, 1]"),  E("(0, 1]"),    E("(0, 1]"),   E("(0, 1]")),
    ('"1device"',    E("decimal point"),    E("decimal point"), E("decimal point"), E("decimal point"),
                                                                                                     E("decimal point")),
    ('"0.5 gigs"',   E("unknown unit"),     E("unknown unit"), E("unknown unit"), E("unknown unit"),
                                                                                                     E("unknown unit")),
    ("0.5",          E(PEAK_ONLY),          PEAK(0.5),    E(NOT_NOW),    PEAK(0.5),    NA),
    ("4096",         B(4096),               B(4096),      B(4096),       B(4096),      NA),
    ("None",         NONE,                  NONE,         NONE,          NONE,         NA),
]

CHILD = r"""
import json, torch
import tensorpager as tp
from tensorpager import _managed

MiB = 1 << 20
BASE = "device:cpu,sim_capacity:1GiB"
TRACE = __TRACE__


def step():
    before = tp.get_budget()
    x = torch.empty(64 * MiB, dtype=torch.uint8)
    del x
    peak = tp.stats()["reserved_bytes.all.peak"]
    tp.step()
    return {"before": before, "after": tp.get_budget(), "peak": peak}


def install(value, manage):
    extra = ",manage:activations" if manage else ""
    if isinstance(value, str):
        tp.install(BASE + extra + ",budget:" + value)
    else:
        tp.install(BASE + extra, budget=value)


def cell(door, value):
    if door == "tp-sim":
        status, out, err = tp._ext.load().sim_main([TRACE, "--budget", value])
        if status != 0:
            return {"error": err.splitlines()[0]}
        line = next(l for l in out.splitlines() if l.startswith("budget:"))
        peak = next((int(l.split(" of ")[1].split()[0]) for l in out.splitlines() if l.startswith("budget ratio:")),
                    None)
        budget = None if line.endswith("none") else int(line.rsplit("(", 1)[1].split()[0])
        return {"before": None if peak else budget, "after": budget, "peak": peak}
    try:
        if door == "key":
            install(value, manage=False)
            b = tp.get_budget()
            return {"before": b, "after": b, "peak": None}
        if door == "key+manage":
            install(value, manage=True)
            return step() if tp.get_budget() is None else {"before": tp.get_budget(), "after": tp.get_budget(),
                                                            "peak": None}
        tp.install(BASE)
        if door == "set_budget":
            tp.set_budget(value)
            b = tp.get_budget()
            return {"before": b, "after": b, "peak": None}
        with tp.budget(value):
            if tp.get_budget() is not None:
                return {"before": tp.get_budget(), "after": tp.get_budget(), "peak": None}
            return step()
    except ValueError as e:
        return {"error": str(e)}
    finally:
        _managed.stand_down()
        tp.uninstall()


cells = json.loads(__CELLS__)
print(json.dumps([cell(door, eval(source)) for source, door in cells]))
"""


def _expected_bytes(cell: tuple[str, object], got: dict) -> None:
    kind, value = cell
    if kind == "bytes":
        assert "error" not in got, got
        assert got["before"] == got["after"] == value, got
    elif kind == "peak":
        assert "error" not in got, got
        assert got["before"] is None, f"no cap before the first step: {got}"
        assert got["peak"] and got["after"] == math.floor(float(value) * got["peak"]), got  # type: ignore[arg-type]
    elif kind == "none":
        assert "error" not in got and got["after"] is None, got
    else:
        assert "error" in got, f"expected an error holding {value!r}, got {got}"
        assert value in got["error"], got["error"]


@requires_ext
def test_every_front_door_reads_every_spelling_alike() -> None:
    cells = [(row[0], door) for row in TABLE for door, cell in zip(DOORS, row[1:]) if cell != NA]
    trace = str(REPO / "bench" / "traces" / "lstm.trace")
    code = CHILD.replace("__TRACE__", repr(trace)).replace("__CELLS__", repr(json.dumps(cells)))
    out = run_python(code).stdout
    results = dict(zip(cells, json.loads(out.strip().splitlines()[-1])))
    failures = []
    for row in TABLE:
        for door, cell in zip(DOORS, row[1:]):
            if cell == NA:
                continue
            try:
                _expected_bytes(cell, results[(row[0], door)])
            except AssertionError as e:
                failures.append(f"{row[0]} at {door}: {e}")
    assert not failures, "\n".join(failures)

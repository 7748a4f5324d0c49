"""What a managed process prints, read by the zero-code tests (test_zero_code.py,
test_managed_process.py): the losses of zero_code_train.py, and the one line the runtime writes on
stderr at exit."""

from __future__ import annotations

import re

VAR = "PYTORCH_CUDA_ALLOC_CONF"
# Note [The exit line] in _managed.py: "budget" is None when there was none;
# "ratio" and "first" (the peak it was resolved on, measured without a budget) only
# for a ratio that took effect; "peak" is the peak under the budget (without
# one where there was none); "syncs" the host waits on the device; "partitioner" the
# activation_memory_budget compiled regions were given (Note [A partitioner budget for
# compiled regions] in _partitioner.py).
EXIT_LINE = re.compile(
    r"^tensorpager: manage:(?:activations|all): budget (?:none(?: \([^;]*\))?|.*? \((?P<budget>\d+) B\)"
    r"(?: = (?P<ratio>[\d.]+) x .*? \((?P<first>\d+) B\), the peak reserved measured without a budget)?);"
    r" peak reserved (?:under the budget|without a budget) .*? \((?P<peak>\d+) B\),"
    r" offloaded .*? \((?P<offloads>\d+) offloads\), recomputed .*? \((?P<recomputes>\d+) recomputes\),"
    r" stalled [\d.]+ ms, (?P<syncs>\d+) device syncs, (?P<steps>\d+) steps;"
    r"(?: compiled regions recompiled with torch's activation_memory_budget (?P<partitioner>[\d.]+), [^;]*;)?"
    r" (?P<where>.*)$", re.M)


def losses(stdout: str) -> list[str]:
    found = re.findall(r"^loss \d+ (\S+)$", stdout, re.M)
    assert found, stdout
    return found


def exit_line(stderr: str) -> re.Match[str]:
    lines = EXIT_LINE.findall(stderr)
    assert len(lines) == 1, f"expected one exit line on stderr:\n{stderr}"
    match = EXIT_LINE.search(stderr)
    assert match is not None
    return match

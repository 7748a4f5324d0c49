"""The trace-driven simulator from Python: ``python -m tensorpager.sim`` and the
``tp-sim`` console script run the same command line as the C++ ``tp-sim``
(``sim/cli.hpp``); ``simulate()`` returns one run's report.

Example::

    python -m tensorpager.sim step.trace --budget 0.5 --policy hybrid
    python -m tensorpager.sim bench/traces/dtr/resnet32-bs56.log --sweep --plot out.svg

Traces come from ``tp.record_trace`` (docs/trace_format.md) or DTR's logs.
The simulator runs in the C++ extension (``tensorpager._C``) with the GIL
released; it needs no GPU.
"""

from __future__ import annotations

import os
import sys

from tensorpager import _budget_value, _keys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["main", "simulate"]


def _ext():  # noqa: ANN202
    from tensorpager import _ext as ext

    module = ext.load()
    if not hasattr(module, "sim_main"):
        raise ImportError(
            "tensorpager._C was built without the simulator (sim needs nlohmann-json at build "
            "time: install nlohmann-json3-dev and rebuild)"
        )
    return module


def simulate(
    trace: str | os.PathLike[str],
    budget: int | float | str | None = None,
    *,
    policy: str = _keys.DEFAULTS["policy"],
    bandwidth_gbps: float = 50.0,
    latency_us: float = 5.0,
    compute_scale: float = 1.0,
    repeat: int = 2,
    expandable_segments: bool | None = None,
    lend: bool | None = None,
) -> dict[str, Any]:
    """Replays ``trace`` under ``budget`` with ``policy`` and returns the report.

    Args:
        budget: a float in (0, 1] (or ``"0.5"``, ``"0.5peak"``) is a ratio of
            the unconstrained replay's peak reserved bytes; an int or a size
            string is bytes; None replays unconstrained (Note [Budget
            spellings]; a share of a device is refused: a trace has none).
        policy: ``lru``, ``dtr``, ``capuchin`` or ``hybrid``.
        bandwidth_gbps, latency_us: the copy model (defaults: PCIe 5.0 x16, pinned).
        compute_scale: multiplies the recorded operator times.
        repeat: replays of the trace; the last is measured.
        expandable_segments, lend: as tp-sim's flags of the same names
            (docs/trace_format.md); None: tp-sim's defaults, which are the
            runtime's (expandable segments, lending as ``tp.budget()``:
            Note [The simulator's defaults] in ``sim/simulator.hpp``, read
            from the extension). DTR's simulator ran with both False.

    Returns:
        A dict: fits, failure, budget, policy, peak_reserved, peak_allocated,
        fragmentation, step_ns, compute_ns, recompute_ns, stall_ns, slowdown,
        offloaded_bytes, prefetched_bytes, evictions, drops, recomputes,
        policy_wall_ns, unconstrained_peak_reserved, unconstrained_step_ns.

    Raises:
        ValueError: a bad budget or policy. RuntimeError: a malformed trace.
    """
    kwargs: dict[str, Any] = {}
    # None leaves the extension's default, sim_options{}'s (one place).
    if expandable_segments is not None:
        kwargs["expandable_segments"] = bool(expandable_segments)
    if lend is not None:
        kwargs["lend"] = bool(lend)
    try:
        checked = _budget_value.check(budget, "tensorpager.sim.simulate")
    except TypeError as e:
        raise ValueError(str(e)) from None
    if checked is not None:
        kind, amount = checked
        if kind == "device":
            raise ValueError(f"tensorpager.sim.simulate({budget!r}): a share of a device, and a trace is replayed on"
                             f" none; give a ratio of the unconstrained peak ({amount}) or a size")
        kwargs["ratio" if kind == "peak" else "budget"] = amount
    return dict(
        _ext().sim_run(
            os.fspath(trace),
            policy=policy,
            bandwidth_gbps=float(bandwidth_gbps),
            latency_us=float(latency_us),
            compute_scale=float(compute_scale),
            repeat=int(repeat),
            **kwargs,
        )
    )


def main(argv: list[str] | None = None) -> int:
    """Runs tp-sim's command line; returns its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        status, out, err = _ext().sim_main(args)
    except ImportError as e:
        sys.stderr.write(f"tp-sim: {e}\n")
        return 2
    sys.stdout.write(out)
    sys.stderr.write(err)
    return int(status)


if __name__ == "__main__":
    sys.exit(main())

"""What recording a timeline costs through torch, on the CPU adapter.

    PYTHONPATH=python TENSORPAGER_EXT_DIR=build/hooks python3 bench/torch_overhead_bench.py

tp_profiler_bench measures the caching allocator's own fast path, where an
allocate + free pair costs ~140 ns and its two records weigh most. This
script measures what a PyTorch program pays: ``torch.empty(128)`` and its
free (one allocator pair plus torch's own work), and a small convolution.
As in tp_profiler_bench (Note [Paired batches] in bench/profiler_bench.cpp),
recording is switched on and off between short batches, 101 rounds, and the
ratio is the median of each round's on/off ratio, on the calling thread's CPU
clock. Each "on" batch records into a fresh log, started (and warmed with a
few untimed operations) outside the timed region.
"""

from __future__ import annotations

import statistics
import time


def main() -> None:
    import torch

    import tensorpager as tp

    torch.set_num_threads(1)  # one thread: the figures are per operation, not per machine load
    tp.install(device="cpu")
    ext = tp._ext.load()

    def empty_pairs(n: int) -> float:
        t0 = time.thread_time_ns()
        for _ in range(n):
            t = torch.empty(128)
            del t
        return (time.thread_time_ns() - t0) / n

    x, w = torch.randn(8, 16, 32, 32), torch.randn(16, 16, 3, 3)

    def convolutions(n: int) -> float:
        t0 = time.thread_time_ns()
        for _ in range(n):
            y = torch.nn.functional.conv2d(x, w, padding=1)
            del y
        return (time.thread_time_ns() - t0) / n

    cases = {"torch.empty(128) + free": (empty_pairs, 2000), "conv2d 8x16x32x32": (convolutions, 20)}
    for f, n in cases.values():
        f(n)  # warm up
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(101):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            for name, (f, n) in cases.items():
                if mode == "on":
                    ext.timeline_start(0)
                else:
                    ext.timeline_stop()
                f(10)  # untimed, both sides: an "on" log takes its first chunk here
                times.setdefault((name, mode), []).append(f(n))
    ext.timeline_stop()
    print(f"{'case':<26} {'off ns':>10} {'on ns':>10} {'on/off':>8}")
    for name in cases:
        off, on = times[(name, "off")], times[(name, "on")]
        paired = statistics.median(b / a for a, b in zip(off, on))
        print(f"{name:<26} {statistics.median(off):>10.0f} {statistics.median(on):>10.0f} {paired:>8.3f}")


if __name__ == "__main__":
    main()

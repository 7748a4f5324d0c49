"""What recording a timeline costs through torch, on the CPU adapter.

    PYTHONPATH=python TENSORPAGER_EXT_DIR=build/hooks python3 bench/torch_overhead_bench.py

tp_profiler_bench measures the caching allocator's own fast path, where an
allocate + free pair costs ~150 ns and three recorded events weigh heavily.
This script measures what a PyTorch program pays: ``torch.empty(128)`` and its
free (one allocator pair plus torch's own work), and a small convolution, with
recording off and on in alternating batches, median of 15, on the calling
thread's CPU clock. It prints a table and the ratios.
"""

from __future__ import annotations

import statistics
import time


def main() -> None:
    import torch

    import tensorpager as tp

    torch.set_num_threads(1)  # one thread: the figures are per operation, not per machine load
    tp.install(device="cpu")
    ext = tp._load_ext()

    def empty_pairs(n: int = 20000) -> float:
        t0 = time.thread_time_ns()
        for _ in range(n):
            t = torch.empty(128)
            del t
        return (time.thread_time_ns() - t0) / n

    x, w = torch.randn(8, 16, 32, 32), torch.randn(16, 16, 3, 3)

    def convolutions(n: int = 200) -> float:
        t0 = time.thread_time_ns()
        for _ in range(n):
            y = torch.nn.functional.conv2d(x, w, padding=1)
            del y
        return (time.thread_time_ns() - t0) / n

    cases = {"torch.empty(128) + free": empty_pairs, "conv2d 8x16x32x32": convolutions}
    for f in cases.values():
        f()  # warm up
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(15):
        for mode in ("off", "on"):
            if mode == "on":
                ext.timeline_start(0)
            else:
                ext.timeline_stop()
            for name, f in cases.items():
                times.setdefault((name, mode), []).append(f())
    ext.timeline_stop()
    print(f"{'case':<26} {'off ns':>10} {'on ns':>10} {'on/off':>8}")
    for name in cases:
        off = statistics.median(times[(name, "off")])
        on = statistics.median(times[(name, "on")])
        print(f"{name:<26} {off:>10.0f} {on:>10.0f} {on / off:>8.3f}")


if __name__ == "__main__":
    main()

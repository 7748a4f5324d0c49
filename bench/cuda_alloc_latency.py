"""Allocator latency through torch on a GPU: tensorpager against PyTorch's own.

    PYTHONPATH=python TENSORPAGER_EXT_DIR=build/hooks python3 bench/cuda_alloc_latency.py [--json OUT.json]

What a PyTorch program pays per ``torch.empty(n, device="cuda")`` and its
free, for a few sizes, with each allocator. A process can have only one CUDA
allocator, so each is measured in its own child process (tensorpager's child
calls ``tensorpager.install(device="cuda")`` before its first CUDA tensor);
the children alternate (PyTorch, tensorpager, PyTorch, ...) so that a drift of
the machine shows in both, and the figure per allocator is the median over
its children of each child's median over rounds. Every pair reuses a cached
block (the loop frees before it allocates again), so this is the fast path:
host-side bookkeeping, no device call. The ratio is tensorpager / PyTorch;
above 1 tensorpager is slower.

Needs a CUDA device; without one it says so and exits 0 (scripts/gpu_check.sh
does not call it then).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SIZES = (512, 64 << 10, 4 << 20, 64 << 20)
ROUNDS = 21
PAIRS = 2000


def child(backend: str) -> None:
    import torch

    if backend == "tensorpager":
        import tensorpager as tp

        tp.install(device="cuda")
    torch.cuda.init()
    result = {"backend": backend, "ns_per_pair": {}}
    for n in SIZES:
        for _ in range(200):  # warm: the segment is cached after the first
            t = torch.empty(n, dtype=torch.uint8, device="cuda")
            del t
        rounds = []
        for _ in range(ROUNDS):
            t0 = time.perf_counter_ns()
            for _ in range(PAIRS):
                t = torch.empty(n, dtype=torch.uint8, device="cuda")
                del t
            rounds.append((time.perf_counter_ns() - t0) / PAIRS)
        result["ns_per_pair"][str(n)] = statistics.median(rounds)
    if backend == "tensorpager":
        import tensorpager as tp

        result["installed"] = tp.is_installed() and tp.device_kind() == "cuda"
        result["served_by_tensorpager"] = tp.stats()["num_device_alloc"] > 0
    print(json.dumps(result))


def run_child(backend: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF",
                                                            "TENSORPAGER_CONF")}
    env["TENSORPAGER_DISABLE"] = "1"  # the start-up hook, if installed, installs nothing by itself
    done = subprocess.run([sys.executable, __file__, "--child", backend], env=env, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"the {backend} child failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def size_name(n: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=("pytorch", "tensorpager"), help=argparse.SUPPRESS)
    parser.add_argument("--children", type=int, default=3, help="children per allocator (default 3)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return

    import torch

    if torch.cuda.device_count() == 0:
        print("cuda_alloc_latency: no CUDA device; skipped")
        return
    runs: dict[str, list[dict]] = {"pytorch": [], "tensorpager": []}
    for _ in range(args.children):
        for backend in runs:
            runs[backend].append(run_child(backend))
    if not all(r["installed"] and r["served_by_tensorpager"] for r in runs["tensorpager"]):
        raise SystemExit(f"tensorpager's children did not allocate through tensorpager: {runs['tensorpager']}")
    rows = []
    for n in SIZES:
        ns = {b: statistics.median(r["ns_per_pair"][str(n)] for r in runs[b]) for b in runs}
        rows.append({"bytes": n, "pytorch_ns": ns["pytorch"], "tensorpager_ns": ns["tensorpager"],
                     "ratio": ns["tensorpager"] / ns["pytorch"]})
    print(f"torch.empty(n, device='cuda') + free, ns per pair (median; {args.children} children per allocator, "
          f"{ROUNDS} rounds of {PAIRS})")
    print("| size | PyTorch (ns) | tensorpager (ns) | ratio |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {size_name(r['bytes'])} | {r['pytorch_ns']:.0f} | {r['tensorpager_ns']:.0f} | {r['ratio']:.2f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(0), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

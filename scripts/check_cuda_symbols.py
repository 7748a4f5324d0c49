#!/usr/bin/env python3
"""Fails when a tensorpager binary links CUDA itself (Note [Driver API only]
in device/cuda/driver_api.hpp).

tensorpager loads the CUDA driver at run time and uses PyTorch's CUDA runtime
through libc10_cuda, so no binary it builds may

  - record libcuda.so or libcudart.so as NEEDED (readelf -d), or
  - define or reference a CUDA runtime or driver function (cudaMalloc,
    cuMemAlloc_v2, the static runtime's __cudart* internals: nm, the static
    and the dynamic symbol table).

A static archive (libtp_device_cuda.a) has no NEEDED entries; its symbols are
checked. A C++ name (mangled, _Z...) that merely mentions CUDA is fine, and so
is a weak undefined reference (nm kind w or v), which neither links nor loads
anything (Note [CUDAAllocator's inline getMemoryInfo] in hooks/cuda_adapter.cpp).

It also reads, with --links FILE, what CMake links each tensorpager target
with (tests/CMakeLists.txt writes it), and fails on a CUDA runtime or driver
library there, linked or not used: a static runtime that nothing calls leaves
no trace in the binaries, but it is one call away from a second runtime.

Usage: python3 scripts/check_cuda_symbols.py [--links FILE] BINARY...    (exit 1 on a finding)
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[(libcuda\.so[^\]]*|libcudart\.so[^\]]*)\]")
# C names of the runtime (cudaX), the driver (cuX, cuX_v2) and the static
# runtime's internals.
CUDA_SYMBOL = re.compile(r"^(cuda[A-Z]\w*|cu[A-Z]\w*|__cudart\w*|__cuda[A-Z]\w*)(@.*)?$")
WEAK_UNDEFINED = ("w", "v")
CUDA_LIBRARY = re.compile(r"(CUDA::cudart\w*|CUDA::cuda_driver|libcudart\w*|libcuda\.so\S*|\bcudart(_static)?\b)")


def run(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    # nm says "no symbols" for a stripped table; that is not a finding.
    return done.stdout


def symbols(path: Path) -> set[tuple[str, str]]:
    """(kind, name) of every symbol nm lists, static and dynamic tables."""
    found = set()
    tables = [run("nm", "--no-sort", str(path))]
    if path.suffix != ".a":
        tables.append(run("nm", "--no-sort", "-D", str(path)))
    for table in tables:
        for line in table.splitlines():
            parts = line.split()
            if len(parts) >= 2 and len(parts[-2]) == 1:
                found.add((parts[-2], parts[-1]))
    return found


def check(path: Path) -> list[str]:
    if not path.is_file():
        return [f"{path}: no such file (build it first)"]
    problems = []
    if path.suffix != ".a":
        for lib in NEEDED.findall(run("readelf", "-d", str(path))):
            problems.append(f"{path.name}: NEEDED {lib}")
    for kind, name in sorted(symbols(path)):
        if CUDA_SYMBOL.match(name) and kind not in WEAK_UNDEFINED:
            what = "references" if kind == "U" else "defines"
            problems.append(f"{path.name}: {what} CUDA symbol {name} ({kind})")
    return problems


def check_links(path: Path) -> list[str]:
    """Lines "target: item;item;..." naming a CUDA library."""
    problems = []
    for line in path.read_text().splitlines():
        target, _, items = line.partition(":")
        for item in items.split(";"):
            if CUDA_LIBRARY.search(item):
                problems.append(f"{target.strip()}: CMake links {item.strip()}")
    return problems


def main() -> int:
    args = sys.argv[1:]
    problems = []
    if len(args) >= 2 and args[0] == "--links":
        problems += check_links(Path(args[1]))
        args = args[2:]
    if not args:
        print(__doc__)
        return 2
    for arg in args:
        problems += check(Path(arg))
    for p in problems[:40]:
        print(p)
    if len(problems) > 40:
        print(f"... and {len(problems) - 40} more")
    names = ", ".join(Path(a).name for a in args)
    if problems:
        print(f"check_cuda_symbols: {len(problems)} finding(s) in {names}: link no CUDA library, call the "
              f"driver through device/cuda's table (Note [Driver API only])")
        return 1
    print(f"check_cuda_symbols: no CUDA library linked and no CUDA symbol in {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

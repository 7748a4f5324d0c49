#!/usr/bin/env python3
"""Fails when an #include points to a higher layer (DESIGN.md, "Layers").

Each folder is a layer and a CMake target; a layer includes only itself and
the layers listed for it below. torch (torch/, ATen/, c10/, pybind11/) is
included only in hooks/; CUDA's headers only in device/cuda/. Tests, benches
and examples may include the layer they test and anything below it.

Usage: python3 scripts/check_layers.py [ROOT]    (exit 1 on a violation)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# layer -> the layers it may include (besides itself), bottom up.
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "device": {"core"},
    "device/cuda": {"device", "core"},
    "allocator": {"device", "core"},
    "runtime": {"allocator", "device", "core"},
    "profiler": {"runtime", "allocator", "device", "core"},
    "config": {"runtime", "core"},  # runtime/policy_kind.hpp only: the policy names
    "sim": {"config", "runtime", "allocator", "device", "core"},
    "hooks": {"sim", "config", "profiler", "runtime", "allocator", "device/cuda", "device", "core"},
}
# Folders that are not layers: what they may include.
OUTSIDE: dict[str, set[str]] = {
    "tests": set(ALLOWED) | {"tests"},
    "bench": set(ALLOWED) | {"bench"},
    "examples": set(ALLOWED) | {"examples"},
}
TORCH = re.compile(r'#\s*include\s*[<"](torch|ATen|c10|pybind11)/')
CUDA = re.compile(r'#\s*include\s*[<"](cuda|cuda_runtime|cuda_runtime_api|cudaTypedefs|driver_types)\.h[>"]')
PROJECT = re.compile(r'#\s*include\s*"([a-z_]+(?:/cuda)?)/')
FMT = re.compile(r'#\s*include\s*[<"](fmt/[^>"]+)')
INCLUDE = re.compile(r'#\s*include\s*"([^"]+)"')
SOURCES = (".hpp", ".cpp", ".h", ".cu")


def layer_of(path: Path) -> str | None:
    parts = path.parts
    if len(parts) > 1 and "/".join(parts[:2]) in ALLOWED:
        return "/".join(parts[:2])
    return parts[0] if parts[0] in ALLOWED or parts[0] in OUTSIDE else None


def include_layer(target: str) -> str:
    return target if target in ALLOWED else target.split("/")[0]


def check(root: Path) -> list[str]:
    problems = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.suffix not in SOURCES or rel.parts[0] in ("build", ".git") or rel.parts[0].startswith("build"):
            continue
        layer = layer_of(rel)
        if layer is None:
            continue
        allowed = ALLOWED.get(layer, OUTSIDE.get(layer, set())) | {layer}
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            where = f"{rel}:{n}: {line.strip()}"
            if TORCH.search(line) and layer not in ("hooks", "tests", "bench", "examples"):
                problems.append(f"{where}\n    torch is included only in hooks/ (layer {layer})")
            if CUDA.search(line) and layer != "device/cuda" and not str(rel).startswith("tests/device/"):
                problems.append(f"{where}\n    CUDA headers are included only in device/cuda/ (layer {layer})")
            m = PROJECT.search(line)
            if m and include_layer(m.group(1)) not in allowed and m.group(1) in (*ALLOWED, *OUTSIDE):
                problems.append(f"{where}\n    layer {layer} may include only {', '.join(sorted(allowed))}")
    return problems + torch_facing_fmt(root)


def fmt_chain(root: Path, header: str, seen: set[str]) -> list[str] | None:
    """How `header` (a path from the root) reaches an fmt header, or None."""
    path = root / header
    if header in seen or not path.is_file():
        return None
    seen.add(header)
    text = path.read_text(errors="replace")
    if m := FMT.search(text):
        return [header, m.group(1)]
    for target in INCLUDE.findall(text):
        if chain := fmt_chain(root, target, seen):
            return [header, *chain]
    return None


def torch_facing_fmt(root: Path) -> list[str]:
    problems = []
    for path in sorted((root / "hooks").rglob("*")):
        if path.suffix not in SOURCES or not TORCH.search(path.read_text(errors="replace")):
            continue
        rel = str(path.relative_to(root))
        if chain := fmt_chain(root, rel, set()):
            problems.append(f"{rel}: includes torch and reaches fmt: {' -> '.join(chain)}\n"
                            "    Note [fmt in torch-facing code] in hooks/CMakeLists.txt: format below hooks/")
    return problems


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
    problems = check(root)
    for p in problems:
        print(p)
    print(f"check_layers: {len(problems)} problem(s): an include points up, or torch-facing code reaches fmt"
          if problems else "check_layers: every include points down; no torch-facing code reaches fmt")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

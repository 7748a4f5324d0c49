#!/usr/bin/env python3
"""Fails when an import in the Python package points up its layers or closes a circle.

The Python side of scripts/check_layers.py (issue 31). python/tensorpager is
layered, bottom up:

- boot: configuration text and PyTorch's keys; no torch, no extension. The
  start-up hook (_startup, imported at interpreter start by tensorpager.pth)
  must load nothing else before torch is imported.
- extension: _ext, the one door to the C++ extension tensorpager._C.
- allocator: the allocator's face (install, statistics, budgets on the
  allocator, timelines, operator traces, the simulator's front end).
- runtime: the torch-side budget runtime (block, managed process, tracker,
  lender, segment reruns).
- techniques: what a program opts into by name (compression, AdamA,
  micro-batching, split operators); the runtime does not know them.
- entry: the package's face (__init__, __main__) and the import hook that
  installs when torch is imported; they may reach every layer.

An import counts wherever it is written (at module level or inside a
function, since a lazy import is still a dependency), except under
``if TYPE_CHECKING:``. Checked: no import points to a higher layer; no circle
(an import within a layer that leads back to its importer); only _ext
imports tensorpager._C; what the start-up hook imports when the interpreter
starts (with the package's __init__, which Python runs first) is boot only.
On the package before issue 31 it found 13 problems.

Usage: python3 scripts/check_py_layers.py [ROOT]    (exit 1 on a violation)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = "tensorpager"
LAYERS: dict[str, list[str]] = {  # bottom up
    "boot": ["_keys", "_key_appliers", "_conf", "_torch_alloc_conf"],
    "extension": ["_ext"],
    "allocator": ["_module_hooks", "_budget_value", "_install", "_graphs", "timeline", "trace", "viz", "sim"],
    "runtime": ["_steps", "_compiled", "_partitioner", "_rerun", "_producers", "_open_lender", "_lend", "_tracker", "_runtime",
                "_exit_report", "_managed"],
    "techniques": ["techniques", "techniques.compress", "techniques.compress_spec", "techniques.compress_pack",
                   "techniques.optim", "techniques.microbatch", "techniques.split", "techniques.split_chain",
                   "techniques.split_loss"],
    "entry": ["__init__", "__main__", "_startup", "_import_hook"],
}
START_UP = "_startup"

def rank() -> dict[str, int]:
    return {m: i for i, mods in enumerate(LAYERS.values()) for m in mods}


def layer_name(module: str) -> str:
    return next(name for name, mods in LAYERS.items() if module in mods)


class Imports(ast.NodeVisitor):
    """The package modules a file imports: (module, line, at_module_level)."""

    def __init__(self) -> None:
        self.found: list[tuple[str, int, bool]] = []
        self.depth = 0

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def _nested(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _nested

    def _add(self, name: str, line: int) -> None:
        self.found.append((name, line, self.depth == 0))

    # What is recorded is the dotted name below the package, as written
    # (``techniques.compress``, ``_install.stats``); resolve() finds the module.
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            parts = alias.name.split(".")
            if parts[0] == PACKAGE and len(parts) > 1:
                self._add(".".join(parts[1:]), node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level > 0:  # relative (the package writes none): taken from the package's root
            parts = [p for p in module.split(".") if p]
            names = [".".join(parts)] if parts else [a.name for a in node.names]
        elif module == PACKAGE:
            names = [a.name for a in node.names]
        elif module.startswith(PACKAGE + "."):
            below = module[len(PACKAGE) + 1:]
            names = [f"{below}.{a.name}" for a in node.names]
        else:
            return
        for name in names:
            self._add(name, node.lineno)


def module_name(package_dir: Path, path: Path) -> str:
    """``techniques/compress.py`` -> ``techniques.compress``; a folder's ``__init__.py`` is the folder."""
    parts = list(path.relative_to(package_dir).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def resolve(dotted: str, modules: set[str] | dict[str, object]) -> str:
    """The module a dotted name below the package is: its longest prefix that is a module
    (``_install.stats`` -> ``_install``); else its first part (``_C``)."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in modules:
            return ".".join(parts[:n])
    return parts[0]


def imports_of(package_dir: Path) -> dict[str, list[tuple[str, int, bool]]]:
    result = {}
    for path in sorted(package_dir.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        v = Imports()
        v.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        result[module_name(package_dir, path)] = v.found
    return {m: [(resolve(t, result), line, top) for t, line, top in found] for m, found in result.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each circle once, as the path that closes it (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def path_of(package_dir: Path, module: str) -> str:
    """The file of a module, for messages: ``techniques.compress`` -> ``techniques/compress.py``."""
    folder = module.replace(".", "/")
    return f"{folder}/__init__.py" if (package_dir / folder / "__init__.py").is_file() else f"{folder}.py"


def check(root: Path) -> list[str]:
    package_dir = root / "python" / PACKAGE
    found = imports_of(package_dir)
    ranks = rank()
    problems: list[str] = []
    unlisted = sorted(set(found) - set(ranks))
    if unlisted:
        problems.append(f"modules in no layer (add them to LAYERS): {', '.join(unlisted)}")
    edges: dict[str, set[str]] = {}
    for module, imports in found.items():
        for target, line, _ in imports:
            if target == "_C" and module != "_ext":
                problems.append(f"{path_of(package_dir, module)}:{line}: imports tensorpager._C; only _ext.py does (_ext.load())")
                continue
            if target not in ranks or module not in ranks or target == module:
                continue
            edges.setdefault(module, set()).add(target)
            if ranks[target] > ranks[module]:
                problems.append(f"{path_of(package_dir, module)}:{line}: imports {target} ({layer_name(target)}), above its layer"
                                f" ({layer_name(module)})")
    down_or_level = {m: {t for t in ts if ranks[t] <= ranks[m]} for m, ts in edges.items()}
    for circle in circles(down_or_level):
        problems.append(f"import circle: {' <-> '.join(circle)}")
    # What the start-up hook loads at interpreter start: the package's __init__
    # first, then _startup, each with what they import at module level.
    at_start, todo = set(), ["__init__", START_UP]
    while todo:
        m = todo.pop()
        if m in at_start or m not in found:
            continue
        at_start.add(m)
        todo += [t for t, _, top in found[m] if top]
    beyond = {m for m in at_start if m in ranks and layer_name(m) not in ("boot", "entry")}
    for m in sorted(beyond):
        problems.append(f"the start-up hook loads {m} ({layer_name(m)}) at interpreter start; only boot modules may be")
    return problems


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
    problems = check(root)
    for p in problems:
        print(p)
    print(f"check_py_layers: {len(problems)} problem(s)" if problems
          else "check_py_layers: every import points down, no circle, the start-up hook loads boot only")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

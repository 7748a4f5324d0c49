"""The autograd corner-case matrix under ``tp.budget`` (test_autograd_cases.py).

Run in a child process: ``python autograd_cases.py swap|recompute [CASE...]``.
Each case is a small training computation with one of autograd's corner
cases (retain_graph, double backward, checkpoint, in-place changes, shared
weights, ...). The child runs every case unmanaged, then under every policy
inside ``tp.budget`` with a byte budget well below the case's unmanaged peak,
and prints one JSON line per run: the results as float hex (bit-exact), or
the error autograd raised, and what the runtime did. ``recompute`` caps the
pinned host pool at one byte, so that every eviction is a drop. The cases
are in autograd_corner_cases.py.
"""

from __future__ import annotations

import contextlib
import gc
import json
import sys
from typing import Any

import numpy as np
import torch
from autograd_corner_cases import CASES, RAISING  # noqa: F401 - RAISING: test_autograd_cases.py reads it here

POLICIES = ("lru", "dtr", "capuchin", "hybrid")
# The budget is what was allocated before a case, plus a share of what the
# case adds to it at its unmanaged peak (allocated bytes: its reserved peak
# would overstate it, as blocks of 1-10 MiB come from segments of 20 MiB
# while no budget forces smaller ones), and never below what is reserved
# when the budget starts. Each policy
# tries the shares in order until one fits: out of memory under a tight
# budget is a fair outcome (what the runtime cannot evict: tensors the case
# itself holds, a module's own forward that recompute cannot split; and the
# caching allocator's segments), a wrong value never is. The test asks that
# every run that finishes agrees with the unmanaged one, that the last share
# fits, and that some policy evicted under a share below 1.
SHARES = (0.7, 0.85, 1.0, 1.3, 2.0)


def run_case(name: str, scope: Any) -> dict:
    torch.manual_seed(0)
    np.random.seed(0)
    try:
        with scope:
            return {"ok": CASES[name]()}
    except torch.OutOfMemoryError as e:
        return {"oom": str(e)}
    except RuntimeError as e:
        return {"error": str(e).split("\n")[0][:300]}
    finally:
        # The graph of a backward that raised stays alive until the next
        # backward runs (PyTorch's engine): let it go before measuring.
        torch.ones(1, requires_grad=True).sum().backward()


def main() -> None:
    import tensorpager as tp

    torch.set_num_threads(1)
    mode = sys.argv[1]
    names = sys.argv[2:] or list(CASES)
    tp.install(device="cpu", **({"host_budget": "1B"} if mode == "recompute" else {}))
    for name in names:
        gc.collect()  # what a failed case left in reference cycles
        tp.empty_cache()
        base = tp.stats()["allocated_bytes.all.current"]
        tp.reset_peak_stats()
        ref = run_case(name, contextlib.nullcontext())
        peak = tp.stats()["allocated_bytes.all.peak"]
        print(json.dumps({"case": name, "policy": None, "result": ref, "peak": peak, "base": base}), flush=True)
        for policy in POLICIES:
            for share in SHARES:
                gc.collect()
                tp.empty_cache()
                budget = max(base + int(share * (peak - base)), tp.stats()["reserved_bytes.all.current"])
                result = run_case(name, tp.budget(budget, policy=policy))
                if "oom" not in result or share == SHARES[-1]:
                    break
            runtime = {k.rsplit(".", 1)[1]: v for k, v in tp.stats().items() if k.startswith("tensorpager.runtime.")}
            print(json.dumps({"case": name, "policy": policy, "share": share, "budget": budget, "result": result,
                              "runtime": runtime}), flush=True)


if __name__ == "__main__":
    main()

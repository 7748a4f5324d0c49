"""Benchmark of training under a budget (issue 4): PyTorch alone,
``torch.utils.checkpoint`` per block, ``torch.autograd.graph.save_on_cpu``
and tensorpager with each policy, at budget ratios 1.0, 0.7, 0.5 and 0.3 of
the first step's peak. Prints a markdown table and, with --out, writes it.

    PYTHONPATH=python TENSORPAGER_EXT_DIR=build/hooks python3 bench/budget_bench.py \\
        --out bench/results/budget_cpu.md

Every case runs in its own interpreter with tensorpager installed (the CPU
adapter without a GPU, the CUDA adapter with one), so peaks are tensorpager's
``reserved_bytes.all.peak`` over the timed steps and cases share no allocator
state. Time is the median of --steps steps after --warmup steps; slowdown is
against PyTorch alone in the same run. On the CPU the models are small (a
smoke run: the swaps are host-to-host copies and compute is slow, so the
ratios say little about a GPU); --device cuda --scale 4 gives GPU-sized ones
(ResNet-50 needs torchvision).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from datetime import date

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1 << 20
POLICIES = ("lru", "dtr", "capuchin", "hybrid")
RATIOS = (1.0, 0.7, 0.5, 0.3)

CHILD = r"""
import json, statistics, sys, time
import torch, torch.nn as nn
import tensorpager as tp

args = json.loads(sys.argv[1])
device = args["device"]
tp.install(device=device)
torch.manual_seed(0)
scale = args["scale"]

def sync():
    if device == "cuda":
        torch.cuda.synchronize()

def resnet():
    import torchvision
    m = torchvision.models.resnet50(num_classes=10) if scale > 1 else torchvision.models.resnet18(num_classes=10)
    blocks = [m.layer1, m.layer2, m.layer3, m.layer4]
    x = torch.randn(8 * scale, 3, 64 * scale, 64 * scale, device=device)
    return m.to(device), blocks, x

def transformer():
    d = 128 * scale
    layers = [nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.1, batch_first=True) for _ in range(6)]
    m = nn.Sequential(*layers, nn.Linear(d, 10))
    x = torch.randn(8, 128 * scale, d, device=device)
    return m.to(device), layers, x

model, blocks, x = {"resnet": resnet, "transformer": transformer}[args["model"]]()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
mode = args["mode"]

if mode == "checkpoint":
    import torch.utils.checkpoint as cp
    for b in blocks:
        fwd = b.forward
        b.forward = (lambda f: (lambda *a: cp.checkpoint(f, *a, use_reentrant=False)))(fwd)

def one_step():
    opt.zero_grad(set_to_none=True)
    if mode == "save_on_cpu":
        with torch.autograd.graph.save_on_cpu(pin_memory=(device == "cuda")):
            loss = model(x).float().square().mean()
    else:
        loss = model(x).float().square().mean()
    loss.backward()
    opt.step()

scope = None
if mode.startswith("tp:"):
    scope = tp.budget(args["ratio"], policy=mode[3:])
    scope.__enter__()
try:
    times = []
    for i in range(args["warmup"] + args["steps"]):
        if i == args["warmup"]:
            tp.reset_peak_stats()
        sync(); t0 = time.perf_counter()
        one_step()
        sync(); times.append(time.perf_counter() - t0)
    s = tp.stats()
    out = {"median_s": statistics.median(times[args["warmup"]:]), "peak": s["reserved_bytes.all.peak"],
           "budget": tp.get_budget()}
finally:
    if scope is not None:
        scope.__exit__(None, None, None)
s = tp.stats()
out.update({k.rsplit(".", 1)[1]: v for k, v in s.items() if k.startswith("tensorpager.runtime.")})
print("RESULT " + json.dumps(out))
"""


def run_case(model: str, mode: str, ratio: float | None, a: argparse.Namespace) -> dict:
    spec = {"model": model, "mode": mode, "ratio": ratio, "device": a.device, "scale": a.scale,
            "steps": a.steps, "warmup": a.warmup}
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", os.path.join(ROOT, "python"))
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], capture_output=True, text=True,
                          env=env, timeout=3600)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
    return {"error": "OOM" if "OutOfMemoryError" in proc.stderr else tail[:80]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2, help="steps before timing (the first sets a ratio budget)")
    ap.add_argument("--models", default="resnet,transformer")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    lines = [f"# Training under a budget ({a.device}, scale {a.scale})", "",
             f"{date.today()}, {platform.node() or 'machine'} ({os.cpu_count()} CPUs), "
             f"torch {__import__('torch').__version__}; median of {a.steps} steps after {a.warmup}; "
             "slowdown against PyTorch alone in the same run; peak = reserved bytes over the timed steps; "
             "moved = offloaded + prefetched bytes; policy = share of step time in the policy.", ""]
    for model in a.models.split(","):
        base = run_case(model, "pytorch", None, a)
        lines += [f"## {model}", "",
                  "| case | ratio | step time | slowdown | peak | peak / PyTorch | moved | recomputes | stall | policy |",
                  "|---|---|---|---|---|---|---|---|---|---|"]

        def row(name: str, ratio: float | None, r: dict) -> str:
            if "error" in r:
                return f"| {name} | {ratio if ratio else '-'} | {r['error']} | | | | | | | |"
            moved = (r.get("offloaded_bytes", 0) + r.get("prefetched_bytes", 0)) / MiB
            policy = r.get("policy_ns", 0) / 1e9 / max(r["median_s"] * (a.steps + a.warmup), 1e-12)
            return (f"| {name} | {ratio if ratio else '-'} | {r['median_s'] * 1e3:.1f} ms | "
                    f"{r['median_s'] / base['median_s']:.2f} | {r['peak'] / MiB:.1f} MiB | "
                    f"{r['peak'] / base['peak']:.2f} | {moved:.0f} MiB | {r.get('recomputes', 0)} | "
                    f"{r.get('stall_ns', 0) / 1e6:.1f} ms | {policy:.2%} |")

        lines.append(row("PyTorch alone", None, base))
        lines.append(row("torch.utils.checkpoint per block", None, run_case(model, "checkpoint", None, a)))
        lines.append(row("save_on_cpu", None, run_case(model, "save_on_cpu", None, a)))
        for policy in POLICIES:
            for ratio in RATIOS:
                lines.append(row(f"tensorpager {policy}", ratio, run_case(model, f"tp:{policy}", ratio, a)))
                print(lines[-1], flush=True)
        lines.append("")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()

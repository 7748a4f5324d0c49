"""Benchmark of the training techniques of issue 7: AdamA, compressed
activations, micro-batching. Prints a markdown table and, with --out, writes it.

    PYTHONPATH=python TENSORPAGER_EXT_DIR=build/hooks python3 bench/techniques_bench.py \
        --out bench/results/techniques_cpu.md

Every case runs in its own interpreter with tensorpager installed (the CPU
adapter without a GPU, the CUDA adapter with one), so "peak" is tensorpager's
``allocated_bytes.all.peak`` over one training step after a warm-up step, and
cases do not share allocator state. Time is the median of --steps steps.

Sections (the models are small on the CPU, so the run takes a few minutes on
two cores; --device cuda with --scale 4 gives GPU-sized figures):
  1. gradient accumulation (Adam) vs AdamA on a GPT-2-style decoder, M = 4;
  2. exact vs pool2 / bf16 / fp8 saved activations on ResNet-50, with the
     relative L2 error of the whole gradient against the exact one;
  3. micro-batching n = 1, 2, 4, 8 on the same decoder.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from datetime import date

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1 << 20


# --- models (built inside the child) ------------------------------------------------


def gpt(scale: int):  # noqa: ANN201
    """A GPT-2-style decoder: token and position embeddings, pre-LN blocks of
    causal self-attention and a 4x GELU MLP, a tied LM head."""
    import torch
    from torch import nn

    d, layers, heads, vocab, seq = 128 * scale, 4, 4, 4096, 128

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).unbind(2)
            a = nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.ln = nn.LayerNorm(d)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            return self.ln(self.blocks(x)) @ self.tok.weight.t()

    return GPT(), vocab, seq


def resnet50(num_classes: int = 10):  # noqa: ANN201
    """ResNet-50 (He et al. 2016, torchvision's layout: bottlenecks [3, 4, 6, 3],
    in-place ReLU), written out because torchvision is not a dependency."""
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, inp: int, planes: int, stride: int) -> None:
            super().__init__()
            out = planes * 4
            self.body = nn.Sequential(
                nn.Conv2d(inp, planes, 1, bias=False), nn.BatchNorm2d(planes), nn.ReLU(inplace=True),
                nn.Conv2d(planes, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes), nn.ReLU(inplace=True),
                nn.Conv2d(planes, out, 1, bias=False), nn.BatchNorm2d(out))
            self.down = (nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))
                         if stride != 1 or inp != out else nn.Identity())
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):  # noqa: ANN001, ANN202
            return self.relu(self.body(x) + self.down(x))

    layers, inp = [], 64
    for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(inp, planes, stride if i == 0 else 1))
            inp = planes * 4
    return nn.Sequential(
        nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1),
        *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(inp, num_classes))


# --- one case, in a child interpreter ---------------------------------------------------


def run_case(case: dict) -> dict:
    import torch

    import tensorpager as tp

    device = case["device"]
    tp.install(device=device)
    torch.manual_seed(0)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def measure(step) -> tuple[int, float, int]:  # noqa: ANN001
        step()  # warm-up: optimizer state and caches exist afterwards
        sync()
        tp.reset_peak_stats()
        base = tp.stats()["allocated_bytes.all.current"]
        times = []
        for _ in range(case["steps"]):
            t0 = time.perf_counter()
            step()
            sync()
            times.append(time.perf_counter() - t0)
        return tp.stats()["allocated_bytes.all.peak"], statistics.median(times), base

    if case["kind"] in ("adama", "accum", "microbatch"):
        model, vocab, seq = gpt(case["scale"])
        model.to(device)
        batch, m = 16, case.get("n", 4)
        idx = torch.randint(0, vocab, (batch, seq + 1), device=device)
        x, y = idx[:, :-1], idx[:, 1:]

        def loss_of(mb):  # noqa: ANN001, ANN202
            return torch.nn.functional.cross_entropy(model(mb[0]).flatten(0, 1), mb[1].flatten())

        if case["kind"] == "adama":
            opt = tp.optim.AdamA(model.parameters(), lr=1e-4, micro_batches=m)
        else:
            opt = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=False)
        peak, t, base = measure(lambda: tp.microbatch(loss_of, (x, y), m, optimizer=opt))
        return {"peak": peak, "time": t, "base": base}

    model = resnet50().to(device)
    size = 64 * case["scale"]
    x = torch.nn.functional.interpolate(torch.randn(16, 3, size // 8, size // 8), size=(size, size),
                                        mode="bilinear", align_corners=False).to(device)
    y = torch.randint(0, 10, (16,), device=device)
    def step(spec: str = case["spec"]) -> None:
        model.zero_grad(set_to_none=True)
        if spec == "exact":
            loss = torch.nn.functional.cross_entropy(model(x), y)
        else:
            with tp.compress(spec, model=model):
                loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()

    error = 0.0
    if case["spec"] != "exact":  # the gradient error of one step from the same weights and batch
        step("exact")
        exact = torch.cat([p.grad.flatten() for p in model.parameters()])
        step()
        approx = torch.cat([p.grad.flatten() for p in model.parameters()])
        error = float((approx - exact).norm() / exact.norm())
        del exact, approx
    peak, t, base = measure(step)
    return {"peak": peak, "time": t, "base": base, "error": error}


# --- the parent: run every case, print the table -----------------------------------------


def child(case: dict) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(ROOT, "python"), env.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, __file__, "--case", json.dumps(case)], env=env, capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"case {case} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def mib(n: float) -> str:
    return f"{n / MiB:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--scale", type=int, default=1, help="model width (GPT) and image size (ResNet) multiplier")
    ap.add_argument("--steps", type=int, default=5)
    # One thread by default: on a shared two-core machine, every parallel
    # region of a second thread can wait milliseconds for a busy core, which
    # swamps the figures (a 1M-element copy measured 0.6 ms on one thread,
    # 7.6 ms on two).
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads in each case (CPU)")
    ap.add_argument("--machine", default=f"{os.cpu_count()}-core {platform.machine()}, no GPU")
    ap.add_argument("--date", default=date.today().isoformat(), help="the date written in the header")
    ap.add_argument("--out", help="also write the table to this markdown file")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps(run_case(json.loads(args.case))))
        return

    common = {"device": args.device, "scale": args.scale, "steps": args.steps}
    lines = []
    accum = child({**common, "kind": "accum"})
    adama = child({**common, "kind": "adama"})
    lines += ["### AdamA vs gradient accumulation (GPT-2-style decoder, batch 16 x 128 tokens, M = 4)", "",
              "| optimizer | peak MiB | peak vs accumulation | step s | step vs accumulation |", "|---|---|---|---|---|"]
    for name, r in (("Adam + gradient accumulation", accum), ("AdamA", adama)):
        lines.append(f"| {name} | {mib(r['peak'])} | {r['peak'] / accum['peak']:.3f} | {r['time']:.3f} | "
                     f"{r['time'] / accum['time']:.3f} |")

    lines += ["", "### Compressed activations (ResNet-50, batch 16, "
              f"{64 * args.scale}x{64 * args.scale} images, forward + backward)", "",
              "| saved activations | peak MiB | peak vs exact | step s | step vs exact | gradient rel. error |",
              "|---|---|---|---|---|---|"]
    exact = None
    for spec in ("exact", "Conv2d=pool2", "Conv2d=pool2;ReLU=bf16;BatchNorm2d=bf16", "bf16", "fp8",
                 "*=fp8;BatchNorm2d=bf16"):
        r = child({**common, "kind": "compress", "spec": spec})
        exact = exact or r
        lines.append(f"| `{spec}` | {mib(r['peak'])} | {r['peak'] / exact['peak']:.3f} | {r['time']:.3f} | "
                     f"{r['time'] / exact['time']:.3f} | {r['error']:.4f} |")

    lines += ["", "### Micro-batching (GPT-2-style decoder, batch 16, Adam)", "",
              "| n | peak MiB | peak over weights, grads, state (MiB) | vs n = 1 | step s |", "|---|---|---|---|---|"]
    first = None
    for n in (1, 2, 4, 8):
        r = child({**common, "kind": "microbatch", "n": n})
        over = r["peak"] - r["base"]
        first = first or over
        lines.append(f"| {n} | {mib(r['peak'])} | {mib(over)} | {over / first:.3f} | {r['time']:.3f} |")

    import torch

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    header = [f"# Training techniques: {args.device.upper()} figures", "",
              f"- date: {args.date}", f"- commit: {commit.strip() or 'unknown'}",
              f"- machine: {args.machine}", f"- torch {torch.__version__}, {args.threads} intra-op threads, "
              f"median of {args.steps} steps after one warm-up, scale {args.scale}",
              f"- command: `python3 bench/techniques_bench.py {shlex.join(sys.argv[1:])}`", "",
              "Peak is tensorpager's `allocated_bytes.all.peak` over the timed steps (the "
              f"{'CPU adapter' if args.device == 'cpu' else 'CUDA adapter'}); every row runs in its own process.", ""]
    text = "\n".join(header + lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()

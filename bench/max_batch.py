"""The largest batch that trains under a fixed memory cap (issue 14): a
GPT-2-style decoder and a torchvision ResNet-18, each with

  * the allocator alone: what PyTorch would fit (tensorpager's allocator with
    the budget key only, plain segments as PyTorch's default; on CUDA,
    PyTorch's own allocator under set_per_process_memory_fraction), and the
    same with expandable segments;
  * ``torch.utils.checkpoint`` per block (non-reentrant);
  * ``torch.autograd.graph.save_on_cpu``;
  * ``torch.compile`` with ``torch._functorch.config.activation_memory_budget``;
  * tensorpager's runtime with each policy (lru, dtr, capuchin, hybrid),
    ``tp.budget(cap)``; and the same with the model's largest operators
    split: ``tp.split_channels(model)`` (ResNet-18's stem, in channel chunks)
    and ``tp.split_cross_entropy`` (the GPT's head and loss, in row chunks).

A batch "fits" when 3 training steps finish under the cap. Every trial runs in
its own interpreter; the largest batch is found by doubling, then bisection,
with at most --probes trials per row. Per-sample time is the median step time
after the first step, divided by the batch, relative to the allocator-alone
row's at its own largest batch.

    PYTHONPATH=python TENSORPAGER_EXT_DIR=build/hooks python3 bench/max_batch.py \\
        --out bench/results/max_batch_cpu.md
    python3 bench/max_batch.py --device cuda --cap 8GiB        # on a GPU

Note [Capping the peers on the CPU]
On the CPU the cap is tensorpager's CPU adapter (device:cpu), a simulated
device whose budget caps every CPU tensor's memory. The peers run under the
same adapter with the budget key only: it caps without evicting, so the
allocator-alone row is what PyTorch would fit. save_on_cpu cannot move
anything out of the cap there (its host is the capped CPU), so on the CPU its
row emulates it: packed tensors are copied into numpy memory, which is outside
the cap, and copied back on unpack, which is what save_on_cpu does with a
GPU's tensors. tensorpager's own swaps go to its pinned host pool, also
outside the cap. On CUDA the peers run PyTorch's allocator under
set_per_process_memory_fraction and torch's own save_on_cpu.
"""
# Over 300 lines because the GPU check runs it standalone: models, rows, probes and page in one file.

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import date

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import tensorpager as tp  # noqa: E402  (tp.parse_size: the project's size grammar, from the extension)
MiB = 1 << 20
POLICIES = ("lru", "dtr", "capuchin", "hybrid")
# tp:POLICY+split: tensorpager's operator splits too: tp.split_channels(model) on ResNet-18's stem,
# tp.split_cross_entropy for the GPT's tied head and loss.
METHODS = ("allocator", "allocator+es", "checkpoint", "save_on_cpu", "compile") + tuple(f"tp:{p}" for p in POLICIES) \
    + tuple(f"tp:{p}+split" for p in POLICIES)
LABELS = {
    "allocator": "allocator alone (what PyTorch fits)",
    "allocator+es": "allocator alone, expandable segments",
    "checkpoint": "torch.utils.checkpoint per block",
    "save_on_cpu": "save_on_cpu",
    "compile": "torch.compile, activation_memory_budget",
    **{f"tp:{p}": f"tensorpager {p}" for p in POLICIES},
    **{f"tp:{p}+split": f"tensorpager {p}, split" for p in POLICIES},
}

CHILD = r"""
import json, statistics, sys, time
args = json.loads(sys.argv[1])
device, method, batch, cap = args["device"], args["method"], args["batch"], args["cap"]
import torch, torch.nn as nn, torch.nn.functional as F
tp = None
if device == "cpu" or method.startswith("tp:"):
    import tensorpager as tp
    conf = {"device": device, "expandable_segments": method.startswith("tp:") or method == "allocator+es"}
    if not method.startswith("tp:"):
        conf["budget"] = cap  # Note [Capping the peers on the CPU]: caps, evicts nothing
    tp.install(**conf)
elif device == "cuda":
    torch.cuda.set_per_process_memory_fraction(cap / torch.cuda.get_device_properties(0).total_memory)
torch.manual_seed(0)
torch.set_num_threads(args["threads"])


class Block(nn.Module):
    # A GPT-2 block: pre-norm causal self-attention and MLP, dropout 0.1.
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads, self.drop = heads, nn.Dropout(0.1)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.drop(self.proj(a))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class Gpt(nn.Module):
    def __init__(self, vocab, seq, d, layers, heads):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = True  # False: forward returns the head's input (tp.split_cross_entropy applies the head)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        x = self.ln(x)
        return x @ self.tok.weight.t() if self.head else x  # tied head


g = args["gpt"]
if args["model"] == "gpt":
    model = Gpt(g["vocab"], g["seq"], g["d"], g["layers"], g["heads"]).to(device)
    blocks = list(model.blocks)
    x = torch.randint(0, g["vocab"], (batch, g["seq"]), device=device)
    y = torch.randint(0, g["vocab"], (batch, g["seq"]), device=device)
    loss_of = lambda out: F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if method.endswith("+split"):  # the same loss, the logits never whole (tp.split_cross_entropy)
        model.head = False
        loss_of = lambda h: tp.split_cross_entropy(h, model.tok.weight, y)
else:
    import torchvision
    model = torchvision.models.resnet18(num_classes=10).to(device)
    blocks = [b for layer in (model.layer1, model.layer2, model.layer3, model.layer4) for b in layer]
    x = torch.randn(batch, 3, args["image"], args["image"], device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    loss_of = lambda out: F.cross_entropy(out, y)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if method.endswith("+split"):
        tp.split_channels(model)

if method == "checkpoint":
    import torch.utils.checkpoint as cp
    for b in blocks:
        b.forward = (lambda f: (lambda *a: cp.checkpoint(f, *a, use_reentrant=False)))(b.forward)
run = model
if method == "compile":
    import torch._functorch.config as fc
    fc.activation_memory_budget = args["compile_budget"]
    run = torch.compile(model)


def saving():
    if method != "save_on_cpu":
        import contextlib
        return contextlib.nullcontext()
    if device == "cuda":
        return torch.autograd.graph.save_on_cpu(pin_memory=True)
    import numpy as np  # Note [Capping the peers on the CPU]
    def pack(t):
        return (t.dtype, t.detach().numpy().copy())
    def unpack(p):
        return torch.from_numpy(p[1]).clone()
    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


def step():
    opt.zero_grad(set_to_none=True)
    with saving():
        loss = loss_of(run(x))
    loss.backward()
    opt.step()


scope = tp.budget(cap, policy=method[3:].removesuffix("+split")) if method.startswith("tp:") else None
out = {}
try:
    if scope is not None:
        scope.__enter__()
    times = []
    for i in range(args["steps"]):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    out["step_s"] = statistics.median(times[1:])
    out["first_s"] = times[0]
    if tp is not None:
        s = tp.stats()
        out["peak"] = s["reserved_bytes.all.peak"]
        out.update({k.rsplit(".", 1)[1]: v for k, v in s.items() if k.startswith("tensorpager.runtime.")})
    else:
        out["peak"] = torch.cuda.max_memory_reserved()
except torch.OutOfMemoryError as e:
    out = {"oom": str(e).splitlines()[0][:300]}
finally:
    if scope is not None:
        scope.__exit__(None, None, None)
print("RESULT " + json.dumps(out), flush=True)
"""


def trial(model: str, method: str, batch: int, a: argparse.Namespace) -> dict:
    spec = {"model": model, "method": method, "batch": batch, "cap": a.cap_bytes, "device": a.device,
            "steps": 3, "threads": a.threads, "image": a.image, "compile_budget": a.compile_budget,
            "gpt": {"vocab": a.vocab, "seq": a.seq, "d": a.d_model, "layers": a.layers, "heads": a.heads}}
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", os.path.join(ROOT, "python"))
    if a.device == "cuda" and not method.startswith("tp:"):
        env["TENSORPAGER_DISABLE"] = "1"
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], capture_output=True, text=True,
                              env=env, timeout=a.trial_timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {a.trial_timeout} s", "wall_s": a.trial_timeout}
    wall = time.perf_counter() - t0
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            r["wall_s"] = wall
            return r
    if "OutOfMemoryError" in proc.stderr or "out of memory" in proc.stderr:
        return {"oom": (proc.stderr.strip().splitlines() or ["?"])[-1][:300], "wall_s": wall}
    return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1][:200], "wall_s": wall}


def largest_batch(model: str, method: str, start: int, a: argparse.Namespace, log: list[str]) -> tuple[int, dict]:
    """Doubling from `start`, then bisection; at most a.probes trials. Returns (batch, its result); 0 if none fit."""
    ok_b, ok_r, bad_b = 0, {}, None
    b = max(1, start)
    for _ in range(a.probes):
        r = trial(model, method, b, a)
        fits = "step_s" in r
        log.append(f"| {model} | {LABELS[method]} | {b} | {'yes' if fits else 'no'} | "
                   f"{r['step_s'] * 1e3:.0f} ms |" if fits else
                   f"| {model} | {LABELS[method]} | {b} | no | {r.get('oom') or r.get('error', '?')} |")
        print(log[-1], flush=True)
        if fits:
            ok_b, ok_r = b, r
        else:
            bad_b = b
            if "error" in r and "oom" not in r:
                break  # not a memory failure: more probes will not help
        if bad_b is None:
            b = ok_b * 2
        elif ok_b == 0:
            b = max(1, bad_b // 2)
            if b == bad_b:
                break
        else:
            if bad_b - ok_b <= max(1, ok_b // 16):
                break
            b = (ok_b + bad_b) // 2
    return ok_b, ok_r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--cap", default=None, help="memory cap, e.g. 384MiB (default: per model, see --gpt-cap/--resnet-cap)")
    ap.add_argument("--gpt-cap", default="320MiB")
    ap.add_argument("--resnet-cap", default="384MiB")
    ap.add_argument("--models", default="gpt,resnet")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--probes", type=int, default=5, help="trials per row, at most")
    ap.add_argument("--start", type=int, default=4, help="the allocator-alone row's first batch")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--image", type=int, default=96, help="ResNet image height and width")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--compile-budget", type=float, default=0.5,
                    help="torch._functorch.config.activation_memory_budget for the compile row")
    ap.add_argument("--trial-timeout", type=int, default=900)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    import torch

    methods = a.methods.split(",")
    lines = [f"# Largest batch under a fixed cap ({a.device})", "",
             f"{date.today()}, {platform.machine()} {os.cpu_count()} CPUs, torch {torch.__version__}, "
             f"{a.threads} threads. `bench/max_batch.py"
             + (f" --cap {a.cap}" if a.cap else f" --gpt-cap {a.gpt_cap} --resnet-cap {a.resnet_cap}")
             + f" --probes {a.probes}`. A batch fits when 3 training steps finish under the cap; at most "
             f"{a.probes} trials per row (doubling, then bisection to within 1/16). Time: median step time of "
             "steps 2 and 3 (the first compiles, measures or warms up) per sample; x baseline: against the "
             "allocator-alone row. Each trial is its own process. See Note [Capping the peers on the CPU] in "
             "bench/max_batch.py for what the cap is on the CPU.", "",
             f"Models: GPT-2-style decoder ({a.layers} layers, d_model {a.d_model}, {a.heads} heads, "
             f"{a.seq} tokens, vocabulary {a.vocab}, AdamW); torchvision ResNet-18 ({a.image}x{a.image}, "
             "10 classes, plain SGD). torch.compile: activation_memory_budget "
             f"{a.compile_budget}.", ""]
    probe_log = ["| model | row | batch | fits | step time or failure |", "|---|---|---|---|---|"]
    started = time.perf_counter()
    for model in a.models.split(","):
        cap = tp.parse_size(a.cap or (a.gpt_cap if model == "gpt" else a.resnet_cap))
        a.cap_bytes = cap
        lines += [f"## {'GPT-2-style decoder' if model == 'gpt' else 'ResNet-18'}, cap {cap / MiB:.0f} MiB", "",
                  "| row | largest batch | x baseline | per-sample time | x baseline | peak reserved | "
                  "offloaded | recomputes |", "|---|---|---|---|---|---|---|---|"]
        base_b, base_r = largest_batch(model, "allocator", a.start, a, probe_log)
        base_ps = base_r["step_s"] / base_b if base_b else None
        for m in methods:
            # tensorpager's rows start at twice the baseline's batch (it fits what the allocator fits).
            start = max(1, base_b * (2 if m.startswith("tp:") else 1))
            b, r = (base_b, base_r) if m == "allocator" else largest_batch(model, m, start, a, probe_log)
            if b == 0:
                lines.append(f"| {LABELS[m]} | none fits | | | | | | |")
                continue
            ps = r["step_s"] / b
            lines.append(
                f"| {LABELS[m]} | {b} | {b / base_b:.2f} | {ps * 1e3:.1f} ms | "
                f"{ps / base_ps:.2f} | {r.get('peak', 0) / MiB:.0f} MiB | "
                f"{r.get('offloaded_bytes', 0) / MiB:.0f} MiB | {r.get('recomputes', 0)} |")
            print(lines[-1], flush=True)
        lines.append("")
    lines += [f"Total time {time.perf_counter() - started:.0f} s.", "", "<details><summary>Every trial</summary>", "",
              *probe_log, "", "</details>", ""]
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()

"""What management costs when nothing has to move (issue 33 item 5), on the CPU adapter.

    PYTHONPATH=python TENSORPAGER_EXT_DIR=build/hooks python3 bench/hook_cost_bench.py

Two models, each trained under ``tp.budget`` at ten times its peak, where
nothing is ever evicted, with lend=False (what ``manage:activations`` does):
the worst case, many small saved tensors and a segment for every two (an MLP
of 48 layers of width 64, batch 16: each Linear saves its input, each ReLU its
output, 8 KiB or less each, and each layer is a segment of its own); and a
GPT-style decoder whose segments are its 6 blocks, as a transformer's are.
Rounds alternate a managed and an unmanaged batch of steps in the same
process, in alternating order (41 rounds for the MLP, 15 for the GPT; each
managed batch in a budget block of its own, after one untimed step); the
ratio is the median of each round's managed/unmanaged ratio, on the calling
thread's CPU clock. The cost per saved tensor is the managed step's
extra time over the saved tensors a step packs (each packed once and unpacked
once): pack, unpack and the runtime's bookkeeping together.

The floor row runs the same rounds with a no-op pair of global module hooks
and no-op saved-tensor hooks, all in Python: what PyTorch's hook machinery
costs any Python implementation before it does anything (about half of it the
saved-tensor hooks: PyTorch wraps each saved tensor for the call and keeps
what the hook returns).

The cyclic GC lines give Python's garbage collector's time per step, mean
over every timed step of the mode: a full collection of everything torch
loaded takes tens of milliseconds, comes every hundred steps or so when each
step leaves more objects alive than the collector's threshold, and the
medians leave those rounds out.

The last line says what that predicts for a GPU step of the same model: the
hooks run on the host as here, while the step's own work, about 5 microseconds
per kernel launch for tensors this small, is no longer 20-50 times the CPU's.
A step whose kernels outlast their launches hides the host's time behind the
device's, so the prediction is the worst case for the model.
"""

from __future__ import annotations

import gc
import statistics
import time

LAYERS, WIDTH, BATCH = 48, 64, 16
ROUNDS, STEPS = 41, 5
GPT_ROUNDS = 15  # its steps are ten times longer
LAUNCH_US = 5.0  # a small kernel's launch on a GPU, host side


def main() -> None:
    import torch
    from torch import nn

    import tensorpager as tp

    torch.set_num_threads(1)  # per operation, not per machine load
    tp.install(device="cpu")
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(LAYERS):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    mlp = nn.Sequential(*layers)
    x = torch.randn(BATCH, WIDTH)

    def mlp_step() -> None:
        mlp.zero_grad(set_to_none=True)
        mlp(x).square().mean().backward()

    measure(f"{LAYERS} x (Linear {WIDTH}x{WIDTH} + ReLU), batch {BATCH}", mlp_step, ROUNDS)
    print()
    gpt, tokens, vocab = gpt_model()

    def gpt_step() -> None:
        gpt.zero_grad(set_to_none=True)
        logits = gpt(tokens)
        nn.functional.cross_entropy(logits.view(-1, vocab), tokens.view(-1)).backward()

    measure("GPT-style, 6 blocks of width 128 (attention, MLP, layer norms), 4 x 64 tokens, tied head", gpt_step,
            GPT_ROUNDS)


def gpt_model() -> tuple:
    """A small GPT-style decoder, its blocks the segments (Note [Segments] in tensorpager/_tracker.py):
    about 26 saved tensors and 8 modules each, as a transformer block has."""
    import torch
    from torch import nn

    d, t, b, v = 128, 64, 4, 256

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.act, self.out = nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            q, k, w = self.qkv(self.ln1(h)).view(b, t, 3, 4, d // 4).transpose(1, 3).unbind(2)
            a = nn.functional.scaled_dot_product_attention(q, k, w, is_causal=True)
            h = h + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return h + self.out(self.act(self.fc(self.ln2(h))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(v, d)
            self.blocks = nn.ModuleList(Block() for _ in range(6))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, v, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            h = self.emb(ids)
            for block in self.blocks:
                h = block(h)
            return self.head(self.ln(h))

    torch.manual_seed(0)
    return GPT(), torch.randint(0, v, (b, t)), v


def measure(name: str, step, rounds: int) -> None:  # noqa: ANN001
    """Prints the table for one model, whose training step is step()."""
    import torch

    import tensorpager as tp

    saved = 0

    def count(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(count, lambda t: t):
        step()
    kernels = 0

    class Count(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            nonlocal kernels
            kernels += 1
            return func(*args, **(kwargs or {}))

    with Count():
        step()

    tp.reset_peak_stats()
    step()
    peak = int(tp.stats()["allocated_bytes.all.peak"])

    # Python's cyclic GC, timed apart: a full collection (tens of milliseconds with torch loaded) comes
    # every hundred steps or so where a step leaves many objects alive, and the medians below leave
    # such rare rounds out.
    gc_ns = {"on": 0, "off": 0, "floor": 0}
    gc_steps = {"on": 0, "off": 0, "floor": 0}
    gc_full = {"on": 0, "off": 0, "floor": 0}
    timing: list = [None, 0]  # the mode whose steps are timed now, and when the collection began

    def on_gc(phase: str, info: dict) -> None:
        if timing[0] is None:
            return
        if phase == "start":
            timing[1] = time.thread_time_ns()
        else:
            gc_ns[timing[0]] += time.thread_time_ns() - timing[1]
            gc_full[timing[0]] += info["generation"] == 2

    gc.callbacks.append(on_gc)

    def steps(n: int, mode: str = "off") -> float:
        timing[0] = mode
        gc_steps[mode] += n
        t0 = time.thread_time_ns()
        for _ in range(n):
            step()
        ns = (time.thread_time_ns() - t0) / n
        timing[0] = None
        return ns

    from torch.nn.modules import module as nn_module

    def noop_hooks() -> float:
        pre = nn_module.register_module_forward_pre_hook(lambda m, a: None)
        post = nn_module.register_module_forward_hook(lambda m, a, k, o: None, with_kwargs=True, always_call=True)
        try:
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                step()
                return steps(STEPS, "floor")
        finally:
            pre.remove()
            post.remove()

    managed, plain, floor, evictions = [], [], [], 0
    for r in range(rounds):
        for mode in ("on", "off", "floor") if r % 2 == 0 else ("floor", "off", "on"):
            if mode == "on":
                with tp.budget(10 * peak, lend=False):  # bytes: nothing to measure first
                    step()  # untimed: the session's first storages open its runtime
                    managed.append(steps(STEPS, "on"))
                    evictions += int(tp.stats().get("tensorpager.runtime.evictions", 0))
            elif mode == "floor":
                floor.append(noop_hooks())
            else:
                step()
                plain.append(steps(STEPS))
    ratio = statistics.median(m / p for m, p in zip(managed, plain))
    extra_ns = statistics.median(m - p for m, p in zip(managed, plain))
    per_tensor_us = extra_ns / saved / 1e3
    floor_us = statistics.median(f - p for f, p in zip(floor, plain)) / saved / 1e3
    print(f"model: {name}; {saved} saved tensors and "
          f"{kernels} operators per step; peak {peak / 2**10:.0f} KiB; budget 10x the peak; "
          f"{evictions} evictions")
    print(f"{'':<28} {'median':>12}")
    print(f"{'unmanaged step':<28} {statistics.median(plain) / 1e3:>9.1f} us")
    print(f"{'managed step':<28} {statistics.median(managed) / 1e3:>9.1f} us")
    print(f"{'managed / unmanaged':<28} {ratio:>12.3f}")
    print(f"{'per saved tensor':<28} {per_tensor_us:>9.2f} us  (pack + unpack + bookkeeping)")
    print(f"{'floor per saved tensor':<28} {floor_us:>9.2f} us  (no-op Python module and saved-tensor hooks; "
          f"ratio {statistics.median(f / p for f, p in zip(floor, plain)):.3f})")
    for mode, name in (("on", "managed"), ("off", "unmanaged")):
        print(f"{'cyclic GC, ' + name:<28} {gc_ns[mode] / max(gc_steps[mode], 1) / 1e3:>9.1f} us a step (mean over "
              f"{gc_steps[mode]} steps, {gc_full[mode]} full collections)")
    gc.callbacks.remove(on_gc)
    gpu_step_us = kernels * LAUNCH_US
    print(f"GPU prediction: a launch-bound step of {kernels} operators takes about {gpu_step_us:.0f} us; "
          f"{saved} saved tensors at {per_tensor_us:.2f} us add {saved * per_tensor_us:.0f} us "
          f"({100 * saved * per_tensor_us / gpu_step_us:.0f}% of it)")


if __name__ == "__main__":
    main()

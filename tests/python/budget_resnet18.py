"""A torchvision ResNet-18 (batch 32, 160x160, plain SGD) trained on the CPU
adapter unmanaged, then under tp.budget(RATIO) with each POLICY; run in a
child process by test_budget_resnet18.py: ``python budget_resnet18.py
[host=SIZE] [batch=N] [size=N] RATIO:POLICY[:nolend][:split]...`` (nolend:
``tp.budget(lend=False)``; split: ``tp.split_channels(model)`` first, and the
budget is RATIO of the unmanaged run's peak, in bytes, since the split model's
own first step peaks lower). Prints one JSON line per run: whether losses, weights and
BatchNorm buffers are bit-identical to the unmanaged run, what the runtime
did, and, for a budget refused at the first step boundary (Note [Budget
floor]), the step at which it was refused and the message."""

from __future__ import annotations

import contextlib
import json
import sys

import torch
import torchvision

STEPS = 3
BATCH, SIZE = 32, 160


def train(ratio: float | None, policy: str | None, lend: bool = True, split_of: int | None = None) -> dict:
    import tensorpager as tp

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    if split_of is not None:
        tp.split_channels(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.manual_seed(1)
    x, y = torch.randn(BATCH, 3, SIZE, SIZE), torch.randint(0, 10, (BATCH,))
    limit = ratio if split_of is None else int(ratio * split_of)
    scope = tp.budget(limit, policy=policy, lend=lend) if ratio is not None else contextlib.nullcontext()
    losses, budget, peak = [], None, 0
    with scope:
        if ratio is None:
            tp.reset_peak_stats()  # as a ratio budget's scope does: first_peak is then the step's, as it measures it
        for i in range(STEPS):
            if i == 1 and ratio is not None:
                try:
                    tp.step()  # the first boundary: a ratio becomes bytes, or is refused
                except torch.OutOfMemoryError as e:
                    return {"policy": policy, "ratio": ratio, "lend": lend, "refused_at_step": i, "message": str(e)}
                tp.reset_peak_stats()
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item().hex())
            if i == 0:
                floor = tp.stats().get("tensorpager.runtime.floor_bytes", 0)
                first_peak = tp.stats()["reserved_bytes.all.peak"]
            budget = tp.get_budget()
            peak = max(peak, tp.stats()["reserved_bytes.all.peak"]) if i > 0 else peak
    stats = tp.stats()
    return {"policy": policy, "ratio": ratio, "lend": lend, "losses": losses, "budget": budget, "peak_after_first": peak,
            "first_peak": first_peak,
            # numpy copies: outside the capped allocator, so the reference
            # weights do not count against the next run's budget.
            "floor": floor, "state": {k: v.numpy().copy() for k, v in model.state_dict().items()},
            "runtime": {k.rsplit(".", 1)[1]: v for k, v in stats.items() if k.startswith("tensorpager.runtime.")}}


def main() -> None:
    import tensorpager as tp

    global BATCH, SIZE
    # Leading KEY=VALUE arguments: host=SIZE caps the pinned host pool (host=1B:
    # every eviction is a drop), batch=N and size=N the input.
    options = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
    BATCH, SIZE = int(options.get("batch", BATCH)), int(options.get("size", SIZE))
    tp.install(device="cpu", **({"host_budget": options["host"]} if "host" in options else {}))
    ref = train(None, None)
    print(json.dumps({"policy": None, "losses": ref["losses"], "first_peak": ref["first_peak"]}), flush=True)
    for run in (a for a in sys.argv[1:] if "=" not in a):
        ratio, policy, *rest = run.split(":")
        r = train(float(ratio), policy, lend="nolend" not in rest, split_of=ref["first_peak"] if "split" in rest else None)
        r["split"] = "split" in rest
        state = r.pop("state", None)
        if state is not None:
            same = {k: v.tobytes() == state[k].tobytes() for k, v in ref["state"].items()}
            r["weights_identical"] = all(v for k, v in same.items() if "running" not in k and "num_batches" not in k)
            r["batchnorm_identical"] = all(v for k, v in same.items() if "running" in k or "num_batches" in k)
            r["losses_identical"] = r["losses"] == ref["losses"]
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()

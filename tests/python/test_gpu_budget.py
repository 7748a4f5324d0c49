"""The budget runtime on a CUDA device (issue 29), where nothing of it had run:
``tp.budget`` with every policy, by swap and by forced recompute (a 1 MiB pinned
pool), with the lending of parameters, gradients and optimizer state that a
budget does by default; ``manage:activations`` and ``manage:all`` with no code
change; a forward region on a side stream kept busy by ``torch.cuda._sleep``, so
that an offload ordered on the wrong stream shows as a wrong value, not as luck;
backward on autograd's device thread (every CUDA backward runs there). Losses,
gradients, buffers and optimizer state must be bit-identical to the unmanaged run.

Each case is a child started as a user would, with ``PYTORCH_CUDA_ALLOC_CONF``,
in deterministic mode, so that two unmanaged runs agree bit for bit (the child
checks that first: a difference there is the GPU's, not tensorpager's). Each
child prints every run before the test asserts, so one failure shows them all.
Skipped where torch.cuda.is_available() is False.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from conftest import clean_env, requires_ext, run_python

pytestmark = [pytest.mark.gpu, requires_ext]

HERE = os.path.dirname(os.path.abspath(__file__))
VAR = "PYTORCH_CUDA_ALLOC_CONF"
# cuBLAS and cuDNN pick deterministic kernels; embedding's backward sorts
# instead of adding atomically. warn_only: an operator with no deterministic
# version (adaptive_avg_pool2d's backward, in every ResNet) warns instead of
# raising; the unmanaged control run says whether the GPU was deterministic.
# The smaller of cuBLAS's two deterministic workspaces (128 KiB): it is
# allocated through tensorpager and stays, so it is part of every budget.
DETERMINISTIC_ENV = {"CUBLAS_WORKSPACE_CONFIG": ":16:8"}
DETERMINISTIC = """
import torch
torch.backends.cudnn.benchmark = False
torch.backends.cudnn.deterministic = True
torch.use_deterministic_algorithms(True, warn_only=True)
"""


def _rows(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _run(code: str, conf: str) -> list[dict]:
    proc = run_python(DETERMINISTIC + code, env=clean_env(**{VAR: conf}, **DETERMINISTIC_ENV), hook=True,
                      timeout=240)
    return _rows(proc.stdout)


RATIO = 0.6  # of the first step's peak, which on CUDA includes cuBLAS's and cuDNN's workspaces
_BUDGET_RUNS = f"""
import json, sys
RATIO = {RATIO}
sys.path.insert(0, {HERE!r})
import budget_models as bm
import tensorpager as tp
assert tp.device_kind() == "cuda", tp.device_kind()
for name in ("resnet", "transformer", "mlp"):
    ref = bm.train(name, None, None, device="cuda")
    again = bm.train(name, None, None, device="cuda")
    ref["deterministic"] = all(ref[k] == again[k] for k in ("losses", "grads", "buffers"))
    print(json.dumps(ref), flush=True)
    for policy in bm.POLICIES:
        try:
            print(json.dumps(bm.train(name, RATIO, policy, device="cuda")), flush=True)
        except torch.OutOfMemoryError as e:
            print(json.dumps({{"model": name, "ratio": RATIO, "policy": policy, "oom": str(e)}}), flush=True)
        except Exception as e:  # every run is printed; the test says which failed
            print(json.dumps({{"model": name, "ratio": RATIO, "policy": policy, "error": repr(e)}}), flush=True)
"""


@pytest.mark.parametrize("forced", ["swap", "recompute"])
def test_tp_budget_on_cuda_is_bit_identical_for_every_policy(forced: str) -> None:
    conf = "backend:tensorpager" + (",host_budget:1MiB" if forced == "recompute" else "")
    rows = _run(_BUDGET_RUNS, conf)
    refs = {r["model"]: r for r in rows if r["ratio"] is None}
    runs = [r for r in rows if r["ratio"] is not None]
    assert set(refs) == {"resnet", "transformer", "mlp"} and len(runs) == 12, rows
    problems = []
    for r in runs:
        ref = refs[r["model"]]
        where = f"{r['model']} {r['policy']} at {RATIO} ({forced})"
        if not ref["deterministic"]:
            problems.append(f"{r['model']}: two unmanaged runs differ on this GPU; nothing to compare")
        elif "oom" in r or "error" in r:
            problems.append(f"{where}: {r.get('oom') or r.get('error')}"[:600])
        else:
            for key in ("losses", "grads", "buffers"):
                if r[key] != ref[key]:
                    problems.append(f"{where}: {key} differ from the unmanaged run")
            rt = r["runtime"]
            if r["peak_after_first"] > r["budget"]:
                problems.append(f"{where}: peak {r['peak_after_first']} B over the budget {r['budget']} B")
            if rt["offloads"] + rt["drops"] == 0:
                problems.append(f"{where}: the runtime evicted nothing")
            if forced == "recompute" and rt["recomputes"] == 0:
                problems.append(f"{where}: nothing was recomputed with a 1 MiB pinned pool")
    summary = "\n".join(f"{r['model']:12} {str(r['policy']):9} {r['ratio']} "
                        + ("oom" if "oom" in r else "error" if "error" in r else f"budget {r['budget']} peak {r['peak_after_first']} "
                           f"{json.dumps(r['runtime'])}" if r["ratio"] else f"deterministic {r['deterministic']}")
                        for r in rows)
    assert not problems, "\n".join(problems) + "\n--- every run ---\n" + summary


_SIDE_STREAM = """
import json, threading
import torch.nn as nn
import tensorpager as tp

def run(managed):
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(1024, 1024), nn.GELU()) for _ in range(8)],
                          nn.Linear(1024, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    side = torch.cuda.Stream()
    backward_threads = set()
    losses = []
    scope = tp.budget(0.5, policy="lru") if managed else None
    if scope is not None:
        scope.__enter__()
    try:
        for step in range(3):
            if step == 1 and scope is not None:
                tp.step()  # the first step's peak sets the budget
                tp.reset_peak_stats()
            x = torch.randn(4096, 1024, generator=g).cuda()
            y = torch.randint(0, 10, (4096,), generator=g).cuda()
            opt.zero_grad()
            # The first half runs on a side stream that a sleep keeps busy: an
            # offload that does not wait for it copies the bytes before they exist.
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                torch.cuda._sleep(50_000_000)
                h = model[:4](x)
            torch.cuda.current_stream().wait_stream(side)
            h.register_hook(lambda grad: backward_threads.add(threading.get_ident()))
            loss = nn.functional.cross_entropy(model[4:](h), y)
            loss.backward()
            opt.step()
            losses.append(loss.item().hex())
    finally:
        if scope is not None:
            scope.__exit__(None, None, None)
    torch.cuda.synchronize()
    rt = {k.rsplit(".", 1)[1]: v for k, v in tp.stats().items() if k.startswith("tensorpager.runtime.")}
    return {"managed": managed, "losses": losses,
            "params": [float(p.double().sum()).hex() for p in model.parameters()],
            "grads": [float(p.grad.double().sum()).hex() for p in model.parameters()],
            "momentum": [float(opt.state[p]["momentum_buffer"].double().sum()).hex() for p in model.parameters()],
            "backward_on_main_thread": threading.get_ident() in backward_threads,
            "backward_threads": len(backward_threads), "runtime": rt}

print(json.dumps(run(False)), flush=True)
print(json.dumps(run(False)), flush=True)
print(json.dumps(run(True)), flush=True)
"""


def test_a_forward_on_a_busy_side_stream_offloads_the_right_bytes() -> None:
    plain, again, managed = _run(_SIDE_STREAM, "backend:tensorpager")
    keys = ("losses", "params", "grads", "momentum")
    assert all(plain[k] == again[k] for k in keys), "two unmanaged runs differ on this GPU"
    assert managed["backward_threads"] >= 1 and not managed["backward_on_main_thread"], managed
    assert managed["runtime"]["offloads"] + managed["runtime"]["drops"] > 0, managed["runtime"]
    for k in keys:
        assert managed[k] == plain[k], f"{k} differ under the budget: {managed['runtime']}"


_ZERO_CODE = (Path(HERE) / "zero_code_train.py").read_text(encoding="utf-8")
_PEAK = "\nimport tensorpager\nprint('peak', tensorpager.stats()['reserved_bytes.all.peak'])\n"


def _losses(stdout: str) -> list[str]:
    return re.findall(r"^loss \d+ (\S+)$", stdout, re.M)


@pytest.mark.parametrize("model,manage", [("gpt", "activations"), ("resnet", "all")])
def test_manage_with_only_the_variable_is_bit_identical_on_cuda(model: str, manage: str) -> None:
    pytest.importorskip("torchvision")
    env = {**DETERMINISTIC_ENV, "ZERO_CODE_MODEL": model}
    script = DETERMINISTIC + _ZERO_CODE
    plain = run_python(script, env=clean_env(**env), timeout=240)
    measured = run_python(script + _PEAK, env=clean_env(**{VAR: "backend:tensorpager"}, **env), hook=True,
                          timeout=240)
    peak = int(re.search(r"^peak (\d+)$", measured.stdout, re.M).group(1))
    conf = f"backend:tensorpager,manage:{manage},budget:{peak // 2}"
    managed = run_python(script, env=clean_env(**{VAR: conf}, **env), hook=True, timeout=240)
    exit_line = [line for line in managed.stderr.splitlines() if line.startswith(f"tensorpager: manage:{manage}:")]
    print(f"{model}: unmanaged peak {peak} B; {exit_line}")
    assert _losses(plain.stdout) and _losses(plain.stdout) == _losses(measured.stdout), "tensorpager alone changed"
    assert _losses(managed.stdout) == _losses(plain.stdout), f"under {conf}: {exit_line}"
    assert len(exit_line) == 1 and "0 offloads), recomputed 0 B (0 recomputes)" not in exit_line[0], exit_line

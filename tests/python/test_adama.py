"""tp.optim.AdamA (tensorpager/techniques/optim.py): Adam's trajectory at M = 1, the float64 rule for
M > 1, gradients freed as they are produced (and the memory that saves on the
CPU adapter), convergence, checkpoints, and the lazy import.

The rule is Note [AdamA update rule] in hooks/optim/adama_kernels.hpp.

Why a subprocess: the memory figures run in a fresh interpreter each (a peak is only a peak from an
allocator nothing else has used), and so does the lazy-import check (an interpreter that has not
imported torch); the rest run in process.
"""

from __future__ import annotations

import io
import json
import math

import pytest
from conftest import requires_ext, run_python

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = requires_ext


@pytest.fixture(scope="module")
def AdamA():  # noqa: N802, ANN201 - the class under test
    from tensorpager.techniques.optim import AdamA

    return AdamA


@pytest.fixture
def one_thread():  # noqa: ANN201
    """Tiny models run faster on one intra-op thread (and CI has two cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_mlp(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3))


def relative_difference(a: nn.Module, b: nn.Module) -> float:
    """The largest |a - b| / max|b| over the parameters."""
    with torch.no_grad():
        return max(
            float((p - q).abs().max() / q.abs().max()) for p, q in zip(a.parameters(), b.parameters(), strict=True)
        )


@pytest.mark.parametrize(
    ("weight_decay", "decoupled", "reference"),
    [(0.0, False, "Adam"), (0.01, False, "Adam"), (0.1, True, "AdamW")],
)
def test_one_micro_batch_follows_torch_adam_within_1e6_relative_over_20_steps(
    AdamA, weight_decay: float, decoupled: bool, reference: str  # noqa: N803
) -> None:
    ours, theirs = make_mlp(1), make_mlp(1)
    opt = AdamA(ours.parameters(), lr=1e-2, weight_decay=weight_decay, decoupled=decoupled)
    ref = getattr(torch.optim, reference)(theirs.parameters(), lr=1e-2, weight_decay=weight_decay, foreach=False)
    x, y = torch.randn(16, 6), torch.randn(16, 3)
    for _ in range(20):
        nn.functional.mse_loss(ours(x), y).backward()
        opt.step()
        ref.zero_grad()
        nn.functional.mse_loss(theirs(x), y).backward()
        ref.step()
    assert relative_difference(ours, theirs) < 1e-6


def test_micro_batches_follow_the_float64_reference_of_the_rule(AdamA) -> None:  # noqa: N803
    m, lr, b1, b2, eps, wd = 4, 1e-2, 0.9, 0.99, 1e-8, 0.05
    model = make_mlp(2)
    opt = AdamA(model.parameters(), lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, micro_batches=m)
    ref_p = [p.detach().double().clone() for p in model.parameters()]
    ref_m = [torch.zeros_like(p) for p in ref_p]
    ref_v = [torch.zeros_like(p) for p in ref_p]
    for step in range(1, 6):
        for t in ref_m:
            t.mul_(b1)
        for t in ref_v:
            t.mul_(b2)
        for _ in range(m):
            x, y = torch.randn(8, 6), torch.randn(8, 3)
            loss = nn.functional.mse_loss(model(x), y)
            grads = torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)
            for k, g in enumerate(grads):
                g = g.double() + wd * ref_p[k]
                ref_m[k].add_(g, alpha=(1 - b1) / m)
                ref_v[k].addcmul_(g, g, value=(1 - b2) / m)
            loss.backward()  # the hooks fold the same gradient into AdamA
        opt.step()
        for k in range(len(ref_p)):
            denom = ref_v[k].sqrt() / math.sqrt(1 - b2**step) + eps
            ref_p[k].addcdiv_(ref_m[k], denom, value=-lr / (1 - b1**step))
        # Keep the reference on the float32 trajectory it models: the next
        # gradients come from the float32 parameters.
        for p, r in zip(model.parameters(), ref_p):
            torch.testing.assert_close(p.double(), r, rtol=1e-5, atol=1e-7)
            r.copy_(p.detach().double())


def test_gradients_are_freed_by_the_hooks_after_each_backward(AdamA) -> None:  # noqa: N803
    model = make_mlp(3)
    opt = AdamA(model.parameters(), micro_batches=2)
    for _ in range(2):
        nn.functional.mse_loss(model(torch.randn(4, 6)), torch.randn(4, 3)).backward()
        assert all(p.grad is None for p in model.parameters())
    opt.step()
    assert all(opt.state[p]["folds"] == 0 and float(opt.state[p]["step"]) == 1.0 for p in model.parameters())


MEMORY = """
import json, torch, torch.nn as nn
import tensorpager as tp
tp.install(device="cpu")
torch.manual_seed(0)
torch.set_num_threads(1)
M = 4
model = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(256, 256), nn.ReLU())])
params = list(model.parameters())
if "{mode}" == "adama":
    opt = tp.optim.AdamA(params, lr=1e-3, micro_batches=M)
else:
    opt = torch.optim.Adam(params, lr=1e-3, foreach=False)  # one parameter's temporaries at a time, as AdamA
xs = [torch.randn(8, 256) for _ in range(M)]
def step():
    for x in xs:
        loss = model(x).pow(2).mean()
        (loss if "{mode}" == "adama" else loss / M).backward()
    opt.step()
    opt.zero_grad()
step()  # the optimizer state exists from here on
tp.reset_peak_stats()
base = tp.stats()["allocated_bytes.all.current"]
step()
print(json.dumps({{"peak": tp.stats()["allocated_bytes.all.peak"], "base": base,
                  "grad_bytes": sum(p.numel() * p.element_size() for p in params),
                  "largest": max(p.numel() * p.element_size() for p in params)}}))
"""


def test_peak_on_the_cpu_adapter_is_lower_than_accumulation_by_the_gradients(AdamA) -> None:  # noqa: N803
    accum = json.loads(run_python(MEMORY.format(mode="accum")).stdout.splitlines()[-1])
    adama = json.loads(run_python(MEMORY.format(mode="adama")).stdout.splitlines()[-1])
    assert accum["base"] == adama["base"]  # same parameters and optimizer state
    saved = accum["peak"] - adama["peak"]
    # Tolerance: two of the largest parameter's gradients. Accumulation holds
    # every gradient plus the incoming one being added; AdamA holds the one
    # being folded. Measured: saved = 1.09 x grad_bytes, 0.72 layers over.
    assert abs(saved - accum["grad_bytes"]) <= 2 * accum["largest"], (saved, accum)
    # And at no point were all gradients resident under AdamA.
    assert adama["peak"] - adama["base"] < accum["grad_bytes"] / 2


def test_converges_on_a_synthetic_task_within_2_percent_of_adam(AdamA, one_thread) -> None:  # noqa: N803
    # Teacher-student regression with a noise floor (0.01): both optimizers
    # can reach it. AdamA folds 4 micro-batches of 512 rows; Adam sees the
    # 2048-row batch. Measured after 500 steps: 0.4% apart.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 8, generator=g)

    def make(seed: int) -> nn.Module:
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))

    with torch.no_grad():
        y = make(123)(x) + 0.1 * torch.randn(2048, 1, generator=g)
    ref_model, model = make(0), make(0)
    ref = torch.optim.Adam(ref_model.parameters(), lr=1e-2)
    opt = AdamA(model.parameters(), lr=1e-2, micro_batches=4)
    for _ in range(500):
        ref.zero_grad()
        nn.functional.mse_loss(ref_model(x), y).backward()
        ref.step()
        for xs, ys in zip(x.chunk(4), y.chunk(4), strict=True):
            nn.functional.mse_loss(model(xs), ys).backward()
        opt.step()
    with torch.no_grad():
        initial = float(nn.functional.mse_loss(make(0)(x), y))
        ref_loss = float(nn.functional.mse_loss(ref_model(x), y))
        loss = float(nn.functional.mse_loss(model(x), y))
    assert ref_loss < initial / 10  # the task was learned
    assert abs(loss - ref_loss) <= 0.02 * ref_loss, (loss, ref_loss)


def test_state_dict_round_trip_resumes_exactly_between_micro_batches(AdamA) -> None:  # noqa: N803
    a = make_mlp(4)
    opt_a = AdamA(a.parameters(), lr=1e-2, micro_batches=2)
    xs = [torch.randn(4, 6) for _ in range(9)]
    y = torch.zeros(4, 3)
    for i in range(5):  # two steps and one micro-batch of the third
        nn.functional.mse_loss(a(xs[i]), y).backward()
        if i % 2 == 1:
            opt_a.step()
    buffer = io.BytesIO()
    torch.save(opt_a.state_dict(), buffer)  # a copy: a state_dict shares the optimizer's tensors
    buffer.seek(0)
    saved = torch.load(buffer)
    assert all(s["folds"] == 1 for s in saved["state"].values())
    b = make_mlp(0)
    b.load_state_dict(a.state_dict())
    opt_b = AdamA(b.parameters(), lr=1e-2, micro_batches=2)
    opt_b.load_state_dict(saved)
    for i in range(5, 9):
        nn.functional.mse_loss(a(xs[i]), y).backward()
        nn.functional.mse_loss(b(xs[i]), y).backward()
        if i % 2 == 0:
            opt_a.step()
            opt_b.step()
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)


def test_learning_rate_schedulers_drive_the_update(AdamA) -> None:  # noqa: N803
    model = make_mlp(5)
    opt = AdamA(model.parameters(), lr=1.0)
    torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.0)  # sets lr to 0 at once
    before = [p.detach().clone() for p in model.parameters()]
    nn.functional.mse_loss(model(torch.randn(4, 6)), torch.randn(4, 3)).backward()
    opt.step()
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))  # lr 0: no move


def test_a_parameter_feeds_one_adama_until_its_hooks_are_removed(AdamA) -> None:  # noqa: N803
    model = make_mlp(6)
    first = AdamA(model.parameters())
    with pytest.raises(ValueError, match="another AdamA"):
        AdamA(model.parameters())
    first.remove_hooks()
    nn.functional.mse_loss(model(torch.randn(4, 6)), torch.randn(4, 3)).backward()
    assert all(p.grad is not None for p in model.parameters())  # back to plain accumulation
    first.step()  # folds the .grad left there as one micro-batch
    assert all(p.grad is None for p in model.parameters())
    AdamA(model.parameters())


def test_a_deep_copy_is_unhooked_and_folds_dot_grad_at_step(AdamA) -> None:  # noqa: N803
    import copy

    model = make_mlp(8)
    twin = copy.deepcopy(model)
    opt = AdamA(model.parameters())
    twin_opt = copy.deepcopy(opt)  # its state refers to copies of model's parameters
    twin_opt.param_groups[0]["params"] = list(twin.parameters())
    x, y = torch.randn(4, 6), torch.randn(4, 3)
    nn.functional.mse_loss(model(x), y).backward()
    nn.functional.mse_loss(twin(x), y).backward()
    assert all(p.grad is not None for p in twin.parameters())  # no hooks on the copy
    opt.step()
    twin_opt.step()
    assert relative_difference(model, twin) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [({"lr": -1.0}, "lr = -1"), ({"betas": (1.0, 0.9)}, "0 <= beta1 < 1"), ({"eps": -1e-8}, "eps >= 0"),
     ({"weight_decay": -0.1}, "weight_decay >= 0"), ({"micro_batches": 0}, "micro_batches"),
     ({"micro_batches": 2.0}, "an integer >= 1")],
)
def test_hyper_parameters_out_of_range_raise_value_error_naming_them(
    AdamA, kwargs: dict[str, object], fragment: str  # noqa: N803
) -> None:
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(")):
        AdamA(make_mlp(7).parameters(), **kwargs)


def test_import_tensorpager_leaves_torch_alone_until_a_technique_is_touched() -> None:
    out = run_python(
        """
        import sys
        import tensorpager as tp
        before = "torch" in sys.modules
        adama = tp.optim.AdamA
        print(before, "torch" in sys.modules, callable(tp.compress), callable(tp.microbatch),
              sorted(set(tp.__all__) & {"optim", "compress", "microbatch"}))
        """
    ).stdout.split("\n", 1)[0]
    assert out == "False True True True ['compress', 'microbatch', 'optim']"


@pytest.mark.gpu
def test_gpu_one_micro_batch_follows_torch_adam(AdamA) -> None:  # noqa: N803
    ours, theirs = make_mlp(9).cuda(), make_mlp(9).cuda()
    opt = AdamA(ours.parameters(), lr=1e-2)
    ref = torch.optim.Adam(theirs.parameters(), lr=1e-2, foreach=False)
    x, y = torch.randn(16, 6, device="cuda"), torch.randn(16, 3, device="cuda")
    for _ in range(20):
        nn.functional.mse_loss(ours(x), y).backward()
        opt.step()
        ref.zero_grad()
        nn.functional.mse_loss(theirs(x), y).backward()
        ref.step()
    assert all(p.grad is None for p in ours.parameters())
    assert relative_difference(ours, theirs) < 1e-6

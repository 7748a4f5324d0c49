"""tp.compress (tensorpager/techniques/compress.py): the ratio of each method, the gradient error
each method costs, pool2 training, the memory the allocator sees, and the compress key. Which saved
tensors are compressed (Note [Which saved tensors are compressed] in
python/tensorpager/techniques/compress_pack.py), and by which rules: test_compress_selection.py.

Measured gradient errors (relative L2 error against the exact gradient, small
CNN on smooth 32x32 images, 5 seeds; "all" is over every parameter at once,
"worst" is the worst single parameter tensor):

    method   all      worst     bound asserted (all / worst)
    bf16     0.0005   0.0025    0.002 / 0.01
    fp8      0.0087   0.046     0.03  / 0.10
    pool2    0.026    0.093     0.06  / 0.20   (conv inputs only)

Why a subprocess: the memory figures and the compress key run in fresh interpreters (an allocator
nothing else has used; a key read at install or at start-up); the error and selection figures run in
process.
"""

from __future__ import annotations

import json

import pytest
from conftest import requires_ext, run_python

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from compress_models import small_cnn, smooth_images, tp  # noqa: E402, F401 - after torch's importorskip; tp: a fixture

pytestmark = requires_ext


@pytest.fixture
def one_thread():  # noqa: ANN201
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --- the codec ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "shape", "dtype", "ratio"),
    [
        ("pool2", (2, 3, 8, 8), torch.float32, 1 / 4),
        ("pool2", (2, 3, 7, 5), torch.float32, (4 * 3) / (7 * 5)),  # odd sizes pool the edge alone
        ("bf16", (4, 1000), torch.float32, 1 / 2),
        ("bf16", (4, 1000), torch.float64, 1 / 4),
        ("fp8", (4, 1000), torch.float32, 1 / 4),
        ("fp8", (4, 1000), torch.float16, 1 / 2),
    ],
)
def test_packed_bytes_follow_each_methods_ratio(tp, method: str, shape: tuple[int, ...], dtype, ratio: float) -> None:
    import tensorpager.techniques.compress as compress

    t = torch.randn(*shape).to(dtype)
    packed = compress._C.compress_pack(t, method)
    scale_bytes = 4 if method == "fp8" else 0  # one float32 scale per tensor
    assert packed.original_bytes == t.numel() * t.element_size()
    assert packed.packed_bytes == round(packed.original_bytes * ratio) + scale_bytes
    restored = packed.restore()
    assert restored.shape == t.shape and restored.dtype == t.dtype


def test_restore_keeps_channels_last_and_fp8_keeps_4_significant_bits(tp) -> None:
    import tensorpager.techniques.compress as compress

    t = torch.randn(2, 8, 6, 6).to(memory_format=torch.channels_last)
    for method in ("pool2", "bf16", "fp8"):
        assert compress._C.compress_pack(t, method).restore().is_contiguous(memory_format=torch.channels_last)
    big = t.abs() > t.abs().max() * 2**-6  # normal e4m3 range after scaling
    error = (compress._C.compress_pack(t, "fp8").restore() - t).abs() / t.abs()
    assert float(error[big].max()) <= 2**-4 + 1e-6


def test_integer_and_unknown_methods_are_refused_with_the_accepted_list(tp) -> None:
    import tensorpager.techniques.compress as compress

    assert "not one of" in compress._C.compress_why_not(torch.zeros(4, dtype=torch.int64), "bf16")
    with pytest.raises(ValueError, match="accepted: pool2, bf16, fp8, none"):
        compress._C.compress_pack(torch.zeros(4), "zip")


# --- gradients --------------------------------------------------------------------


def _gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor, spec: str | None, tp) -> list[torch.Tensor]:  # noqa: ANN001
    model.zero_grad()
    if spec is None:
        F.cross_entropy(model(x), y).backward()
    else:
        with tp.compress(spec, model=model):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize(("spec", "all_bound", "worst_bound"),
                         [("bf16", 0.002, 0.01), ("fp8", 0.03, 0.10), ("Conv2d=pool2", 0.06, 0.20)])
def test_gradient_relative_error_stays_within_the_stated_bound(
    tp, one_thread, spec: str, all_bound: float, worst_bound: float
) -> None:
    worst_all = worst_param = 0.0
    for seed in range(3):
        model = small_cnn(seed)
        x = smooth_images(16, seed)
        y = torch.randint(0, 10, (16,), generator=torch.Generator().manual_seed(seed))
        exact = _gradients(model, x, y, None, tp)
        approx = _gradients(model, x, y, spec, tp)
        flat_e, flat_a = torch.cat([g.flatten() for g in exact]), torch.cat([g.flatten() for g in approx])
        worst_all = max(worst_all, float((flat_a - flat_e).norm() / flat_e.norm()))
        worst_param = max(worst_param, max(float((a - e).norm() / e.norm()) for a, e in zip(approx, exact)))
    print(f"{spec}: relative gradient error all {worst_all:.4f}, worst parameter {worst_param:.4f}")
    assert 0 < worst_all <= all_bound
    assert worst_param <= worst_bound


def test_pool2_training_reaches_the_exact_loss_within_5_percent_with_an_eighth_more_steps(tp, one_thread) -> None:
    # 4-class task on smooth 12x12 images. Measured over seeds 0-5: pool2
    # needs 78-89 steps to reach the loss exact training has at step 80, and
    # at equal steps trails by up to 13%. Asserted: 90 steps of pool2 come
    # within 5% of 80 exact steps.
    low = torch.randn(128, 3, 3, 3, generator=torch.Generator().manual_seed(0))
    y = (low.flatten(1) @ torch.randn(27, 4, generator=torch.Generator().manual_seed(1234))).argmax(1)
    x = F.interpolate(low, size=(12, 12), mode="bilinear", align_corners=False)

    def train(spec: str | None, steps: int) -> float:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                              nn.MaxPool2d(2), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                              nn.Flatten(), nn.Linear(16, 4))
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        for _ in range(steps):
            opt.zero_grad()
            if spec is None:
                loss = F.cross_entropy(model(x), y)
            else:
                with tp.compress(spec, model=model):
                    loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        with torch.no_grad():
            return float(F.cross_entropy(model(x), y))

    exact, pooled = train(None, 80), train("Conv2d=pool2", 90)
    assert exact < 0.7 * float(torch.log(torch.tensor(4.0)))  # learned something
    assert pooled <= 1.05 * exact, (pooled, exact)


# --- memory -----------------------------------------------------------------------

MEMORY = """
import json, torch, torch.nn as nn
import tensorpager as tp
tp.install(device="cpu")
torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(512, 512), nn.ReLU())])
x = torch.randn(256, 512)
def step():
    model.zero_grad(set_to_none=False)
    if "{spec}" == "exact":
        loss = model(x).square().mean()
    else:
        with tp.compress("{spec}", model=model):
            loss = model(x).square().mean()
    loss.backward()
step()
tp.reset_peak_stats()
tp.compress.reset_stats()
base = tp.stats()["allocated_bytes.all.current"]
step()
print(json.dumps({{"peak": tp.stats()["allocated_bytes.all.peak"] - base,
                  "saved": tp.compress.stats()["tensorpager.compress.bytes_saved"]}}))
"""


def test_the_allocator_sees_at_least_half_of_the_bytes_compression_reports_saved(tp) -> None:
    runs = {s: json.loads(run_python(MEMORY.format(spec=s)).stdout.splitlines()[-1]) for s in ("exact", "bf16", "fp8")}
    # Measured: exact 5.0 MiB, bf16 4.0 MiB (1.5 MiB reported saved), fp8
    # 3.25 MiB (2.25 MiB reported). The rest goes to restoring in backward.
    assert runs["exact"]["peak"] > runs["bf16"]["peak"] > runs["fp8"]["peak"]
    for s in ("bf16", "fp8"):
        lowered = runs["exact"]["peak"] - runs[s]["peak"]
        assert 0.5 * runs[s]["saved"] <= lowered <= runs[s]["saved"], (s, runs)


@pytest.mark.gpu
def test_gpu_round_trip_keeps_device_and_bounds(tp) -> None:
    import tensorpager.techniques.compress as compress

    t = torch.randn(8, 16, 32, 32, device="cuda")
    for method, bound in (("bf16", 2**-8), ("fp8", 0.1)):
        restored = compress._C.compress_pack(t, method).restore()
        assert restored.device == t.device
        assert float((restored - t).norm() / t.norm()) <= bound


# --- the compress key, tp.stats(), the timeline ------------------------------------

KEYED = r"""
import json, torch, torch.nn as nn
import tensorpager as tp
tp.install()  # TENSORPAGER_CONF holds the compress key
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                      nn.Flatten(), nn.Linear(8 * 16 * 16, 4))
model(torch.randn(4, 3, 16, 16)).square().mean().backward()
s = tp.stats()
print(json.dumps({k: v for k, v in s.items() if k.startswith("tensorpager.compress.")}))
"""


def test_the_compress_key_compresses_process_wide_and_tp_stats_reports_it(tp) -> None:
    from conftest import clean_env

    proc = run_python(KEYED, env=clean_env(TENSORPAGER_CONF="device:cpu,compress:Conv2d=pool2;ReLU=bf16"))
    s = json.loads(proc.stdout.splitlines()[-1])
    assert s["tensorpager.compress.pool2.tensors"] == 2  # both convolution inputs
    assert s["tensorpager.compress.bf16.tensors"] >= 1   # the ReLU outputs (the second is the Linear's input too)
    assert s["tensorpager.compress.bytes_saved"] > 0
    assert s["tensorpager.compress.pool2.restored"] == 2
    assert "not acted on" not in proc.stderr and "compress" not in proc.stderr


def test_the_compress_key_acts_from_the_start_up_hook_at_import_torch(tp) -> None:
    from conftest import clean_env

    proc = run_python(KEYED.replace("tp.install()", "assert tp.is_installed()"), hook=True,
                      env=clean_env(PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,device:cpu,compress:bf16"))
    s = json.loads(proc.stdout.splitlines()[-1])
    assert s["tensorpager.compress.bf16.tensors"] >= 2  # every module: bare bf16 is *=bf16
    assert s["tensorpager.compress.pool2.tensors"] == 0


def test_without_the_key_nothing_is_compressed_and_the_counters_are_zero(tp) -> None:
    from conftest import clean_env

    proc = run_python(KEYED, env=clean_env(TENSORPAGER_CONF="device:cpu"))
    s = json.loads(proc.stdout.splitlines()[-1])
    assert s["tensorpager.compress.bytes_saved"] == 0
    assert s["tensorpager.compress.pool2.tensors"] == 0


def test_a_bad_compress_key_fails_install_naming_the_rule(tp) -> None:
    from conftest import clean_env

    proc = run_python(KEYED, env=clean_env(TENSORPAGER_CONF="device:cpu,compress:layer1.*=fp8"), check=False)
    assert proc.returncode != 0
    assert "compress:layer1.*=fp8" in proc.stderr
    assert "not a module class name or *" in proc.stderr



def test_compressed_tensors_are_their_own_timeline_category(tmp_path) -> None:
    path = tmp_path / "compressed.json"
    proc = run_python(f"""
        import torch, torch.nn as nn, tensorpager as tp
        tp.install(device="cpu")
        model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1))
        x = torch.randn(8, 3, 32, 32)
        tp.start_timeline()
        with tp.compress("*=bf16", model=model):
            loss = model(x).square().mean()
        print(tp.report())
        loss.backward()
        tp.dump_timeline({str(path)!r})
    """)
    saved = json.loads(path.read_text())["tensorpager"]
    kinds, cats, labels = saved["kinds"], saved["categories"], saved["labels"]
    tags = [e for e in saved["events"] if kinds[e[1]] == "tag" and cats[e[2]] == "compressed"]
    assert tags and {labels[e[12]] for e in tags} == {"compressed (bf16)"}
    # The report taken while the packed tensors were alive shows the category.
    row = next(line for line in proc.stdout.splitlines() if line.strip().startswith("compressed"))
    assert "0 B" not in row

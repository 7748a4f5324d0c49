"""tp.compress (tensorpager/techniques/compress.py): the ratio of each method, which saved tensors are
compressed (Note [Which saved tensors are compressed] in
python/tensorpager/techniques/compress.py), the gradient error each method costs, pool2
training, and the memory the allocator sees.

Measured gradient errors (relative L2 error against the exact gradient, small
CNN on smooth 32x32 images, 5 seeds; "all" is over every parameter at once,
"worst" is the worst single parameter tensor):

    method   all      worst     bound asserted (all / worst)
    bf16     0.0005   0.0025    0.002 / 0.01
    fp8      0.0087   0.046     0.03  / 0.10
    pool2    0.026    0.093     0.06  / 0.20   (conv inputs only)
"""

from __future__ import annotations

import contextlib
import json

import pytest
from conftest import requires_ext, run_python

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

pytestmark = requires_ext


@pytest.fixture(scope="module")
def tp():  # noqa: ANN201 - the package, with the extension loaded
    import tensorpager

    tensorpager.compress.reset_stats()
    return tensorpager


@pytest.fixture
def one_thread():  # noqa: ANN201
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def packed_tensors(tp, monkeypatch):  # noqa: ANN001, ANN201
    """Records (method, tensor) for every tensor handed to the C++ packer."""
    import tensorpager.techniques.compress as compress

    seen: list[tuple[str, torch.Tensor]] = []
    real = compress._C

    class Recorder:
        def __getattr__(self, name: str):  # noqa: ANN204
            return getattr(real, name)

        def compress_pack(self, t: torch.Tensor, method: str):  # noqa: ANN201
            seen.append((method, t))
            return real.compress_pack(t, method)

    monkeypatch.setattr(compress, "_C", Recorder())
    return seen


def smooth_images(n: int, seed: int, size: int = 32) -> torch.Tensor:
    low = torch.randn(n, 3, size // 4, size // 4, generator=torch.Generator().manual_seed(seed))
    return F.interpolate(low, size=(size, size), mode="bilinear", align_corners=False)


def small_cnn(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )


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


# --- selection ------------------------------------------------------------------


def test_spec_grammar_parses_rules_and_bare_methods(tp) -> None:
    parse = tp.compress.parse_spec
    assert parse("Conv2d=pool2; ReLU = BF16") == [("Conv2d", "pool2"), ("ReLU", "bf16")]
    assert parse("fp8") == [("*", "fp8")]
    assert parse("pool2") == [("Conv2d", "pool2")]
    assert parse("none") == [] and parse(None) == []
    assert parse({nn.Linear: "fp8", "fc": "none"}) == [(nn.Linear, "fp8"), ("fc", "none")]
    with pytest.raises(ValueError, match="accepted: pool2, bf16, fp8, none"):
        parse("Conv2d=zip")
    with pytest.raises(ValueError, match="selector=method"):
        parse("=bf16;ReLU=fp8")


def test_a_spec_that_selects_nothing_names_the_models_module_types(tp) -> None:
    with pytest.raises(ValueError, match="Conv2d"):
        tp.compress("Conv3d=fp8", model=small_cnn(0))


def test_forward_is_exact_and_parameters_buffers_inputs_are_never_packed(tp, packed_tensors) -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 16 * 16, 10))
    x = smooth_images(4, 0, 16)
    expected = model(x)
    with tp.compress("fp8", model=model, min_bytes=0):
        out = model(x)
    assert torch.equal(out, expected)
    storages = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), x]}
    assert packed_tensors, "something was compressed"
    assert all(t.untyped_storage().data_ptr() not in storages for _, t in packed_tensors)
    assert tp.compress.stats()["tensorpager.compress.skipped.parameter"] > 0


def test_only_the_selected_module_types_are_compressed(tp, packed_tensors) -> None:
    model = small_cnn(0)
    with tp.compress("Linear=bf16;ReLU=fp8", model=model, min_bytes=0):
        model(smooth_images(4, 0))
    packed = [(m, tuple(t.shape)) for m, t in packed_tensors]
    # The three ReLU outputs (the convolutions and the pooling that also save
    # them are not selected and keep them exact), and the Linear's input.
    assert packed == [("fp8", (4, 16, 32, 32)), ("fp8", (4, 32, 32, 32)), ("fp8", (4, 32, 16, 16)),
                      ("bf16", (4, 32))]


def test_pool2_takes_only_convolution_inputs(tp, packed_tensors) -> None:
    model = small_cnn(0)
    with tp.compress("Conv2d=pool2", model=model):
        model(smooth_images(4, 0))
    # The first convolution's input is the caller's batch: left alone.
    assert [tuple(t.shape) for _, t in packed_tensors] == [(4, 16, 32, 32), (4, 32, 16, 16)]
    assert {m for m, _ in packed_tensors} == {"pool2"}


def test_a_tensor_saved_twice_is_packed_once(tp, packed_tensors) -> None:
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))
    tp.compress.reset_stats()
    live_before = tp.compress.stats()["tensorpager.compress.live_bytes"]
    with tp.compress("fp8", model=model):
        y = model(torch.randn(32, 64))
    y.sum().backward()
    s = tp.compress.stats()
    assert len(packed_tensors) == 1  # the ReLU's output, saved by the ReLU and by the second Linear
    assert s["tensorpager.compress.shared"] == 1
    assert s["tensorpager.compress.fp8.restored"] == 2
    assert s["tensorpager.compress.live_bytes"] == live_before  # freed with the graph


@pytest.mark.parametrize("changed", ["compressed", "exact"])
def test_an_in_place_change_to_a_saved_tensor_raises_as_autograd_does(tp, changed: str) -> None:
    # Note [In-place changes to saved tensors] (hooks/saved_version.hpp):
    # with saved-tensor hooks autograd checks no versions; compress does,
    # for the tensors it compresses and for those it leaves exact.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))
    x = torch.randn(32, 64)
    min_bytes = 0 if changed == "compressed" else 1 << 30  # "exact": every tensor is too small to compress
    for hooked in (False, True):
        with tp.compress("ReLU=fp8", model=model, min_bytes=min_bytes) if hooked else contextlib.nullcontext():
            h = model[1](model[0](x))  # saved by the ReLU only
            y = (2 * h).sum()
        h.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()


def test_tensors_left_exact_go_to_the_enclosing_hooks(tp, packed_tensors) -> None:
    # Note [Compress inside other hooks]: what compress does not compress
    # reaches an enclosing saved_tensors_hooks (tp.budget, save_on_cpu) and
    # comes back through it; the compressed ones stay with compress.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))
    x = torch.randn(32, 64)
    model(x).square().sum().backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()

    outer: list[int] = []

    def pack(t: torch.Tensor) -> tuple[str, torch.Tensor]:
        outer.append(t.numel())
        return ("outer", t)

    def unpack(packed: tuple[str, torch.Tensor]) -> torch.Tensor:
        assert packed[0] == "outer"
        return packed[1]

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        with tp.compress("bf16", model=model, min_bytes=1 << 40):  # selects every module, all too small
            y = model(x)
    y.square().sum().backward()
    assert len(outer) >= 4, outer  # the Linears' inputs and weights, the ReLU's output
    assert not packed_tensors
    assert all(torch.equal(p.grad, e) for p, e in zip(model.parameters(), expected))

    model.zero_grad()
    outer.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        with tp.compress("ReLU=bf16", model=model, min_bytes=0):
            y = model(x)
    y.square().sum().backward()
    # The ReLU's output is compressed; the Linears, not selected, save to the
    # enclosing hooks as they always did.
    assert [m for m, _ in packed_tensors] == ["bf16"]
    assert 32 * 64 in outer  # the input, saved by the first Linear
    assert all(p.grad is not None for p in model.parameters())


def test_without_a_model_classes_are_selected_everywhere_until_exit(tp, packed_tensors) -> None:
    model = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 64))
    with tp.compress("Tanh=bf16"):
        model(torch.randn(32, 64))
    assert [m for m, _ in packed_tensors] == ["bf16"]
    model(torch.randn(32, 64))
    assert len(packed_tensors) == 1
    with pytest.raises(ValueError, match="name globs need model="):
        tp.compress("layer1.*=bf16")


def test_name_globs_select_by_qualified_name(tp, packed_tensors) -> None:
    model = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 64), nn.Tanh())
    with tp.compress("*=fp8;3=none", model=model):
        model(torch.randn(32, 64))
    # Module 1 (a Tanh) packs its output, which module 2 saves too (shared);
    # module 3 keeps its output exact; module 0's input is the caller's.
    assert [tuple(t.shape) for _, t in packed_tensors] == [(32, 256)]


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


def test_enable_with_a_bare_method_selects_every_module(tp, packed_tensors) -> None:
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    x = torch.randn(32, 64)
    tp.compress.enable("bf16")
    try:
        model(x).sum().backward()
    finally:
        tp.compress.disable()
    assert packed_tensors and {m for m, _ in packed_tensors} == {"bf16"}
    n = len(packed_tensors)
    model(x).sum().backward()  # disabled: nothing more is packed
    assert len(packed_tensors) == n


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

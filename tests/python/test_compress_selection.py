"""tp.compress's selection (tensorpager/techniques/compress.py): which saved tensors are compressed
(Note [Which saved tensors are compressed] in python/tensorpager/techniques/compress_pack.py), by
which rules, what is left to the enclosing hooks, and what enable() selects. The codec, the
gradient error, the memory and the compress key are in test_compress.py.
"""

from __future__ import annotations

import contextlib

import pytest
from conftest import requires_ext

torch = pytest.importorskip("torch")
nn = torch.nn

from compress_models import small_cnn, smooth_images, tp  # noqa: E402, F401 - after torch's importorskip; tp: a fixture

pytestmark = requires_ext


@pytest.fixture
def packed_tensors(tp, monkeypatch):  # noqa: ANN001, ANN201
    """Records (method, tensor) for every tensor handed to the C++ packer (by compress_pack.py's hooks)."""
    import tensorpager.techniques.compress_pack as compress_pack

    seen: list[tuple[str, torch.Tensor]] = []
    real = compress_pack._C

    class Recorder:
        def __getattr__(self, name: str):  # noqa: ANN204
            return getattr(real, name)

        def compress_pack(self, t: torch.Tensor, method: str):  # noqa: ANN201
            seen.append((method, t))
            return real.compress_pack(t, method)

    monkeypatch.setattr(compress_pack, "_C", Recorder())
    return seen


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


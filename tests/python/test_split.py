"""tp.split_channels: a Conv2d -> BatchNorm2d -> ReLU [-> MaxPool2d] stem run in
output-channel chunks is bit-identical to the unsplit stem (losses, weights,
running statistics; training and evaluation), finds torchvision's stem,
leaves the model's state_dict and lifetime alone, and refuses what it cannot
split. Its use under a budget is tested with the model that needs it, in
test_budget_resnet18.py."""

from __future__ import annotations

import copy
import gc
import pickle
import weakref

import pytest
import torch
import torchvision
from torch import nn

from tensorpager import _rerun
from tensorpager.techniques import split as split_module
from tensorpager.techniques.split import split_channels


def _stem_net(momentum: float | None = 0.1, bias: bool = False, pool: bool = True) -> nn.Module:
    torch.manual_seed(0)
    layers = [nn.Conv2d(3, 20, 7, stride=2, padding=3, bias=bias), nn.BatchNorm2d(20, momentum=momentum),
              nn.ReLU(inplace=True)]
    if pool:
        layers.append(nn.MaxPool2d(3, stride=2, padding=1))
    layers += [nn.Conv2d(20, 12, 3, padding=1), nn.BatchNorm2d(12), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
               nn.Linear(12, 5)]
    return nn.Sequential(*layers)


# The fewest channels a chunk has: 8. The stem's 20 channels run in chunks of
# 8, 8 and 4; the second chain's 12 in 8 and 4.
CHUNK = 1


def _train(model: nn.Module, steps: int = 3) -> list[str]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    torch.manual_seed(1)
    x, y = torch.randn(4, 3, 64, 64), torch.randint(0, 5, (4,))
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item().hex())
    return losses


def _same_state(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("momentum,bias,pool", [(0.1, False, True), (None, True, True), (0.1, False, False)])
def test_split_stem_trains_bit_identical(momentum: float | None, bias: bool, pool: bool) -> None:
    ref, split = _stem_net(momentum, bias, pool), _stem_net(momentum, bias, pool)
    handle = split_channels(split, chunk_bytes=CHUNK)
    # The second Conv2d -> BatchNorm2d -> ReLU is a chain too; its input needs
    # a gradient. CHUNK splits both unevenly.
    assert handle.chains == [("0", "1", "2", "3") if pool else ("0", "1", "2"), ("4", "5", "6") if pool else ("3", "4", "5")]
    assert _train(ref) == _train(split)
    assert _same_state(ref, split)  # weights, momentum-updated; running stats; num_batches_tracked
    ref.eval(), split.eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(ref(x), split(x))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n,size,channels,chunk", [(4, 64, 64, 9), (32, 160, 64, 16), (3, 50, 10, 3), (8, 96, 64, 5)])
def test_chunks_give_the_kernels_bits(threads: int, n: int, size: int, channels: int, chunk: int) -> None:
    # Note [Why the split is exact]: the per-channel kernels on a chunk, and
    # the whole convolution_backward, against autograd's unsplit graph.
    def chain() -> tuple[nn.Module, ...]:
        torch.manual_seed(0)
        bn = nn.BatchNorm2d(channels)
        nn.init.uniform_(bn.weight, 0.5, 1.5), nn.init.uniform_(bn.bias, -0.5, 0.5)
        return nn.Conv2d(3, channels, 7, 2, 3, bias=False), bn, nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        results = []
        for split in (False, True):
            modules = chain()
            if split:
                split_channels(chain=modules, chunk_bytes=chunk * n * (size // 2) ** 2 * 4)
            torch.manual_seed(1)
            x = torch.randn(n, 3, size, size, requires_grad=True)
            out = x
            for m in modules:
                out = m(out)
            out.backward(torch.randn_like(out))
            conv, bn = modules[0], modules[1]
            results.append([out, x.grad, conv.weight.grad, bn.weight.grad, bn.bias.grad, bn.running_mean, bn.running_var])
        assert type(out.grad_fn).__name__ == "_SplitChainBackward"
        assert [torch.equal(a, b) for a, b in zip(*results)] == [True] * 7
    finally:
        torch.set_num_threads(before)


def test_split_runs_in_chunks_and_recomputes_them_in_backward() -> None:
    split = _stem_net()
    split_channels(split, chunk_bytes=CHUNK)
    x = torch.randn(4, 3, 64, 64)
    out = split[0](x)
    assert type(out.grad_fn).__name__ == "_SplitChainBackward"
    assert out.shape == (4, 20, 16, 16)
    chain = split_module._Chain(split[0], *split[0].__dict__["_tp_chain"])
    assert list(chain.chunks(x)) == [(0, 8), (8, 16), (16, 20)]
    # Multiples of 8 channels whose output (4 x 32 x 32 floats = 16 KiB a
    # channel) fits in chunk_bytes; never fewer than 8.
    for chunk_bytes, step in ((16 * 16384, 16), (16 * 16384 - 1, 8), (23 * 16384, 16), (10**9, 24)):
        chain.chunk_bytes = chunk_bytes
        assert next(iter(chain.chunks(x))) == (0, min(step, 20)), chunk_bytes


def test_an_input_that_needs_a_gradient_gets_the_same_gradient() -> None:
    ref, split = _stem_net(), _stem_net()
    split_channels(split, chunk_bytes=CHUNK)
    grads = []
    for model in (ref, split):
        torch.manual_seed(2)
        x = torch.randn(4, 3, 64, 64, requires_grad=True)
        out = model[3](model[2](model[1](model[0](x))))
        out.backward(torch.randn_like(out))
        grads.append((out.detach(), x.grad, model[0].weight.grad, model[1].weight.grad, model[1].bias.grad))
    assert type(out.grad_fn).__name__ == "_SplitChainBackward"
    assert all(torch.equal(a, b) for a, b in zip(*grads))


def _penalised_step(model: nn.Module, wrt: str) -> list[torch.Tensor]:
    """A loss plus a penalty on its gradient (wrt the input or the parameters): the gradients after it."""
    torch.manual_seed(1)
    x, y = torch.randn(4, 3, 64, 64, requires_grad=True), torch.randint(0, 5, (4,))
    loss = nn.functional.cross_entropy(model(x), y)
    grads = torch.autograd.grad(loss, [x] if wrt == "input" else list(model.parameters()), create_graph=True)
    (loss + sum(g.pow(2).sum() for g in grads)).backward()
    return [x.grad] + [p.grad for p in model.parameters()]


@pytest.mark.parametrize("wrt", ["input", "parameters"])
def test_double_backward_is_refused_naming_the_split_and_what_to_do(wrt: str) -> None:
    # It failed at the second backward with "element 0 of tensors does not
    # require grad", naming no split (issue 30). Note [No double backward
    # through the split]: a recompute gave other bits.
    model = _stem_net()
    handle = split_channels(model, chunk_bytes=CHUNK)
    with pytest.raises(RuntimeError, match=r"tp.split_channels: double backward is not supported through a split "
                                           r"chain \(the one from the Conv2d of 20 -> 12 channels\): .*"
                                           r"create_graph=True .* call remove\(\) on the handle"):
        _penalised_step(model, wrt)
    # What it says to do: unsplit, the step is plain PyTorch's.
    handle.remove()
    ref = _stem_net()
    model.load_state_dict(ref.state_dict())  # the running statistics the refused step's forward updated
    model.zero_grad()
    assert all(torch.equal(a, b) for a, b in zip(_penalised_step(ref, wrt), _penalised_step(model, wrt)))


def test_finds_torchvision_stem_and_keeps_the_model_as_it_was() -> None:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    keys, params = list(model.state_dict()), [id(p) for p in model.parameters()]
    handle = split_channels(model)
    # Each BasicBlock calls its ReLU twice: only the stem is a chain.
    assert handle.chains == [("conv1", "bn1", "relu", "maxpool")]
    assert list(model.state_dict()) == keys and [id(p) for p in model.parameters()] == params
    assert isinstance(model.conv1, nn.Conv2d) and isinstance(model.bn1, nn.BatchNorm2d)
    assert set(_rerun.modules_read(model.conv1)) == {model.conv1, model.bn1, model.relu, model.maxpool}

    clone = copy.deepcopy(model)
    assert clone.conv1.__dict__["_tp_chain"][0] is clone.bn1
    assert pickle.loads(pickle.dumps(clone)).conv1.__dict__["_tp_chain"][0] is not model.bn1
    handle.remove()
    assert type(model.conv1) is nn.Conv2d and type(model.bn1) is nn.BatchNorm2d
    assert "_tp_chain" not in model.conv1.__dict__ and "_tp_also_reads" not in model.conv1.__dict__


def test_a_split_model_is_freed_when_dropped() -> None:
    # No reference cycle, left by fx or by the split itself, keeps it (and the
    # parameters and gradients a budget counts) alive until a collection.
    model = _stem_net()
    split_channels(model, chunk_bytes=CHUNK)
    _train(model, steps=1)
    gc.collect()
    gc.disable()
    try:
        alive = weakref.ref(model[0])
        del model
        assert alive() is None
    finally:
        gc.enable()


class _Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) if x.sum() > 0 else x  # data-dependent: fx cannot trace it


def test_refuses_what_it_cannot_split() -> None:
    with pytest.raises(ValueError, match="chunk_bytes must be a positive size.*'lots'"):
        split_channels(_stem_net(), chunk_bytes="lots")
    with pytest.raises(ValueError, match="chunk_bytes must be a positive size"):
        split_channels(_stem_net(), chunk_bytes=0)
    with pytest.raises(ValueError, match="not both"):
        split_channels(_stem_net(), chain=(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()))
    with pytest.raises(ValueError, match="has no Conv2d -> BatchNorm2d -> ReLU chain"):
        split_channels(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()))
    with pytest.raises(ValueError, match="cannot trace _Branchy.*chain="):
        split_channels(_Branchy())
    with pytest.raises(ValueError, match="grouped"):
        split_channels(chain=(nn.Conv2d(4, 4, 3, groups=2), nn.BatchNorm2d(4), nn.ReLU()))
    with pytest.raises(ValueError, match="output channels"):
        split_channels(chain=(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(5), nn.ReLU()))
    model = _stem_net()
    handle = split_channels(model)
    with pytest.raises(ValueError, match="split already"):
        split_channels(chain=(model[0], model[1], model[2]))
    with pytest.raises(ValueError, match="Sequential is split already; call remove"):  # it blamed torch.fx
        split_channels(model)
    handle.remove()
    split_channels(model).remove()  # removed, it splits again


def test_hooks_on_a_chains_modules_are_refused_and_see_their_own_outputs_unsplit() -> None:
    # Note [Hooks on a split chain]: before, hooks on a split stem's Conv2d,
    # BatchNorm2d and ReLU saw the pooled output (24x24 for a 48x48 stem).
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    x = torch.randn(2, 3, 96, 96)
    seen: dict[str, tuple[int, ...]] = {}

    def record(name: str):  # noqa: ANN202
        return lambda module, args, out: seen.__setitem__(name, tuple(out.shape))

    handles = [getattr(model, n).register_forward_hook(record(n)) for n in ("conv1", "bn1", "relu")]
    with pytest.raises(ValueError, match=r"cannot split conv1 -> bn1 -> relu -> maxpool: its Conv2d has forward hooks"):
        split_channels(model)
    model(x)
    assert seen == {"conv1": (2, 64, 48, 48), "bn1": (2, 64, 48, 48), "relu": (2, 64, 48, 48)}
    for h in handles:
        h.remove()
    split = split_channels(model, chunk_bytes="64KiB")
    hook = model.bn1.register_forward_hook(record("bn1 after"))
    with pytest.raises(RuntimeError, match=r"the BatchNorm2d of a split chain has forward hooks.*remove\(\)"):
        model(x)
    split.remove()
    model(x)  # unsplit, the hook sees its module's own output
    assert seen["bn1 after"] == (2, 64, 48, 48)
    hook.remove()

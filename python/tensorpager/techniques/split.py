"""Channel-split stems: a convolution block run a few output channels at a time.

``tp.split_channels(model)`` finds each ``Conv2d -> BatchNorm2d -> ReLU
[-> MaxPool2d]`` chain of ``model`` (by tracing it with ``torch.fx``) and
makes it run in output-channel chunks. Its full-size intermediates then never
exist: the forward keeps only the chain's input, and the backward recomputes
one chunk at a time. The result is bit-identical to the unsplit chain (Note
[Why the split is exact] in split_chain.py); the handle it returns undoes it::

    split = tp.split_channels(model)        # model.conv1 .. model.maxpool
    with tp.budget(0.3):
        ...train...
    split.remove()

Why: under a budget, no eviction can lower the memory that one operator needs
while it runs. A torchvision ResNet-18 at batch 32 and 160x160 holds 200 MiB
in its stem's BatchNorm backward alone, 0.46 of the step's peak
(tests/python/test_budget_resnet18.py; Note [Budget floor] in
hooks/budget/budget_floor.cpp); split, the stem's backward holds one 50 MiB
tensor and chunks of a few MiB. This is checkpointing at a finer grain than a
block, for the one block whose operators are the step's largest.

This module finds the chains in a model and swaps their modules' classes
(Note [Patching by class]); the chain's autograd function is in
split_chain.py, with the Notes on why the split is exact, why it lends its
incoming gradient, why it refuses double backward and how it counts
BatchNorm's running statistics.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tensorpager import _budget_value, _rerun
from tensorpager.techniques.split_chain import CHANNEL_QUANTUM, _Chain  # noqa: F401 - CHANNEL_QUANTUM: split's name too

DEFAULT_CHUNK_BYTES = 8 << 20


# Note [Patching by class]
# A split chain keeps its modules where they are, so the model's state_dict,
# its parameters (and an optimizer built on them), hooks and isinstance checks
# are unchanged: only the modules' classes are swapped for subclasses. The
# convolution's runs the whole chain; the others pass their input through,
# since it is already their output. A subclass, not a patched ``forward``
# attribute, so that copy.deepcopy and pickle give a copy that refers to its
# own modules. remove() swaps the classes back.
#
# The convolution's forward now reads modules that are not its children.
# tensorpager's recompute reruns a module's forward with clones of its
# buffers, so that BatchNorm's running statistics count a batch once: this
# module registers what a split convolution reads (_chain_read_by; Note
# [What else a forward reads] in _rerun.py), or a rerun would update them
# twice.


def _chain_read_by(m: nn.Module) -> tuple[nn.Module, ...]:
    """The rest of the chain a split convolution runs (Note [What else a forward reads])."""
    chain = m.__dict__.get("_tp_chain")
    return () if chain is None else tuple(x for x in chain[:3] if x is not None)


_rerun.register_also_reads(_chain_read_by)


def _hooked(m: nn.Module) -> str | None:
    """Which hooks of its own m has (Note [Hooks on a split chain]), or None."""
    kinds = [kind for kind, hooks in (("forward", m._forward_hooks), ("forward pre", m._forward_pre_hooks),
                                      ("backward", m._backward_hooks), ("backward pre", m._backward_pre_hooks))
             if hooks]
    return " and ".join(kinds) + " hooks" if kinds else None


class _SplitConv2d(nn.Conv2d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The rest of the chain, not the chain: a chain refers to this module,
        # which must not refer back (a cycle would keep a model alive until
        # Python's cyclic collector ran, and its tensors with it).
        rest = self.__dict__["_tp_chain"]
        for m in (self, *rest[:3]):
            if m is not None and (hooks := _hooked(m)) is not None:
                raise RuntimeError(
                    f"tp.split_channels: the {type(m).__bases__[0].__name__} of a split chain has {hooks}, which would "
                    "see the whole chain's output in place of its own (its output is never whole in a split chain); "
                    "call remove() on the handle split_channels returned before hooking these modules, and split "
                    "again without the hooks (Note [Hooks on a split chain])")
        chain = _Chain(self, *rest)
        return chain.split(x) if chain.splits(x) else chain.unsplit(x)


class _PassedBatchNorm2d(nn.BatchNorm2d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class _PassedReLU(nn.ReLU):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class _PassedMaxPool2d(nn.MaxPool2d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


_PASSED = {nn.BatchNorm2d: _PassedBatchNorm2d, nn.ReLU: _PassedReLU, nn.MaxPool2d: _PassedMaxPool2d}


class SplitHandle:
    """What split_channels changed: ``chains`` (the modules' qualified names), and ``remove()``."""

    def __init__(self, chains: list[tuple[str, ...]], modules: list[nn.Module]) -> None:
        self.chains = chains
        self._modules = modules

    def remove(self) -> None:
        """Runs the chains unsplit again."""
        for m in self._modules:
            m.__class__ = m.__class__.__bases__[0]
            m.__dict__.pop("_tp_chain", None)
        self._modules = []

    def __repr__(self) -> str:
        return f"SplitHandle(chains={self.chains!r})"


def _find_chains(model: nn.Module) -> list[tuple[str, ...]]:
    """Names of each Conv2d -> BatchNorm2d -> ReLU [-> MaxPool2d] run in sequence, each module called once."""
    import gc

    try:
        return _trace_chains(model)
    finally:
        # An fx graph is a web of cycles that refers to the model's modules:
        # left to the cyclic collector, it would keep a model the program has
        # dropped (and its parameters and gradients) alive, in memory a
        # budget counts.
        gc.collect()


def _trace_chains(model: nn.Module) -> list[tuple[str, ...]]:
    import torch.fx

    try:
        graph = torch.fx.symbolic_trace(model).graph
    except Exception as e:  # fx raises many kinds on control flow it cannot trace
        raise ValueError(
            f"split_channels: cannot trace {type(model).__name__} with torch.fx ({type(e).__name__}: {e}); "
            "pass the chain's modules instead: split_channels(chain=(conv, bn, relu[, maxpool]))") from e
    calls: dict[str, int] = {}
    for node in graph.nodes:
        if node.op == "call_module":
            calls[node.target] = calls.get(node.target, 0) + 1
    kinds = (nn.Conv2d, nn.BatchNorm2d, nn.ReLU, nn.MaxPool2d)

    def module(node: Any, kind: type) -> nn.Module | None:
        if node.op != "call_module" or calls[node.target] != 1:
            return None
        m = model.get_submodule(node.target)
        return m if type(m) is kind else None

    def next_in_chain(node: Any) -> Any:
        """The node's only user, when it takes the node as its only argument."""
        users = list(node.users)
        if len(users) != 1 or users[0].args != (node,) or users[0].kwargs:
            return None
        return users[0]

    chains = []
    for node in graph.nodes:
        names, cur = [], node
        for kind in kinds:
            if cur is None or module(cur, kind) is None:
                break
            names.append(cur.target)
            cur = next_in_chain(cur)
        if len(names) >= 3:
            chains.append(tuple(names))
    return chains


# Note [Hooks on a split chain]
# A split chain runs as its convolution's forward: the convolution's output
# and the BatchNorm's and ReLU's are never whole, and their modules' forwards
# pass their input through. Hooks of those modules would see the chain's
# output (a 48x48 stem's hooks saw 24x24) or run once per chain rather than
# per module; so a chain whose modules have hooks of their own is not split,
# and a split chain whose modules were hooked since refuses to run, naming
# them. Global module hooks (register_module_forward_hook, tensorpager's own)
# see the modules as before.


def _check(chain: tuple[nn.Module, ...]) -> str | None:
    """Why this chain cannot be split, or None."""
    for m in chain:
        if (hooks := _hooked(m)) is not None:
            return (f"its {type(m).__name__} has {hooks}, which would see the whole chain's output in place of its "
                    "own (Note [Hooks on a split chain])")
    conv, bn, act, *pool = chain
    if type(conv) is not nn.Conv2d or type(bn) is not nn.BatchNorm2d or type(act) is not nn.ReLU:
        return "it is not Conv2d, BatchNorm2d, ReLU[, MaxPool2d] (exactly these classes)"
    if pool and (type(pool[0]) is not nn.MaxPool2d or pool[0].return_indices):
        return "its fourth module is not a MaxPool2d without return_indices"
    if len(pool) > 1:
        return "it has more than four modules"
    if conv.groups != 1 or conv.padding_mode != "zeros" or isinstance(conv.padding, str):
        return "its convolution is grouped, pads other than with zeros, or names its padding ('same', 'valid')"
    if bn.num_features != conv.out_channels:
        return "its BatchNorm2d does not have the convolution's output channels"
    return None


def split_channels(model: nn.Module | None = None, *, chain: tuple[nn.Module, ...] | None = None,
                   chunk_bytes: int | str = DEFAULT_CHUNK_BYTES) -> SplitHandle:
    """Runs model's Conv2d -> BatchNorm2d -> ReLU [-> MaxPool2d] chains in output-channel chunks.

    Found by tracing model with torch.fx (each module called once, each
    output used only by the next); or name one chain with ``chain=``. A chunk
    is the most output channels, in multiples of 8, whose convolution output
    fits in ``chunk_bytes`` (a size: ``"8MiB"``, or bytes), and never fewer
    than 8; a call too small for two chunks runs unsplit. Returns a handle
    whose ``remove()`` undoes it. Raises ValueError when there is nothing to
    split, naming why. A split chain is differentiable once: a backward with
    ``create_graph=True`` through it raises RuntimeError (Note [No double
    backward through the split] in split_chain.py).
    """
    size = _budget_value.positive_size(chunk_bytes, "split_channels: chunk_bytes")
    if (model is None) == (chain is None):
        raise ValueError("split_channels: pass a model, or chain=(conv, bn, relu[, maxpool]), not both")
    if chain is not None:
        named = [tuple(f"chain[{i}]" for i in range(len(chain)))]
        chains = [tuple(chain)]
    else:
        if any(type(m) is _SplitConv2d for m in model.modules()):
            # Before tracing: a split chain's forward is not traceable, and the
            # error would then blame torch.fx.
            raise ValueError(f"split_channels: {type(model).__name__} is split already; call remove() on the "
                             "handle the first split returned before splitting it again")
        named = _find_chains(model)
        chains = [tuple(model.get_submodule(n) for n in names) for names in named]
        if not chains:
            raise ValueError(f"split_channels: {type(model).__name__} has no Conv2d -> BatchNorm2d -> ReLU chain "
                             "whose modules are each called once, one after another")
    for names, modules in zip(named, chains):
        split_already = any(type(m) in (_SplitConv2d, *_PASSED.values()) for m in modules)
        why = "it is split already" if split_already else _check(modules)
        if why is not None:
            raise ValueError(f"split_channels: cannot split {' -> '.join(names)}: {why}")
    touched: list[nn.Module] = []
    for conv, bn, act, *pool in chains:
        conv.__dict__["_tp_chain"] = (bn, act, pool[0] if pool else None, size)
        conv.__class__ = _SplitConv2d
        for m in (bn, act, *pool):
            m.__class__ = _PASSED[type(m)]
        touched += [conv, bn, act, *pool]
    return SplitHandle(named, touched)

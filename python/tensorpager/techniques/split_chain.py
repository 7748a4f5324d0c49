"""The split chain's autograd function: a convolution block run a few output channels at a time.

A ``Conv2d -> BatchNorm2d -> ReLU [-> MaxPool2d]`` chain that split.py
(``tp.split_channels``) patched runs here: ``_Chain`` holds its modules and
cuts its output channels into chunks, and ``_SplitChain`` runs them, keeping
only the chain's input for backward, which recomputes one chunk at a time.
split.py finds the chains in a model and swaps their modules' classes.

Note [Why the split is exact]
Every operator of the chain computes each output channel from that channel
alone, except the convolution, which reads all input channels (so its input
stays whole) but writes each output channel from its own filter. So the
chunk [c0, c1) of the chain's output is the chain run with the filters,
BatchNorm parameters and buffers [c0, c1), and in backward the BatchNorm,
ReLU and pool gradients of a chunk come from that chunk's output gradient
alone. Those kernels give the same bits on a chunk as on the whole (on the
CPU, checked by tests/python/test_split.py over shapes, chunk sizes and
thread counts). The convolution's weight gradient does not: it sums over the
batch and the image, and oneDNN orders that sum by the tensor's shape (a
chunk of filters gave other bits at some shapes; Measured: docs/decisions.md,
Note [Why the split is exact]). So the backward gathers the convolution's output gradient whole,
chunk by chunk, and makes the one ``convolution_backward`` call autograd would
have made, for the input, weight and bias gradients at once. That whole
gradient is the split's largest tensor: the size of the convolution's
output, where the unsplit backward held four such tensors (the BatchNorm's
input, its output gradient, its input gradient and temporaries). Grouped
convolutions are not split (a chunk of filters would read a chunk of
inputs). Untested on CUDA, where cuDNN picks kernels by shape too.

Note [The split lends its incoming gradient]
Once the chunks have their gradients, the backward no longer reads its
incoming gradient (the chain's output gradient), but autograd holds it until
the backward returns, through the one ``convolution_backward`` call, which
allocates as much again as the convolution's output on the CPU. So, under a
budget that lends (Note [Lending parameters and gradients] in _lend.py), the
incoming gradient is lent to the runtime for that call: the backward takes a
loan from the open lender (``Lender.lend_held``; none outside a budget that
lends) and gives it back when the call returns or raises. Where the budget is
short, the gradient waits in host memory meanwhile: it is a tenth of what
the split stem's backward holds, and resident it was what `dtr` lacked at 0.3
of the unsplit peak (tests/python/test_budget_resnet18.py). Measured:
docs/decisions.md, Note [The split lends its incoming gradient].

Note [No double backward through the split]
The backward computes the gradients without a graph, so a gradient taken
with ``create_graph=True`` (a gradient penalty, a Hessian-vector product)
cannot be differentiated again; the backward refuses it, saying what to do.
Running the chain unsplit inside such a backward, with autograd recording,
gives the right derivatives but not the unsplit bits: a penalty on the input
gradient, alone or added to the loss, gave the parameters gradients that
differed from the unsplit model's in the last bits. Gradients that reach an
intermediate by several paths are summed there in the unsplit graph; here
they travel apart, through the split's backward and through the recompute,
and meet only at the chain's inputs and parameters.

Note [Running statistics]
The forward runs each chunk's BatchNorm as ``nn.BatchNorm2d.forward`` does,
on slices of its buffers, so the running mean and variance are updated once,
per channel, as unsplit (``num_batches_tracked`` once per call). The
backward's recompute passes no running buffers: in training mode BatchNorm
normalises with the batch's statistics, which it computes again, exactly,
from the same input; in evaluation mode it uses the unchanged running buffers.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from tensorpager import _open_lender

# Chunks are whole multiples of 8 channels: oneDNN computes float32 output
# channels 8 at a time with AVX2 (16 with AVX-512), and a ResNet-18 stem at
# batch 256, 96x96, ran its forward and backward 1.9x slower than unsplit in
# chunks of 4 channels, 5.8x in chunks of 1, and 1.2x in chunks of 8 or 16.
CHANNEL_QUANTUM = 8


def _count_batch(bn: nn.BatchNorm2d) -> float:
    """What nn.BatchNorm2d.forward does before it normalises: counts the batch, returns the average's factor."""
    factor = 0.0 if bn.momentum is None else bn.momentum
    if bn.training and bn.track_running_stats and bn.num_batches_tracked is not None:
        bn.num_batches_tracked.add_(1)
        factor = 1.0 / float(bn.num_batches_tracked) if bn.momentum is None else bn.momentum
    return factor


@dataclasses.dataclass
class _Chain:
    conv: nn.Conv2d
    bn: nn.BatchNorm2d
    act: nn.ReLU
    pool: nn.MaxPool2d | None
    chunk_bytes: int

    def chunks(self, x: torch.Tensor) -> Iterator[tuple[int, int]]:
        """Output-channel ranges: a multiple of CHANNEL_QUANTUM channels, the most whose convolution
        output fits in chunk_bytes, and never fewer than CHANNEL_QUANTUM."""
        n, _, h, w = self.conv_out_shape(x)
        per_channel = max(1, n * h * w * x.element_size())
        step = max(CHANNEL_QUANTUM, self.chunk_bytes // per_channel // CHANNEL_QUANTUM * CHANNEL_QUANTUM)
        channels = self.conv.out_channels
        return ((c, min(c + step, channels)) for c in range(0, channels, step))

    def conv_out_shape(self, x: torch.Tensor) -> tuple[int, ...]:
        conv = self.conv
        size = [(n + 2 * p - d * (k - 1) - 1) // s + 1
                for n, p, d, k, s in zip(x.shape[2:], conv.padding, conv.dilation, conv.kernel_size, conv.stride)]
        return (x.shape[0], conv.out_channels, *size)

    def conv_chunk(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        """The convolution's output channels for the filters w (a slice of its weight)."""
        conv = self.conv
        return F.conv2d(x, w, b, conv.stride, conv.padding, conv.dilation, conv.groups)

    def tail(self, y: torch.Tensor, c0: int, c1: int, bw: torch.Tensor | None, bb: torch.Tensor | None,
             running: bool, factor: float) -> torch.Tensor:
        """BatchNorm, ReLU and pool on the convolution's channels [c0, c1) (Note [Running statistics])."""
        bn, pool = self.bn, self.pool
        use_buffers = not bn.training or bn.track_running_stats
        rm = bn.running_mean[c0:c1] if use_buffers and bn.running_mean is not None else None
        rv = bn.running_var[c0:c1] if use_buffers and bn.running_var is not None else None
        batch_stats = bn.training or (rm is None and rv is None)
        if batch_stats and not running:
            rm = rv = None  # the recompute: the batch's statistics again, buffers untouched
        y = F.batch_norm(y, rm, rv, bw, bb, batch_stats, factor, bn.eps)
        y = F.relu(y, inplace=self.act.inplace)
        if pool is not None:
            y = F.max_pool2d(y, pool.kernel_size, pool.stride, pool.padding, pool.dilation, pool.ceil_mode)
        return y

    def params(self) -> list[torch.Tensor | None]:
        return [self.conv.weight, self.conv.bias, self.bn.weight, self.bn.bias]

    def splits(self, x: torch.Tensor) -> bool:
        """Whether this call runs split: exact (Note [Why the split is exact]) and worth it.

        Not under autocast: the backward's recompute runs outside it, so it
        would compute in another precision than the forward did."""
        if x.dim() != 4 or not x.is_contiguous() or torch.is_autocast_enabled(x.device.type):
            return False
        return sum(1 for _ in self.chunks(x)) > 1

    def unsplit(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.Conv2d.forward(self.conv, x)
        y = nn.BatchNorm2d.forward(self.bn, y)
        y = nn.ReLU.forward(self.act, y)
        return y if self.pool is None else nn.MaxPool2d.forward(self.pool, y)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        factor = _count_batch(self.bn)
        return _SplitChain.apply(x, self, factor, *self.params())


class _SplitChain(torch.autograd.Function):
    """The chain run chunk by chunk; backward recomputes each chunk and differentiates it alone."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, chain: _Chain, factor: float, *params: torch.Tensor | None) -> torch.Tensor:
        out = None
        for c0, c1 in chain.chunks(x):
            w, b, bw, bb = _slices(params, c0, c1)
            y = chain.tail(chain.conv_chunk(x, w, b), c0, c1, bw, bb, running=True, factor=factor)
            if out is None:
                out = y.new_empty((y.shape[0], chain.conv.out_channels, *y.shape[2:]))
            out[:, c0:c1].copy_(y)
            del y
        ctx.chain, ctx.factor = chain, factor
        ctx.save_for_backward(x, *params)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        chain: _Chain = ctx.chain
        if torch.is_grad_enabled():  # create_graph=True: Note [No double backward through the split]
            conv = chain.conv
            raise RuntimeError(
                f"tp.split_channels: double backward is not supported through a split chain (the one from the Conv2d "
                f"of {conv.in_channels} -> {conv.out_channels} channels): its gradients are computed without a "
                "graph, so one taken with create_graph=True (a gradient penalty, a Hessian-vector product) cannot "
                "be differentiated again. For such a step, run the model unsplit: call remove() on the handle "
                "split_channels returned (the unsplit model's gradients are the split's, bit for bit), and split "
                "it again after")
        x, w, b, bw, bb = ctx.saved_tensors
        need_x, _, _, need_w, need_b, need_bw, need_bb = ctx.needs_input_grad
        need_bw, need_bb = need_bw and bw is not None, need_bb and bb is not None
        # The convolution's output gradient, whole (Note [Why the split is exact]).
        grad_y = x.new_empty(chain.conv_out_shape(x))
        grad_bw = torch.empty_like(bw) if need_bw else None
        grad_bb = torch.empty_like(bb) if need_bb else None
        for c0, c1 in chain.chunks(x):
            wc, bc, bwc, bbc = _slices((w, b, bw, bb), c0, c1)
            with torch.no_grad():
                y = chain.conv_chunk(x, wc, bc)
            # Identity hooks: what a chunk's recompute saves lives only until
            # the next line but one, so it is not a runtime's to manage (and a
            # runtime holding it would hold a chunk through convolution_backward).
            with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(_same, _same):
                y.requires_grad_()
                bwc = bwc if bwc is None else bwc.detach().requires_grad_(need_bw)
                bbc = bbc if bbc is None else bbc.detach().requires_grad_(need_bb)
                out = chain.tail(y, c0, c1, bwc, bbc, running=False, factor=ctx.factor)
                grads = iter(torch.autograd.grad(out, [y] + [bwc] * need_bw + [bbc] * need_bb,
                                                 grad_out[:, c0:c1].contiguous()))
                del out
            grad_y[:, c0:c1].copy_(next(grads))
            if need_bw:
                grad_bw[c0:c1].copy_(next(grads))
            if need_bb:
                grad_bb[c0:c1].copy_(next(grads))
            del y, grads  # nothing of a chunk outlives it: convolution_backward comes next
        conv = chain.conv
        lender = _open_lender.current()  # Note [The split lends its incoming gradient]
        loan = None if lender is None else lender.lend_held(grad_out)
        raised = True
        try:
            grad_x, grad_w, grad_b = torch.ops.aten.convolution_backward(
                grad_y, x, w, None if b is None else [b.shape[0]], conv.stride, conv.padding, conv.dilation, False,
                [0, 0], conv.groups, [need_x, need_w, need_b and b is not None])
            raised = False
        finally:
            if loan is not None:
                loan.give_back(quiet=raised)  # on an error, the call's is the one to see
        return (grad_x, None, None, grad_w, grad_b, grad_bw, grad_bb)


def _same(t: torch.Tensor) -> torch.Tensor:
    return t


def _slices(params: Any, c0: int, c1: int) -> list[torch.Tensor | None]:
    return [p if p is None else p[c0:c1] for p in params]

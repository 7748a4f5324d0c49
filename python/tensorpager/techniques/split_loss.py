"""A language model's head and loss, run in row chunks: ``tp.split_cross_entropy``.

``tp.split_cross_entropy(hidden, weight, target)`` is
``F.cross_entropy((hidden @ weight.t()).reshape(-1, V), target.reshape(-1))``,
bit-identically (Note [Why the split loss is exact]), without the logits::

    h = model.hidden(idx)                          # (B, T, d), before the head
    loss = tp.split_cross_entropy(h, model.tok.weight, y)
    loss.backward()

Why: a decoder's logits are its largest tensors (B x T x V floats: 2 MiB a
sample at 128 tokens and a 4096-word vocabulary), and the unsplit loss holds
three of them at once in backward (log-softmax's output, its gradient and the
logits' gradient), which no eviction lowers. Split, the forward holds one
chunk of rows at a time and the backward holds the logits' gradient whole,
plus a chunk.

Note [Why the split loss is exact]
Each row of the logits is its own matrix-vector product, and log-softmax and
its backward work row by row. Log-softmax gives a row's bits in a chunk of any
size; the matrix product does not: MKL multiplies a few rows with other
kernels (chunks of 1 to 16 rows gave other bits, at some shapes). So every
chunk has the same number of rows, at least MIN_ROWS (64), the last one
overlapping the one before it (its rows are written twice, with the same
values), and a matrix of fewer rows runs whole. Chunks of 32 rows or more
gave the whole product's bits at every shape and thread count tried, which
tests/python/test_split_loss.py keeps checking; this is a property of the
library's kernels, measured, not promised by it. What sums across
rows is handled as autograd would: the loss is ``nll_loss`` over a column of
the target log-probabilities, which reduces them in the order and with the
ignored rows that ``nll_loss`` over the whole log-softmax does (it reads one
value a row); and the gradients of the hidden states and the weight are the
two whole ``mm`` calls autograd's matmul backward makes, from the logits'
gradient gathered whole. Untested on CUDA.

Note [No double backward through the split loss]
The backward computes the gradients without a graph, so a gradient taken
with ``create_graph=True`` (a gradient penalty, a Hessian-vector product)
cannot be differentiated again; the backward refuses it, saying what to do.
Computing the unsplit loss inside such a backward, with autograd recording,
gives the right derivatives but not always the unsplit bits: a penalty on the
loss's gradient alone gave them, the loss and the penalty backpropagated
together did not (in the last bits). The unsplit graph sums their gradients
at the log-probabilities, before the head's matrix product; here they travel
apart, through the split's backward and through the recompute, and meet only
at the hidden states and the weight.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch
import torch.nn.functional as F

from tensorpager import _budget_value

DEFAULT_CHUNK_BYTES = 32 << 20
MIN_ROWS = 64  # Note [Why the split loss is exact]: fewer rows take other matrix kernels
_REDUCTIONS = {"mean": 1, "sum": 2}  # at::Reduction, as F.nll_loss passes it
# The ignore index of the one-column problem nll_loss solves here: any value
# but 0, the column every counted row reads. The caller's own ignore_index
# could be 0 (a padding id), which made every row ignored (a NaN loss).
_COLUMN_IGNORE = -100


def _row_chunks(n: int, rows: int) -> Iterator[tuple[int, int]]:
    """[r0, r1) ranges of exactly `rows` rows covering n (the last one overlaps the one before), or one of n."""
    for r0 in range(0, n, rows):
        yield (r0, r0 + rows) if r0 + rows <= n else (max(0, n - rows), n)


def _check_targets(target: torch.Tensor, classes: int, ignore_index: int) -> None:
    """Raises F.cross_entropy's IndexError, naming the first target that is neither a class nor ignored.

    Before the split runs: there, ``gather`` would raise a RuntimeError that
    names neither the target nor the loss. On the CPU only: on a GPU the check
    would make the host wait for the device at every call, and there
    F.cross_entropy fails with a device-side assert, as the split's gather does."""
    if target.device.type != "cpu":
        return
    bad = (target != ignore_index) & ((target < 0) | (target >= classes))
    if bad.any():
        raise IndexError(f"split_cross_entropy: target {int(target[bad][0])} is out of bounds: a target must be a "
                         f"class index in [0, {classes - 1}] (the weight's {classes} rows) or ignore_index "
                         f"({ignore_index})")


class _SplitCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, rows: int,
                ignore_index: int, reduction: str) -> torch.Tensor:
        h2, y = hidden.reshape(-1, hidden.shape[-1]), target.reshape(-1)
        ignored = y == ignore_index
        index = torch.where(ignored, 0, y)[:, None]  # the column a row reads (any, for ignored rows)
        picked = h2.new_empty((h2.shape[0], 1))  # each row's log-probability of its target
        for r0, r1 in _row_chunks(h2.shape[0], rows):
            picked[r0:r1] = F.log_softmax(h2[r0:r1].mm(weight.t()), 1).gather(1, index[r0:r1])
        column_target = torch.where(ignored, _COLUMN_IGNORE, 0)
        mode = _REDUCTIONS[reduction]
        loss, total_weight = torch.ops.aten.nll_loss_forward(picked, column_target, None, mode, _COLUMN_IGNORE)
        ctx.rows, ctx.mode = rows, mode
        ctx.save_for_backward(hidden, weight, index, picked, column_target, total_weight)
        return loss

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        if torch.is_grad_enabled():  # create_graph=True: Note [No double backward through the split loss]
            raise RuntimeError(
                "tp.split_cross_entropy: double backward is not supported: its gradients are computed without a "
                "graph, so one taken with create_graph=True (a gradient penalty, a Hessian-vector product) cannot be "
                "differentiated again. For that loss term use the unsplit expression, "
                "F.cross_entropy((hidden @ weight.t()).reshape(-1, V), target.reshape(-1)) (the split's gradients "
                "are its gradients, bit for bit)")
        hidden, weight, index, picked, column_target, total_weight = ctx.saved_tensors
        # nll_loss's backward: -grad / (rows counted) at each row's target; 0 on ignored rows.
        grad_picked = torch.ops.aten.nll_loss_backward(grad_loss, picked, column_target, None, ctx.mode,
                                                       _COLUMN_IGNORE, total_weight)
        h2 = hidden.reshape(-1, hidden.shape[-1])
        grad_logits = h2.new_empty((h2.shape[0], weight.shape[0]))
        for r0, r1 in _row_chunks(h2.shape[0], ctx.rows):
            lsm = F.log_softmax(h2[r0:r1].mm(weight.t()), 1)
            grad_lsm = torch.zeros_like(lsm).scatter_(1, index[r0:r1], grad_picked[r0:r1])
            grad_logits[r0:r1] = torch._log_softmax_backward_data(grad_lsm, lsm, 1, lsm.dtype)
            del lsm, grad_lsm
        need_h, need_w = ctx.needs_input_grad[:2]
        # mm's backward for h2 @ weight.t(), as autograd computes it for a
        # row-major h2 and a transposed weight (mm_mat1_backward, mm_mat2_backward).
        grad_h = grad_logits.mm(weight).view(hidden.shape) if need_h else None
        grad_w = grad_logits.t().mm(h2) if need_w else None
        return grad_h, grad_w, None, None, None, None


def split_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, *,
                        ignore_index: int = -100, reduction: str = "mean",
                        chunk_bytes: int | str = DEFAULT_CHUNK_BYTES) -> torch.Tensor:
    """``F.cross_entropy((hidden @ weight.t()).reshape(-1, V), target.reshape(-1))``, logits never whole.

    hidden: (..., d), the head's input; weight: (V, d), the head's weight (a
    tied embedding's, say; no bias); target: hidden's leading shape, class
    indices. A chunk is the most rows whose logits fit in ``chunk_bytes`` (a
    size, "32MiB", or bytes), at least 64. Bit-identical to the unsplit
    expression (Note [Why the split loss is exact]). Differentiable once: a
    backward with ``create_graph=True`` raises RuntimeError (Note [No double
    backward through the split loss]). Raises ValueError on shapes or options
    it does not take, naming them, and IndexError, as F.cross_entropy does on
    the CPU, on a target that is neither a class index nor ignore_index.
    """
    size = _budget_value.positive_size(chunk_bytes, "split_cross_entropy: chunk_bytes")
    if reduction not in ("mean", "sum"):
        raise ValueError(f"split_cross_entropy: reduction must be 'mean' or 'sum', got {reduction!r}")
    if weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"split_cross_entropy: weight must be (vocabulary, {hidden.shape[-1]}) for hidden of "
                         f"shape {tuple(hidden.shape)}, got {tuple(weight.shape)}")
    if tuple(target.shape) != tuple(hidden.shape[:-1]) or target.dtype != torch.long:
        raise ValueError(f"split_cross_entropy: target must be int64 of shape {tuple(hidden.shape[:-1])}, got "
                         f"{target.dtype} of shape {tuple(target.shape)}")
    _check_targets(target, weight.shape[0], ignore_index)
    if not hidden.is_contiguous() or not weight.is_contiguous() or torch.is_autocast_enabled(hidden.device.type):
        # Other strides take other mm backward formulas; under autocast
        # the backward's recompute would run in another precision.
        logits = hidden @ weight.t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=ignore_index,
                               reduction=reduction)
    rows = max(MIN_ROWS, size // (weight.shape[0] * hidden.element_size()))
    return _SplitCrossEntropy.apply(hidden, weight, target, rows, ignore_index, reduction)

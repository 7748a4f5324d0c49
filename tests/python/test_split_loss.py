"""tp.split_cross_entropy: a tied head and cross-entropy run in row chunks give
the bits of ``F.cross_entropy(hidden @ weight.t(), ...)`` (loss, and the
gradients of the hidden states and of the weight, also where the weight is an
embedding's), over shapes, chunk sizes, thread counts, reductions and ignored
rows; and refuse what they do not take. Its use under a budget is measured by
bench/max_batch.py (the GPT rows with +split)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tensorpager.techniques import split_loss
from tensorpager.techniques.split_loss import split_cross_entropy


def _tied_step(split: bool, b: int, t: int, d: int, v: int, reduction: str, ignored: bool,
               chunk_rows: int, ignore_index: int = -100) -> tuple[torch.Tensor, ...]:
    """A tied embedding and head around one layer: the loss and the gradients."""
    torch.manual_seed(0)
    emb = (torch.randn(v, d) * 0.05).requires_grad_()
    layer = (torch.randn(d, d) * 0.1).requires_grad_()
    idx, y = torch.randint(0, v, (b, t)), torch.randint(0, v, (b, t))
    if ignored:
        y[0, :5] = ignore_index
    h = torch.tanh(F.embedding(idx, emb) @ layer)
    if split:
        loss = split_cross_entropy(h, emb, y, reduction=reduction, chunk_bytes=chunk_rows * v * 4,
                                   ignore_index=ignore_index)
    else:
        logits = h @ emb.t()
        loss = F.cross_entropy(logits.reshape(-1, v), y.reshape(-1), reduction=reduction, ignore_index=ignore_index)
    loss.backward()
    return loss.detach(), emb.grad, layer.grad


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n,d,v", [(700, 32, 50), (513, 64, 1000), (1000, 768, 5000), (257, 17, 4099)])
def test_matrix_rows_in_chunks_of_64_give_the_whole_products_bits(threads: int, n: int, d: int, v: int) -> None:
    # What Note [Why the split loss is exact] measures of the library.
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(0)
        h, w = torch.randn(n, d), torch.randn(v, d)
        whole = h.mm(w.t())
        for r0, r1 in split_loss._row_chunks(n, split_loss.MIN_ROWS):
            assert torch.equal(h[r0:r1].mm(w.t()), whole[r0:r1]), (r0, r1)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("b,t,d,v,reduction,ignored,chunk_rows", [
    (64, 128, 256, 4096, "mean", False, 1000),  # the max-batch GPT's head at batch 64
    (4, 128, 256, 4096, "mean", True, 64),
    (3, 43, 64, 1000, "sum", True, 100),  # 129 rows: chunks [0, 100), [29, 129)
    (7, 100, 32, 50, "mean", False, 1),  # 1 asks for the fewest rows, 64
    (2, 20, 16, 30, "mean", False, 1),  # 40 rows, fewer than 64: whole
])
def test_split_loss_gives_the_unsplit_bits(threads: int, b: int, t: int, d: int, v: int, reduction: str,
                                           ignored: bool, chunk_rows: int) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        ref = _tied_step(False, b, t, d, v, reduction, ignored, chunk_rows)
        split = _tied_step(True, b, t, d, v, reduction, ignored, chunk_rows)
    finally:
        torch.set_num_threads(before)
    assert [torch.equal(a, c) for a, c in zip(ref, split)] == [True, True, True]


def test_split_loss_runs_split_and_falls_back_where_it_would_not_be_exact() -> None:
    h, w, y = torch.randn(2, 8, 4, requires_grad=True), torch.randn(10, 4), torch.randint(0, 10, (2, 8))
    assert type(split_cross_entropy(h, w, y, chunk_bytes=1).grad_fn).__name__ == "_SplitCrossEntropyBackward"
    assert list(split_loss._row_chunks(129, 64)) == [(0, 64), (64, 128), (65, 129)]
    assert list(split_loss._row_chunks(40, 64)) == [(0, 40)]
    assert list(split_loss._row_chunks(128, 64)) == [(0, 64), (64, 128)]
    # A transposed hidden would take other mm backward formulas: unsplit.
    ht = torch.randn(8, 2, 4).transpose(0, 1).requires_grad_()
    loss = split_cross_entropy(ht, w, y)
    assert type(loss.grad_fn).__name__ != "_SplitCrossEntropyBackward"
    assert torch.equal(loss, F.cross_entropy((ht @ w.t()).reshape(-1, 10), y.reshape(-1)))


def test_split_loss_refuses_what_it_does_not_take() -> None:
    h, w, y = torch.randn(2, 8, 4), torch.randn(10, 4), torch.randint(0, 10, (2, 8))
    with pytest.raises(ValueError, match="reduction must be 'mean' or 'sum', got 'none'"):
        split_cross_entropy(h, w, y, reduction="none")
    with pytest.raises(ValueError, match=r"weight must be \(vocabulary, 4\).*got \(10, 5\)"):
        split_cross_entropy(h, torch.randn(10, 5), y)
    with pytest.raises(ValueError, match=r"target must be int64 of shape \(2, 8\)"):
        split_cross_entropy(h, w, y[:, :4])
    with pytest.raises(ValueError, match="split_cross_entropy: chunk_bytes must be a positive size.*'big'"):
        split_cross_entropy(h, w, y, chunk_bytes="big")


@pytest.mark.parametrize("ignore_index", [0, 3, -1])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_any_ignore_index_gives_the_unsplit_bits(ignore_index: int, reduction: str) -> None:
    # A padding id of 0 made every row ignored: a NaN loss (issue 30).
    ref = _tied_step(False, 3, 43, 64, 1000, reduction, True, 100, ignore_index)
    split = _tied_step(True, 3, 43, 64, 1000, reduction, True, 100, ignore_index)
    assert torch.isfinite(split[0])
    assert [torch.equal(a, c) for a, c in zip(ref, split)] == [True, True, True]


@pytest.mark.parametrize("bad,ignore_index", [(1000, -100), (1003, -100), (-1, -100), (-5, 3), (-100, -1)])
@pytest.mark.parametrize("contiguous", [True, False])
def test_an_out_of_range_target_raises_cross_entropys_index_error(bad: int, ignore_index: int,
                                                                  contiguous: bool) -> None:
    # It raised gather's RuntimeError, naming neither the target nor the loss (issue 30).
    torch.manual_seed(0)
    h, w, y = torch.randn(3, 43, 64, requires_grad=True), torch.randn(1000, 64), torch.randint(0, 1000, (3, 43))
    y[2, 7] = bad
    if not contiguous:  # the fallback to the unsplit expression
        h = h.detach().transpose(0, 1).contiguous().transpose(0, 1).requires_grad_()
    with pytest.raises(IndexError):
        F.cross_entropy((h @ w.t()).reshape(-1, 1000), y.reshape(-1), ignore_index=ignore_index)
    with pytest.raises(IndexError, match=rf"split_cross_entropy: target {bad} is out of bounds: .* in \[0, 999\] "
                                         rf"\(the weight's 1000 rows\) or ignore_index \({ignore_index}\)"):
        split_cross_entropy(h, w, y, ignore_index=ignore_index, chunk_bytes=64 * 1000 * 4)


@pytest.mark.parametrize("ignore_index", [1000, -7])
def test_a_target_out_of_range_is_taken_when_it_is_the_ignore_index(ignore_index: int) -> None:
    ref = _tied_step(False, 3, 43, 64, 1000, "mean", True, 64, ignore_index)
    split = _tied_step(True, 3, 43, 64, 1000, "mean", True, 64, ignore_index)
    assert [torch.equal(a, c) for a, c in zip(ref, split)] == [True, True, True]


@pytest.mark.parametrize("wrt", ["hidden", "weight"])
def test_double_backward_is_refused_naming_the_split_and_what_to_use(wrt: str) -> None:
    # It failed at the second backward with "element 0 of tensors does not
    # require grad", naming no split (issue 30). Note [No double backward
    # through the split loss]: a recompute gave other bits.
    torch.manual_seed(0)
    emb = (torch.randn(1000, 64) * 0.05).requires_grad_()
    h = torch.tanh(F.embedding(torch.randint(0, 1000, (3, 43)), emb))
    y = torch.randint(0, 1000, (3, 43))
    loss = split_cross_entropy(h, emb, y, chunk_bytes=64 * 1000 * 4)
    assert type(loss.grad_fn).__name__ == "_SplitCrossEntropyBackward"
    with pytest.raises(RuntimeError, match=r"tp.split_cross_entropy: double backward is not supported: .*"
                                           r"create_graph=True .* use the unsplit expression, F.cross_entropy"):
        torch.autograd.grad(loss, h if wrt == "hidden" else emb, create_graph=True)
    # Refused before anything was computed: the graph is whole, and a plain
    # backward gives the unsplit bits.
    loss.backward(retain_graph=True)  # h's graph, for the unsplit loss
    split_grad = emb.grad.clone()
    emb.grad = None
    F.cross_entropy((h @ emb.t()).reshape(-1, 1000), y.reshape(-1)).backward()
    assert torch.equal(split_grad, emb.grad)

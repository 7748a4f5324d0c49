#pragma once
// Micro-batching for LibTorch programs: one optimizer step over a batch, run
// as n smaller forward/backward passes so that activation memory falls by
// about n. The Python twin is tensorpager.microbatch (same rules).
//
// Note [Micro-batch loss scaling]
// With plain gradient accumulation, micro-batch i's mean loss is scaled by
// its share of the batch (rows_i / rows) before backward, so the gradient
// accumulated in .grad is the full batch's mean-loss gradient whatever the
// split (sizes may differ by one row when n does not divide the batch). With
// AdamA the losses are not scaled: AdamA divides each micro-batch's
// gradient by micro_batches itself (Note [AdamA update rule]), which equals
// the full-batch rule only for equal shares, so the batch must divide evenly
// and n must equal the optimizer's micro_batches.
//
// Note [BatchNorm under micro-batching]
// A BatchNorm layer in training mode normalises each micro-batch with that
// micro-batch's statistics, so the result is not the full-batch computation
// (noisier statistics, different running averages). Models without batch
// statistics (LayerNorm, GroupNorm) are unaffected. The standard remedy
// tensorpager offers is to replace BatchNorm by GroupNorm before training
// (Python: tensorpager.microbatch.replace_batchnorm; Wu and He, 2018), which
// changes the model, so it is never done silently: the Python microbatch()
// warns when a BatchNorm layer in training mode runs under n > 1.

#include <cstdint>
#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

namespace tensorpager::optim {

/// Computes the mean loss of one micro-batch: called with the micro-batch's
/// slice of every batch tensor, in order.
using micro_step = std::function<at::Tensor(const std::vector<at::Tensor>& micro_batch)>;

/// Splits every tensor of `batch` along dimension 0 into n micro-batches
/// (sizes differing by at most one; all tensors must have the same number of
/// rows), runs step and backward on each in turn (Note [Micro-batch loss
/// scaling]), then, when `optimizer` is given, calls optimizer->step() and
/// zero_grad(). Returns the batch's mean loss (detached).
///
/// Without an optimizer the gradients stay in .grad for the caller to use.
/// With a tensorpager::optim::adama, n must equal its micro_batches and
/// divide the batch.
/// Throws tp::invalid_argument for n < 1, n larger than the batch, rows that
/// differ, or an AdamA mismatch; nothing has run then. Not thread-safe with
/// other users of the same parameters.
at::Tensor microbatch(const micro_step& step, const std::vector<at::Tensor>& batch, std::int64_t n,
                      torch::optim::Optimizer* optimizer = nullptr);

}  // namespace tensorpager::optim

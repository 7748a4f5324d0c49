#pragma once
// The per-parameter arithmetic of AdamA (Adam Accumulation), shared by the
// LibTorch optimizer (adama.hpp) and the Python one (tensorpager.optim.AdamA,
// through tensorpager._C). Includes ATen only.
//
// Note [AdamA update rule]
// Gradient accumulation over M micro-batches keeps every gradient alive until
// the optimizer step. AdamA folds each micro-batch's gradient into Adam's
// moments as soon as autograd has produced it, and frees it. For one step t:
//
//   first fold of the step:  m <- b1*m,  v <- b2*v          (decay once)
//   every micro-batch i:     g  = g_i (+ wd*p when weight decay is coupled)
//                            m <- m + (1-b1) * g   / M
//                            v <- v + (1-b2) * g^2 / M      (square, then average)
//   update (after the last): t <- t+1
//                            p <- p * (1 - lr*wd)            (decoupled only)
//                            p <- p - lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
//
// g_i is the gradient of micro-batch i's *mean* loss: the division by M is
// the optimizer's, so a loop must not scale its losses. At M = 1 this is
// torch.optim.Adam (and AdamW with decoupled weight decay) exactly, up to
// rounding: Adam writes m.lerp_(g, 1-b1) where AdamA writes b1*m + (1-b1)*g.
// For M > 1 the second moment is the mean of squares where Adam over the
// summed gradient would use the square of the mean; the paper reports the
// same convergence. The parameter is constant between the folds of one step,
// so coupled weight decay adds the same wd*p to every micro-batch's gradient.

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace tensorpager::optim {

/// The hyper-parameters one fold or update needs (a parameter group's view).
/// A plain value. Requires: 0 <= beta1, beta2 < 1; lr, eps, weight_decay >= 0;
/// micro_batches >= 1 (validate_hyper() checks).
struct adama_hyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = false;  ///< AdamW-style: decay the parameter, not the gradient
  std::int64_t micro_batches = 1;
};

/// Throws tp::invalid_argument naming the first value out of range and the
/// accepted range. Thread-safe (pure).
void validate_hyper(const adama_hyper& h);

/// Folds one micro-batch's gradient into the moments (Note [AdamA update
/// rule]); with first_fold, decays the moments first. exp_avg and exp_avg_sq
/// are updated in place; grad and param are only read.
/// Requires: exp_avg, exp_avg_sq, grad and param have the same shape, dtype
/// and device; grad is dense. Throws tp::invalid_argument otherwise.
/// Runs without recording autograd history. Thread-safety: concurrent calls
/// must use distinct moment tensors. Stream: torch's current stream.
void fold_gradient(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
                   const at::Tensor& exp_avg_sq, bool first_fold, const adama_hyper& h);

/// Applies the bias-corrected update of step `step` (already incremented,
/// >= 1) to param in place, and the decoupled decay when h.decoupled.
/// Allocates one temporary the size of param. Same requirements, threading
/// and stream as fold_gradient(); throws tp::invalid_argument for step < 1.
void apply_update(const at::Tensor& param, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                  std::int64_t step, const adama_hyper& h);

}  // namespace tensorpager::optim

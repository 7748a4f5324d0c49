// AdamA's per-parameter arithmetic: Note [AdamA update rule] in adama_kernels.hpp.

#include "hooks/optim/adama_kernels.hpp"

#include <cmath>
#include <string>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/StringUtil.h>

#include "core/errors.hpp"

namespace tensorpager::optim {
namespace {

/// Throws unless ok, naming the value and what is accepted.
void require(bool ok, const char* name, double value, const char* accepted) {
  if (!ok) throw tp::invalid_argument(c10::str("AdamA: ", name, " = ", value, " is out of range; accepted: ", accepted));
}

/// Requires: `other` matches param in shape, dtype and device (it is a moment
/// or the gradient of param).
void require_like(const at::Tensor& param, const at::Tensor& other, const char* what) {
  if (!other.defined()) throw tp::invalid_argument(std::string("AdamA: ") + what + " is undefined");
  if (other.layout() != at::kStrided) {
    throw tp::invalid_argument(std::string("AdamA: ") + what +
                               " is sparse; AdamA accepts dense gradients only (as torch.optim.Adam)");
  }
  if (other.sizes() != param.sizes() || other.scalar_type() != param.scalar_type() ||
      other.device() != param.device()) {
    throw tp::invalid_argument(c10::str("AdamA: ", what, " has shape ", other.sizes(), ", dtype ",
                                        other.scalar_type(), " on ", other.device(), "; its parameter has shape ",
                                        param.sizes(), ", dtype ", param.scalar_type(), " on ", param.device(),
                                        ": they must match"));
  }
}

}  // namespace

void validate_hyper(const adama_hyper& h) {
  // Negated comparisons reject NaN too.
  require(h.lr >= 0.0, "lr", h.lr, "lr >= 0");
  require(h.beta1 >= 0.0 && h.beta1 < 1.0, "beta1", h.beta1, "0 <= beta1 < 1");
  require(h.beta2 >= 0.0 && h.beta2 < 1.0, "beta2", h.beta2, "0 <= beta2 < 1");
  require(h.eps >= 0.0, "eps", h.eps, "eps >= 0");
  require(h.weight_decay >= 0.0, "weight_decay", h.weight_decay, "weight_decay >= 0");
  if (h.micro_batches < 1) {
    throw tp::invalid_argument(c10::str("AdamA: micro_batches = ", h.micro_batches,
                                        " is out of range; accepted: an integer >= 1"));
  }
}

void fold_gradient(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
                   const at::Tensor& exp_avg_sq, bool first_fold, const adama_hyper& h) {
  require_like(param, grad, "gradient");
  require_like(param, exp_avg, "exp_avg");
  require_like(param, exp_avg_sq, "exp_avg_sq");
  const at::NoGradGuard no_grad;
  // Moments are mutated through const handles: at::Tensor is a reference, and
  // in-place ops are const members of it.
  if (first_fold) {
    exp_avg.mul_(h.beta1);
    exp_avg_sq.mul_(h.beta2);
  }
  const double share = 1.0 / static_cast<double>(h.micro_batches);
  const at::Tensor g = (h.weight_decay != 0.0 && !h.decoupled) ? grad.add(param, h.weight_decay) : grad;
  exp_avg.add_(g, (1.0 - h.beta1) * share);
  exp_avg_sq.addcmul_(g, g, (1.0 - h.beta2) * share);
}

void apply_update(const at::Tensor& param, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                  std::int64_t step, const adama_hyper& h) {
  if (step < 1) throw tp::invalid_argument("AdamA: step = " + std::to_string(step) + "; accepted: step >= 1");
  require_like(param, exp_avg, "exp_avg");
  require_like(param, exp_avg_sq, "exp_avg_sq");
  const at::NoGradGuard no_grad;
  if (h.decoupled && h.weight_decay != 0.0) param.mul_(1.0 - h.lr * h.weight_decay);
  const auto t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(h.beta1, t);
  const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(h.beta2, t));
  // As torch.optim.Adam (single-tensor path), with one temporary instead of two.
  const at::Tensor denom = exp_avg_sq.sqrt().div_(bias_correction2_sqrt).add_(h.eps);
  param.addcdiv_(exp_avg, denom, -h.lr / bias_correction1);
}

}  // namespace tensorpager::optim

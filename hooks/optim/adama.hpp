#pragma once
// AdamA (Adam Accumulation) for LibTorch programs, in the shape of
// torch::optim::Adam: options, per-parameter state, an optimizer that saves
// and loads through torch::serialize. Gradients are folded into the moments
// by post-accumulate-grad hooks as soon as autograd produces them, and freed
// at once, so at no point of a step are all gradients resident (Note [AdamA
// update rule] in adama_kernels.hpp).
//
//   tensorpager::optim::adama opt(model->parameters(),
//                                 tensorpager::optim::adama_options(1e-3).micro_batches(4));
//   for (int i = 0; i < 4; ++i) loss_of(chunk[i]).backward();  // each grad folded and freed
//   opt.step();                                                 // one Adam update
//
// The loss of each micro-batch is its mean loss, unscaled: AdamA divides by
// micro_batches itself.

#include <cstdint>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include "hooks/optim/adama_kernels.hpp"

namespace tensorpager::optim {

/// The options of one parameter group. betas, eps, weight_decay as
/// torch::optim::AdamOptions; decoupled selects AdamW-style decay;
/// micro_batches is M in Note [AdamA update rule].
struct adama_options : public torch::optim::OptimizerCloneableOptions<adama_options> {
  using betas_t = std::tuple<double, double>;
  adama_options(double lr = 1e-3);  // NOLINT(google-explicit-constructor): as torch::optim::AdamOptions
  TORCH_ARG(double, lr) = 1e-3;
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, eps) = 1e-8;
  TORCH_ARG(double, weight_decay) = 0;
  TORCH_ARG(bool, decoupled) = false;
  TORCH_ARG(std::int64_t, micro_batches) = 1;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override;
  void set_lr(double lr) override;
  /// These options as the kernels take them.
  adama_hyper hyper() const;
  friend bool operator==(const adama_options& lhs, const adama_options& rhs);
};

/// One parameter's state: Adam's moments and step count, and how many
/// micro-batches have been folded since the last update (so a checkpoint
/// taken between micro-batches resumes exactly).
struct adama_param_state : public torch::optim::OptimizerCloneableParamState<adama_param_state> {
  TORCH_ARG(std::int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, exp_avg);
  TORCH_ARG(torch::Tensor, exp_avg_sq);
  TORCH_ARG(std::int64_t, folds) = 0;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  friend bool operator==(const adama_param_state& lhs, const adama_param_state& rhs);
};

/// The optimizer. Construction attaches a post-accumulate-grad hook to every
/// parameter that requires grad; the destructor removes them.
///
/// Thread-safety: hooks may run on autograd's device threads; folds are
/// serialised by an internal mutex. step(), save(), load() and
/// add_param_group() must not run while a backward pass is folding.
/// Lifetime: not copyable or movable (the hooks hold its address); it must
/// outlive every backward pass over its parameters, or be destroyed first.
/// Errors: tp::invalid_argument for options out of range, and for a parameter
/// that already has post-accumulate-grad hooks (Python's
/// register_post_accumulate_grad_hook, or another AdamA); torch's own errors
/// from the arithmetic.
class adama : public torch::optim::Optimizer {
 public:
  explicit adama(const std::vector<torch::optim::OptimizerParamGroup>& param_groups, adama_options defaults = {});
  explicit adama(std::vector<torch::Tensor> params, adama_options defaults = {});
  ~adama() override;
  adama(const adama&) = delete;
  adama& operator=(const adama&) = delete;
  adama(adama&&) = delete;
  adama& operator=(adama&&) = delete;

  /// Folds param's accumulated gradient into its moments and frees it
  /// (param.grad() becomes undefined). What the hooks call; call it yourself
  /// for a gradient written by hand. Does nothing when param has no gradient.
  /// Throws tp::invalid_argument for a tensor that is not one of the
  /// optimizer's parameters.
  void fold(const torch::Tensor& param);

  /// Folds any gradient still present (one more micro-batch), then applies
  /// one update to every parameter that received a fold since the last step,
  /// and starts the next accumulation. The closure, if any, runs first with
  /// grad mode on; its loss is returned.
  torch::Tensor step(LossClosure closure = nullptr) override;

  /// Adds a group and hooks its parameters.
  void add_param_group(const torch::optim::OptimizerParamGroup& param_group);

  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  /// Requires: mutex_ held. The group holding param, or nullptr.
  const torch::optim::OptimizerParamGroup* group_of(const torch::Tensor& param) const;
  void attach_hooks(const std::vector<torch::Tensor>& params);
  void fold_locked(const torch::Tensor& param);

  std::mutex mutex_;                  // guards state_ against concurrent folds
  std::vector<torch::Tensor> hooked_;  // parameters whose hook slot holds ours
};

}  // namespace tensorpager::optim

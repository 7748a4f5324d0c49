// AdamA for LibTorch: the optimizer class over the kernels of adama_kernels.hpp.

#include "hooks/optim/adama.hpp"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/serialize.h>
#include <torch/serialize/archive.h>

#include "core/errors.hpp"

namespace tensorpager::optim {
namespace {

/// The post-accumulate-grad hook AdamA puts on a parameter: autograd calls it
/// right after the parameter's .grad was written, with the parameter.
class fold_hook final : public torch::autograd::PostAccumulateGradHook {
 public:
  explicit fold_hook(adama* owner) : owner_(owner) {}
  void operator()(const torch::autograd::Variable& param) override { owner_->fold(param); }
  const adama* owner() const { return owner_; }

 private:
  adama* owner_;
};

const adama_options& options_of(const torch::optim::OptimizerParamGroup& group) {
  return static_cast<const adama_options&>(group.options());
}

}  // namespace

// --- adama_options -------------------------------------------------------------

adama_options::adama_options(double lr) : lr_(lr) {}

double adama_options::get_lr() const { return lr(); }

void adama_options::set_lr(double lr) { this->lr(lr); }

adama_hyper adama_options::hyper() const {
  return adama_hyper{lr(), std::get<0>(betas()), std::get<1>(betas()), eps(), weight_decay(), decoupled(),
                     micro_batches()};
}

bool operator==(const adama_options& lhs, const adama_options& rhs) {
  return lhs.lr() == rhs.lr() && lhs.betas() == rhs.betas() && lhs.eps() == rhs.eps() &&
         lhs.weight_decay() == rhs.weight_decay() && lhs.decoupled() == rhs.decoupled() &&
         lhs.micro_batches() == rhs.micro_batches();
}

void adama_options::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(betas);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(decoupled);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(micro_batches);
}

void adama_options::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(betas_t, betas);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, decoupled);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(std::int64_t, micro_batches);
}

// --- adama_param_state ---------------------------------------------------------

bool operator==(const adama_param_state& lhs, const adama_param_state& rhs) {
  return lhs.step() == rhs.step() && lhs.folds() == rhs.folds() && torch::equal(lhs.exp_avg(), rhs.exp_avg()) &&
         torch::equal(lhs.exp_avg_sq(), rhs.exp_avg_sq());
}

void adama_param_state::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg_sq);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(folds);
}

void adama_param_state::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(std::int64_t, step);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg_sq);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(std::int64_t, folds);
}

// --- adama -------------------------------------------------------------------------

adama::adama(const std::vector<torch::optim::OptimizerParamGroup>& param_groups, adama_options defaults)
    : Optimizer(param_groups, std::make_unique<adama_options>(defaults)) {
  validate_hyper(defaults.hyper());
  for (const auto& group : param_groups_) {
    validate_hyper(options_of(group).hyper());
    attach_hooks(group.params());
  }
}

adama::adama(std::vector<torch::Tensor> params, adama_options defaults)
    : adama({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {}

adama::~adama() {
  for (const torch::Tensor& p : hooked_) {
    auto& slot = torch::autograd::impl::post_acc_grad_hooks(p);
    const auto* hook = dynamic_cast<const fold_hook*>(slot.get());
    if (hook != nullptr && hook->owner() == this) slot.reset();
  }
}

void adama::attach_hooks(const std::vector<torch::Tensor>& params) {
  // Check every slot first so that a refusal changes nothing.
  for (const torch::Tensor& p : params) {
    if (p.requires_grad() && torch::autograd::impl::post_acc_grad_hooks(p) != nullptr) {
      throw tp::invalid_argument(
          c10::str("AdamA: a parameter of shape ", p.sizes(),
                   " already has post-accumulate-grad hooks (another AdamA, or Python's "
                   "register_post_accumulate_grad_hook); AdamA needs the parameter's only hook slot"));
    }
  }
  for (const torch::Tensor& p : params) {
    if (!p.requires_grad()) continue;  // never receives a gradient
    torch::autograd::impl::set_post_acc_grad_hooks(p, std::make_unique<fold_hook>(this));
    hooked_.push_back(p);
  }
}

void adama::add_param_group(const torch::optim::OptimizerParamGroup& param_group) {
  const std::lock_guard lock(mutex_);
  Optimizer::add_param_group(param_group);
  validate_hyper(options_of(param_groups_.back()).hyper());
  attach_hooks(param_groups_.back().params());
}

const torch::optim::OptimizerParamGroup* adama::group_of(const torch::Tensor& param) const {
  // A scan: a few hundred parameters cost far less than the fold itself.
  for (const auto& group : param_groups_) {
    for (const torch::Tensor& p : group.params()) {
      if (p.unsafeGetTensorImpl() == param.unsafeGetTensorImpl()) return &group;
    }
  }
  return nullptr;
}

void adama::fold(const torch::Tensor& param) {
  const std::lock_guard lock(mutex_);
  fold_locked(param);
}

void adama::fold_locked(const torch::Tensor& param) {
  at::Tensor& grad = param.mutable_grad();
  if (!grad.defined()) return;
  const auto* group = group_of(param);
  if (group == nullptr) {
    throw tp::invalid_argument(c10::str("AdamA::fold: the tensor of shape ", param.sizes(),
                                        " is not a parameter of this optimizer"));
  }
  auto& slot = state_[param.unsafeGetTensorImpl()];
  if (!slot) {
    auto fresh = std::make_unique<adama_param_state>();
    fresh->exp_avg(torch::zeros_like(param, at::MemoryFormat::Preserve));
    fresh->exp_avg_sq(torch::zeros_like(param, at::MemoryFormat::Preserve));
    slot = std::move(fresh);
  }
  auto& state = static_cast<adama_param_state&>(*slot);
  fold_gradient(param, grad, state.exp_avg(), state.exp_avg_sq(), state.folds() == 0, options_of(*group).hyper());
  state.folds(state.folds() + 1);
  grad.reset();  // the point of AdamA: this micro-batch's gradient is gone
}

torch::Tensor adama::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure != nullptr) {
    const at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  const std::lock_guard lock(mutex_);
  for (const auto& group : param_groups_) {
    const adama_hyper h = options_of(group).hyper();
    for (const torch::Tensor& p : group.params()) {
      fold_locked(p);  // a gradient no hook consumed counts as one more micro-batch
      const auto it = state_.find(p.unsafeGetTensorImpl());
      if (it == state_.end()) continue;
      auto& state = static_cast<adama_param_state&>(*it->second);
      if (state.folds() == 0) continue;  // no gradient this step: left alone, as Adam does
      state.step(state.step() + 1);
      apply_update(p, state.exp_avg(), state.exp_avg_sq(), state.step(), h);
      state.folds(0);
    }
  }
  return loss;
}

void adama::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<adama_param_state, adama_options>(archive, *this);
}

void adama::load(torch::serialize::InputArchive& archive) {
  const std::lock_guard lock(mutex_);
  torch::optim::serialize<adama_param_state, adama_options>(archive, *this);
}

}  // namespace tensorpager::optim

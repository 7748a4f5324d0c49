#include "hooks/budget/rng_snapshots.hpp"

#include <memory>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/python.h>

namespace tp::hooks {
namespace {

bool same(const at::mt19937_data_pod& a, const at::mt19937_data_pod& b) {
  // Field by field: the struct has padding, which memcmp would read.
  return a.seed_ == b.seed_ && a.left_ == b.left_ && a.seeded_ == b.seeded_ && a.next_ == b.next_ &&
         a.state_ == b.state_;
}

}  // namespace

at::Tensor rng_snapshots::cpu() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();  // shares the default generator
  std::lock_guard<std::mutex> lock(gen.mutex());  // as torch.Generator.get_state takes it
  auto* impl = gen.get<at::CPUGeneratorImpl>();
  const at::mt19937_data_pod engine = impl->engine().data();
  const std::optional<float> next_float = impl->next_float_normal_sample();
  const std::optional<double> next_double = impl->next_double_normal_sample();
  if (state_.defined() && same(*engine_, engine) && next_float_ == next_float && next_double_ == next_double) {
    return state_;
  }
  state_ = at::Tensor::wrap_tensor_impl(impl->get_state());
  engine_ = engine;
  next_float_ = next_float;
  next_double_ = next_double;
  return state_;
}

void register_rng_snapshots(pybind11::module_& m) {
  pybind11::class_<rng_snapshots, std::shared_ptr<rng_snapshots>>(
      m, "RngSnapshots",
      "The CPU generator's state for segment reruns, taken again only when it changed (Note [One RNG state while "
      "the generator stands still]).")
      .def(pybind11::init<>())
      .def("cpu", &rng_snapshots::cpu,
           "torch.get_rng_state(), or the tensor the last call returned while the generator's state still equals "
           "it; read only.");
}

}  // namespace tp::hooks

// tensorpager._C's AdamA kernels: the Python optimizer (tensorpager.optim.AdamA)
// keeps its state in torch.optim.Optimizer's structures and calls these for
// the arithmetic, so Python and LibTorch share one implementation of Note
// [AdamA update rule] (adama_kernels.hpp).

#include "hooks/optim/optim_bindings.hpp"

#include <cstdint>

#include <torch/python.h>

#include "hooks/compress/compress_bindings.hpp"
#include "hooks/optim/adama_kernels.hpp"

namespace py = pybind11;

namespace tp::hooks {

void register_optim(py::module_& m) {
  using tensorpager::optim::adama_hyper;

  m.def(
      "adama_validate",
      [](double lr, double beta1, double beta2, double eps, double weight_decay, std::int64_t micro_batches) {
        tensorpager::optim::validate_hyper(adama_hyper{lr, beta1, beta2, eps, weight_decay, false, micro_batches});
      },
      py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"),
      py::arg("micro_batches"), "ValueError naming the first AdamA hyper-parameter out of range.");

  // The arithmetic releases the GIL: a large parameter takes a while, and
  // autograd's other threads may want the interpreter meanwhile.
  m.def(
      "adama_fold",
      [](const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
         bool first_fold, double beta1, double beta2, double weight_decay, bool decoupled,
         std::int64_t micro_batches) {
        const adama_hyper h{0.0, beta1, beta2, 0.0, weight_decay, decoupled, micro_batches};
        tensorpager::optim::fold_gradient(param, grad, exp_avg, exp_avg_sq, first_fold, h);
      },
      py::arg("param"), py::arg("grad"), py::arg("exp_avg"), py::arg("exp_avg_sq"), py::arg("first_fold"),
      py::arg("beta1"), py::arg("beta2"), py::arg("weight_decay"), py::arg("decoupled"), py::arg("micro_batches"),
      py::call_guard<py::gil_scoped_release>(),
      "Folds one micro-batch's gradient into exp_avg and exp_avg_sq in place (decaying them first when "
      "first_fold).");

  m.def(
      "adama_update",
      [](const at::Tensor& param, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq, std::int64_t step,
         double lr, double beta1, double beta2, double eps, double weight_decay, bool decoupled) {
        const adama_hyper h{lr, beta1, beta2, eps, weight_decay, decoupled, 1};
        tensorpager::optim::apply_update(param, exp_avg, exp_avg_sq, step, h);
      },
      py::arg("param"), py::arg("exp_avg"), py::arg("exp_avg_sq"), py::arg("step"), py::arg("lr"), py::arg("beta1"),
      py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"), py::arg("decoupled"),
      py::call_guard<py::gil_scoped_release>(),
      "Applies the bias-corrected Adam update of step `step` (>= 1) to param in place.");

  register_compress(m);
}

}  // namespace tp::hooks

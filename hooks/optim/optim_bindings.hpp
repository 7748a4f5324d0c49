#pragma once
// Registers the Python face of tensorpager's training techniques on
// tensorpager._C: AdamA's kernels for tensorpager.optim, and, through
// register_compress(), the activation codec for tensorpager.compress.
// python_module.cpp calls register_optim() once, inside PYBIND11_MODULE.

#include <pybind11/pybind11.h>

namespace tp::hooks {

/// Adds to m (tensorpager._C):
///   adama_validate(lr, beta1, beta2, eps, weight_decay, micro_batches) -> None
///   adama_fold(param, grad, exp_avg, exp_avg_sq, first_fold, beta1, beta2,
///              weight_decay, decoupled, micro_batches) -> None
///   adama_update(param, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps,
///                weight_decay, decoupled) -> None
/// and everything register_compress() adds. Errors reach Python as the
/// module's translator maps them (tp::invalid_argument -> ValueError).
/// Call once per module, with the GIL held.
void register_optim(pybind11::module_& m);

}  // namespace tp::hooks

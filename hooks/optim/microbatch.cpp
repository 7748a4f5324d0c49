// Micro-batching for LibTorch: Note [Micro-batch loss scaling] in microbatch.hpp.

#include "hooks/optim/microbatch.hpp"

#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include "core/errors.hpp"
#include "hooks/optim/adama.hpp"

namespace tensorpager::optim {

at::Tensor microbatch(const micro_step& step, const std::vector<at::Tensor>& batch, std::int64_t n,
                      torch::optim::Optimizer* optimizer) {
  if (batch.empty()) throw tp::invalid_argument("microbatch: the batch holds no tensor; accepted: one or more");
  const std::int64_t rows = batch.front().dim() > 0 ? batch.front().size(0) : 0;
  for (const at::Tensor& t : batch) {
    if (t.dim() == 0 || t.size(0) != rows) {
      throw tp::invalid_argument(c10::str("microbatch: every batch tensor needs the same number of rows (dim 0); ",
                                          "the first has ", rows, ", another has shape ", t.sizes()));
    }
  }
  if (n < 1 || n > rows) {
    throw tp::invalid_argument(
        c10::str("microbatch: n = ", n, " micro-batches for ", rows, " rows; accepted: 1 <= n <= ", rows));
  }
  auto* adama_opt = dynamic_cast<adama*>(optimizer);
  if (adama_opt != nullptr) {
    for (const auto& group : adama_opt->param_groups()) {
      const auto m = static_cast<const adama_options&>(group.options()).micro_batches();
      if (m != n || rows % n != 0) {
        throw tp::invalid_argument(c10::str("microbatch: with AdamA, n (", n, ") must equal its micro_batches (", m,
                                            ") and divide the batch (", rows, " rows)"));
      }
    }
  }

  std::vector<std::vector<at::Tensor>> pieces;
  pieces.reserve(batch.size());
  for (const at::Tensor& t : batch) pieces.push_back(at::tensor_split(t, n, 0));

  at::Tensor total;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto index = static_cast<std::size_t>(i);
    std::vector<at::Tensor> micro;
    micro.reserve(pieces.size());
    for (const auto& p : pieces) micro.push_back(p[index]);
    const double share = static_cast<double>(micro.front().size(0)) / static_cast<double>(rows);
    const at::Tensor loss = step(micro);
    if (adama_opt != nullptr) {
      loss.backward();
    } else {
      (loss * share).backward();
    }
    const at::Tensor part = loss.detach() * share;
    total = total.defined() ? total + part : part;
  }
  if (optimizer != nullptr) {
    optimizer->step();
    optimizer->zero_grad();
  }
  return total;
}

}  // namespace tensorpager::optim

#include "runtime/copy_cost_model.hpp"

#include <algorithm>
#include <cmath>

namespace tp {
namespace {

// Note [Copy cost model]: a running mean for the first samples, then an
// exponential average of this weight.
constexpr double settled_weight = 1.0 / 8.0;

}  // namespace

std::size_t copy_cost_model::size_class(std::size_t bytes) {
  constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;
  if (bytes < 256 * KiB) return 0;
  if (bytes < 4 * MiB) return 1;
  if (bytes < 64 * MiB) return 2;
  return 3;
}

std::int64_t copy_cost_model::transfer_ns(copy_direction d, std::size_t bytes) const {
  const std::int64_t seeded = seed_.transfer_ns(bytes);
  const cell& c = cell_of(d, bytes);
  if (c.samples == 0) return seeded;
  return std::llround(static_cast<double>(seeded) * std::exp(c.log_factor));
}

void copy_cost_model::observe(copy_direction d, std::size_t bytes, std::int64_t elapsed_ns) {
  if (bytes == 0 || elapsed_ns < 0) return;
  // Either side may round to 0 (a tiny copy, a timer's resolution): 1 ns.
  const auto seeded = static_cast<double>(std::max<std::int64_t>(seed_.transfer_ns(bytes), 1));
  const auto measured = static_cast<double>(std::max<std::int64_t>(elapsed_ns, 1));
  cell& c = cells_[static_cast<std::size_t>(d)][size_class(bytes)];
  ++c.samples;
  const double weight = std::max(1.0 / static_cast<double>(c.samples), settled_weight);
  c.log_factor += (std::log(measured / seeded) - c.log_factor) * weight;
}

double copy_cost_model::factor(copy_direction d, std::size_t bytes) const {
  const cell& c = cell_of(d, bytes);
  return c.samples == 0 ? 1.0 : std::exp(c.log_factor);
}

bool copy_cost_model::differs_from(const copy_cost_model& other, double ratio) const {
  if (seed_.bytes_per_s != other.seed_.bytes_per_s || seed_.latency_ns != other.seed_.latency_ns) return true;
  const double limit = std::log(ratio);
  for (std::size_t d = 0; d < cells_.size(); ++d) {
    for (std::size_t k = 0; k < size_classes; ++k) {
      if (std::abs(cells_[d][k].log_factor - other.cells_[d][k].log_factor) > limit) return true;
    }
  }
  return false;
}

}  // namespace tp

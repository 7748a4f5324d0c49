// Replays a training-like sequence of allocations on the simulated device: once
// unconstrained to find its peak, once under a budget it fits, and once under
// a budget too small for it, printing the statistics and the out-of-memory
// message a user would see. Run by scripts/demo.sh.
//
// The trace is one training step of a small CNN-like model: parameters live
// throughout; the forward pass allocates each layer's activation (kept for
// backward) and a temporary (freed at once); the backward pass frees the
// activations in reverse while allocating and freeing gradient temporaries.

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "allocator/caching_allocator.hpp"
#include "allocator/memory_summary.hpp"
#include "core/clock.hpp"
#include "core/errors.hpp"
#include "core/format_bytes.hpp"
#include "device/simulated_device.hpp"

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

struct layer {
  std::size_t activation;  // saved for backward
  std::size_t temporary;   // freed within the layer
  std::size_t parameters;
};

std::vector<layer> make_model() {
  std::vector<layer> layers;
  std::size_t spatial = 64 * 64, channels = 32;
  for (int i = 0; i < 16; ++i) {
    if (i % 4 == 3) {
      spatial /= 4;
      channels *= 2;
    }
    const std::size_t act = 16 /*batch*/ * channels * spatial * 4 /*fp32*/;
    layers.push_back({act, act / 2 + 4096 * static_cast<std::size_t>(i), channels * channels * 9 * 4});
  }
  return layers;
}

/// One training step; throws tp::out_of_memory when the budget is too small.
void train_step(tp::caching_allocator& a, const std::vector<layer>& model, std::vector<void*>& params) {
  if (params.empty()) {
    for (const layer& l : model) params.push_back(a.allocate(l.parameters));
  }
  std::vector<void*> saved;
  for (const layer& l : model) {  // forward
    saved.push_back(a.allocate(l.activation));
    a.deallocate(a.allocate(l.temporary));
  }
  for (std::size_t i = model.size(); i-- > 0;) {  // backward
    void* grad_input = a.allocate(model[i].activation);
    void* grad_weight = a.allocate(model[i].parameters);
    a.deallocate(saved[i]);
    a.deallocate(grad_weight);
    a.deallocate(grad_input);
  }
}

std::size_t run(const char* title, std::optional<std::size_t> budget, const std::vector<layer>& model) {
  tp::manual_clock clock;
  tp::simulated_device::options o;
  o.capacity_bytes = std::size_t{4} << 30;
  tp::simulated_device device(o, clock);
  tp::caching_allocator alloc(device, {.budget = budget});
  std::vector<void*> params;
  fmt::print("\n== {} (budget {}) ==\n", title, budget ? tp::format_bytes(*budget) : "none");
  try {
    for (int step = 0; step < 3; ++step) train_step(alloc, model, params);
    fmt::print("3 training steps fit.\n{}", tp::format_memory_summary(alloc.stats(), title));
  } catch (const tp::out_of_memory& e) {
    fmt::print("out of memory, as expected at this budget:\n  {}\n", e.what());
  }
  for (void* p : params) alloc.deallocate(p);
  return static_cast<std::size_t>(alloc.stats().reserved_bytes.all().peak);
}

}  // namespace

int main() {
  const std::vector<layer> model = make_model();
  const std::size_t peak = run("unconstrained", std::nullopt, model);
  fmt::print("unconstrained peak reserved: {}\n", tp::format_bytes(peak));
  run("fits", peak, model);
  const std::size_t too_small = peak / 2 / MiB * MiB;
  run("too small", too_small, model);
  return 0;
}

// A LibTorch program under tensorpager's budget: a dataset larger than the
// budget is kept in tensorpager's hands between uses (offloaded to pinned
// host memory, restored when a step needs it) while an MLP trains.
//
//   build/examples/tp_budget_scope_example [steps]
//
// It runs on the CPU adapter without a GPU (device:cpu), and on CUDA with
// TENSORPAGER_CONF=device:cuda. What C++ programs get and what needs Python:
// README, "Training under a budget".

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "hooks/tensorpager.hpp"
#include "hooks/tensorpager_torch.hpp"

int main(int argc, char** argv) {
  try {
    const int steps = argc > 1 ? std::atoi(argv[1]) : 8;
    const char* conf = std::getenv("TENSORPAGER_CONF");
    tensorpager::install(conf != nullptr && *conf != '\0' ? conf : "device:cpu");
    const auto device = tensorpager::device_kind() == "cuda" ? torch::kCUDA : torch::kCPU;
    torch::manual_seed(0);

    torch::nn::Sequential model(torch::nn::Linear(512, 512), torch::nn::ReLU(), torch::nn::Linear(512, 10));
    model->to(device);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01));

    tensorpager::budget_options budget;
    budget.bytes = std::size_t{48} << 20;  // 48 MiB; the dataset alone is 64 MiB
    budget.policy = "lru";
    tensorpager::budget_scope scope(budget);

    std::vector<tensorpager::offloaded_tensor> batches;
    for (int i = 0; i < 16; ++i) batches.push_back(tensorpager::offload(torch::randn({2048, 512}, device)));

    for (int step = 0; step < steps; ++step) {
      const auto& handle = batches[static_cast<std::size_t>(step) % batches.size()];
      torch::Tensor x = tensorpager::restore(handle);  // back on the device, bit-identical
      opt.zero_grad();
      torch::Tensor loss = model->forward(x).pow(2).mean();
      loss.backward();
      opt.step();
      tensorpager::step();
      std::printf("step %d: loss %.6f, batch %s\n", step, loss.item<double>(), handle.state().c_str());
    }
    const auto stats = tensorpager::runtime_stats();
    for (const char* key : {"offloaded_bytes", "prefetched_bytes", "offloads", "evictions", "stall_ns"}) {
      std::printf("tensorpager.runtime.%s = %lld\n", key,
                  static_cast<long long>(stats.at(std::string("tensorpager.runtime.") + key)));
    }
    std::printf("peak reserved: %lld bytes under a budget of %zu\n",
                static_cast<long long>(tensorpager::stats().at("reserved_bytes.all.peak")), *budget.bytes);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "budget_scope_example: %s\n", e.what());
    return 1;
  }
}

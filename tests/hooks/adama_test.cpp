// tensorpager::optim::adama and microbatch for LibTorch: the rule of Note
// [AdamA update rule] against torch::optim::Adam/AdamW and a float64
// reference, gradients freed by the hooks, checkpoints, and micro-batching's
// gradient equivalence (Note [Micro-batch loss scaling]).

#include <cmath>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/errors.hpp"
#include "hooks/optim/adama.hpp"
#include "hooks/optim/microbatch.hpp"

namespace tensorpager::optim {
namespace {

/// A small MLP whose weights depend only on seed.
torch::nn::Sequential make_model(std::uint64_t seed) {
  torch::manual_seed(seed);
  return torch::nn::Sequential(torch::nn::Linear(6, 12), torch::nn::Tanh(), torch::nn::Linear(12, 3));
}

torch::Tensor mean_loss(torch::nn::Sequential& model, const torch::Tensor& x, const torch::Tensor& y) {
  return torch::mse_loss(model->forward(x), y);
}

/// The largest |a - b| / max|b| over the parameters of two models.
double max_relative_difference(torch::nn::Sequential& a, torch::nn::Sequential& b) {
  double worst = 0.0;
  const auto pa = a->parameters();
  const auto pb = b->parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    const double scale = pb[i].abs().max().item<double>();
    worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>() / scale);
  }
  return worst;
}

TEST(AdamA, MatchesTorchAdamOverTwentyStepsAtOneMicroBatch) {
  auto ours = make_model(1);
  auto theirs = make_model(1);
  adama opt_ours(ours->parameters(), adama_options(1e-2).weight_decay(0.01));
  torch::optim::Adam opt_theirs(theirs->parameters(), torch::optim::AdamOptions(1e-2).weight_decay(0.01));
  const torch::Tensor x = torch::randn({16, 6});
  const torch::Tensor y = torch::randn({16, 3});
  for (int step = 0; step < 20; ++step) {
    mean_loss(ours, x, y).backward();
    opt_ours.step();
    opt_theirs.zero_grad();
    mean_loss(theirs, x, y).backward();
    opt_theirs.step();
  }
  EXPECT_LT(max_relative_difference(ours, theirs), 1e-6);
}

TEST(AdamA, DecoupledMatchesTorchAdamWOverTwentySteps) {
  auto ours = make_model(2);
  auto theirs = make_model(2);
  adama opt_ours(ours->parameters(), adama_options(1e-2).weight_decay(0.1).decoupled(true));
  torch::optim::AdamW opt_theirs(theirs->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  const torch::Tensor x = torch::randn({16, 6});
  const torch::Tensor y = torch::randn({16, 3});
  for (int step = 0; step < 20; ++step) {
    mean_loss(ours, x, y).backward();
    opt_ours.step();
    opt_theirs.zero_grad();
    mean_loss(theirs, x, y).backward();
    opt_theirs.step();
  }
  EXPECT_LT(max_relative_difference(ours, theirs), 1e-6);
}

TEST(AdamA, HooksFreeEveryGradientRightAfterBackward) {
  auto model = make_model(3);
  adama opt(model->parameters(), adama_options(1e-3).micro_batches(2));
  mean_loss(model, torch::randn({4, 6}), torch::randn({4, 3})).backward();
  for (const auto& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
  mean_loss(model, torch::randn({4, 6}), torch::randn({4, 3})).backward();
  opt.step();
  for (const auto& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(AdamA, FollowsTheFloat64ReferenceOverMicroBatches) {
  constexpr int m = 3;
  constexpr double lr = 1e-2, b1 = 0.9, b2 = 0.99, eps = 1e-8;
  auto model = make_model(4);
  adama opt(model->parameters(), adama_options(lr).betas({b1, b2}).eps(eps).micro_batches(m));
  std::vector<torch::Tensor> ref_p, ref_m, ref_v;
  for (const auto& p : model->parameters()) {
    ref_p.push_back(p.detach().to(torch::kDouble));
    ref_m.push_back(torch::zeros_like(ref_p.back()));
    ref_v.push_back(torch::zeros_like(ref_p.back()));
  }
  for (int step = 1; step <= 5; ++step) {
    for (auto& t : ref_m) t.mul_(b1);
    for (auto& t : ref_v) t.mul_(b2);
    for (int i = 0; i < m; ++i) {
      const torch::Tensor x = torch::randn({8, 6});
      const torch::Tensor y = torch::randn({8, 3});
      // The reference gradient comes from the same float32 parameters, before
      // AdamA's hooks consume it.
      auto params = model->parameters();
      const auto grads = torch::autograd::grad({mean_loss(model, x, y)}, params);
      for (std::size_t k = 0; k < params.size(); ++k) {
        const torch::Tensor g = grads[k].to(torch::kDouble);
        ref_m[k].add_(g, (1 - b1) / m);
        ref_v[k].addcmul_(g, g, (1 - b2) / m);
        params[k].mutable_grad() = grads[k].clone();
        opt.fold(params[k]);
      }
    }
    opt.step();
    for (std::size_t k = 0; k < ref_p.size(); ++k) {
      const double bc1 = 1 - std::pow(b1, step);
      const double bc2 = 1 - std::pow(b2, step);
      ref_p[k].addcdiv_(ref_m[k], ref_v[k].sqrt() / std::sqrt(bc2) + eps, -lr / bc1);
    }
  }
  const auto params = model->parameters();
  for (std::size_t k = 0; k < params.size(); ++k) {
    EXPECT_TRUE(torch::allclose(params[k].to(torch::kDouble), ref_p[k], 1e-5, 1e-7)) << "parameter " << k;
  }
}

TEST(AdamA, SavedStateResumesExactlyEvenBetweenMicroBatches) {
  auto a = make_model(5);
  auto b = make_model(5);
  adama opt_a(a->parameters(), adama_options(1e-2).micro_batches(2));
  std::vector<torch::Tensor> xs;
  for (int i = 0; i < 9; ++i) xs.push_back(torch::randn({4, 6}));
  const torch::Tensor y = torch::zeros({4, 3});
  for (int i = 0; i < 5; ++i) {  // two steps and one micro-batch of the third
    mean_loss(a, xs[static_cast<std::size_t>(i)], y).backward();
    if (i % 2 == 1) opt_a.step();
  }
  std::stringstream buffer;
  {
    torch::serialize::OutputArchive archive;
    opt_a.save(archive);
    archive.save_to(buffer);
  }
  {
    torch::NoGradGuard no_grad;
    for (std::size_t k = 0; k < a->parameters().size(); ++k) b->parameters()[k].copy_(a->parameters()[k]);
  }
  adama opt_b(b->parameters(), adama_options(1e-2).micro_batches(2));
  torch::serialize::InputArchive archive;
  archive.load_from(buffer);
  opt_b.load(archive);
  for (int i = 5; i < 9; ++i) {
    mean_loss(a, xs[static_cast<std::size_t>(i)], y).backward();
    mean_loss(b, xs[static_cast<std::size_t>(i)], y).backward();
    if (i % 2 == 0) {
      opt_a.step();
      opt_b.step();
    }
  }
  for (std::size_t k = 0; k < a->parameters().size(); ++k) {
    EXPECT_TRUE(torch::equal(a->parameters()[k], b->parameters()[k])) << "parameter " << k;
  }
}

TEST(AdamA, RefusesParametersAnotherAdamAHooked) {
  auto model = make_model(6);
  adama first(model->parameters());
  EXPECT_THROW(adama second(model->parameters()), tp::invalid_argument);
}

TEST(AdamA, DestructionGivesGradientsBackToDotGrad) {
  auto model = make_model(7);
  { adama opt(model->parameters()); }
  mean_loss(model, torch::randn({4, 6}), torch::randn({4, 3})).backward();
  for (const auto& p : model->parameters()) EXPECT_TRUE(p.grad().defined());
}

TEST(AdamA, RejectsOptionsOutOfRange) {
  auto model = make_model(8);
  EXPECT_THROW(adama(model->parameters(), adama_options(1e-3).micro_batches(0)), tp::invalid_argument);
  EXPECT_THROW(adama(model->parameters(), adama_options(1e-3).betas({1.0, 0.999})), tp::invalid_argument);
  EXPECT_THROW(adama(model->parameters(), adama_options(-1.0)), tp::invalid_argument);
}

TEST(Microbatch, AccumulatedGradientEqualsTheFullBatchGradient) {
  auto model = make_model(9);
  const torch::Tensor x = torch::randn({10, 6});  // 10 rows in 4 micro-batches: 3, 3, 2, 2
  const torch::Tensor y = torch::randn({10, 3});
  const torch::Tensor full_loss = mean_loss(model, x, y);
  full_loss.backward();
  std::vector<torch::Tensor> full;
  for (const auto& p : model->parameters()) full.push_back(p.grad().clone());
  for (auto& p : model->parameters()) p.mutable_grad().reset();

  const torch::Tensor loss = microbatch(
      [&](const std::vector<torch::Tensor>& mb) { return mean_loss(model, mb[0], mb[1]); }, {x, y}, 4);
  EXPECT_NEAR(loss.item<double>(), full_loss.item<double>(), 1e-6);
  const auto params = model->parameters();
  for (std::size_t k = 0; k < params.size(); ++k) {
    EXPECT_TRUE(torch::allclose(params[k].grad(), full[k], 1e-5, 1e-7)) << "parameter " << k;
  }
}

TEST(Microbatch, StepsAdamAOncePerBatchAndRefusesAMismatchedCount) {
  auto model = make_model(10);
  adama opt(model->parameters(), adama_options(1e-2).micro_batches(2));
  const torch::Tensor x = torch::randn({8, 6});
  const torch::Tensor y = torch::randn({8, 3});
  const auto step = [&](const std::vector<torch::Tensor>& mb) { return mean_loss(model, mb[0], mb[1]); };
  const torch::Tensor before = model->parameters()[0].clone();
  microbatch(step, {x, y}, 2, &opt);
  EXPECT_FALSE(torch::equal(before, model->parameters()[0]));
  EXPECT_THROW(microbatch(step, {x, y}, 4, &opt), tp::invalid_argument);
  EXPECT_THROW(microbatch(step, {x, y}, 0), tp::invalid_argument);
}

}  // namespace
}  // namespace tensorpager::optim

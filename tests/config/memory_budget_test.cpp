// Note [Budget spellings]: the one budget parser, its round trip through
// format_budget, and resolving a budget against a device.

#include "config/memory_budget.hpp"

#include <cstddef>
#include <optional>
#include <random>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "config/config.hpp"
#include "core/errors.hpp"

namespace {

using ::testing::HasSubstr;
using tp::budget_share;

constexpr std::size_t MiB = std::size_t{1} << 20;

tp::memory_budget bytes(std::size_t n) { return tp::memory_budget{n}; }
tp::memory_budget share(double r, budget_share of) { return tp::memory_budget{tp::budget_ratio{r, of}}; }

struct accepted_row {
  const char* text;
  std::optional<tp::memory_budget> budget;  // nullopt: none
};

TEST(ParseBudget, ReadsEverySpelling) {
  const accepted_row rows[] = {
      {"12MiB", bytes(12 * MiB)},
      {" 12 MiB ", bytes(12 * MiB)},
      {"4096", bytes(4096)},
      {"2", bytes(2)},
      {"1B", bytes(1)},
      {"1.5GB", bytes(1'500'000'000)},
      {"0.5", share(0.5, budget_share::peak)},
      {"1.0", share(1.0, budget_share::peak)},
      {"0.5peak", share(0.5, budget_share::peak)},
      {" 0.25 PEAK ", share(0.25, budget_share::peak)},
      {"0.9device", share(0.9, budget_share::device)},
      {"0.9\tDevice", share(0.9, budget_share::device)},
      {"1.0device", share(1.0, budget_share::device)},
      {"none", std::nullopt},
      {" NONE ", std::nullopt},
  };
  for (const accepted_row& row : rows) {
    const tp::budget_parse_result r = tp::parse_budget(row.text);
    EXPECT_TRUE(r.ok()) << row.text << ": " << r.problem;
    EXPECT_EQ(r.budget, row.budget) << row.text;
  }
}

TEST(ParseBudget, RefusesWhatIsNoBudgetSayingWhy) {
  const std::pair<const char*, const char*> rows[] = {
      {"", "the budget is empty"},
      {"   ", "the budget is empty"},
      {"0", "'0' is ambiguous"},
      {"1", "write 1.0 for the whole peak, 1.0device for the whole device"},
      {"0GiB", "'0GiB' is 0 bytes"},
      {"1.5", "outside (0, 1]; for a size add a unit (e.g. 1.5GiB)"},
      {"0.0", "outside (0, 1]"},
      {"1.5device", "'1.5device' is a ratio of the device outside (0, 1]"},
      {"1device", "write a number with a decimal point in (0, 1] before 'device'"},
      {"peak", "'peak' is not a ratio of the peak"},
      {".5device", "is not a ratio of the device"},
      {"0.5 devices", "unknown unit 'devices' in size '0.5 devices'"},
      {"12G", "one-letter units are ambiguous"},
      {"-1GiB", "a size cannot be negative"},
      {"nan", "does not start with a number"},
      {"99999999999999999999999GiB", "the size is too large"},
  };
  for (const auto& [text, fragment] : rows) {
    const tp::budget_parse_result r = tp::parse_budget(text);
    EXPECT_FALSE(r.ok()) << text;
    EXPECT_FALSE(r.budget) << text;
    EXPECT_THAT(r.problem, HasSubstr(fragment)) << text;
  }
}

TEST(ParseBudget, FormatBudgetReadsBack) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const double r = static_cast<double>(rng() % 1'000'000 + 1) / 1'000'000.0;
    for (const tp::memory_budget& b : {bytes(rng() % (std::size_t{1} << 50) + 1), share(r, budget_share::peak),
                                        share(r, budget_share::device)}) {
      const std::string text = tp::format_budget(b);
      EXPECT_EQ(tp::parse_budget(text).budget, b) << text;
    }
  }
  EXPECT_EQ(tp::format_budget(share(0.5, budget_share::peak)), "0.5");
  EXPECT_EQ(tp::format_budget(share(0.9, budget_share::device)), "0.9device");
  EXPECT_EQ(tp::format_budget(bytes(12 * MiB)), "12MiB");
  EXPECT_THROW((void)tp::format_budget(bytes(0)), tp::config_error);
  EXPECT_THROW((void)tp::format_budget(share(1.5, budget_share::device)), tp::config_error);
}

// The message of the config_error resolve_for_device throws for the budget in
// conf on a device of total bytes; "" when it throws none.
std::string resolve_error(std::string_view conf, std::size_t total) {
  try {
    (void)tp::parse_config(conf, "test").budget->resolve_for_device(total, "gpu0");
  } catch (const tp::config_error& e) {
    return e.what();
  }
  return {};
}

TEST(Budget, ResolvesForADeviceAndRefusesWhatCannotWork) {
  constexpr std::size_t gib = std::size_t{1} << 30;
  const tp::config ok = tp::parse_config("budget:0.5device", "test");
  EXPECT_EQ(ok.budget->resolve_for_device(8 * gib, "gpu0"), 4 * gib);
  EXPECT_THAT(resolve_error("budget:12GiB", 8 * gib), HasSubstr("12.00 GiB is more than the 8.00 GiB of gpu0"));
  EXPECT_THAT(resolve_error("budget:0.0000000001device", 1024), HasSubstr("is 0 bytes on gpu0"));
  const std::string of_peak = resolve_error("manage:activations,budget:0.5", 8 * gib);
  EXPECT_THAT(of_peak, HasSubstr("share of the first step's peak"));
  EXPECT_THAT(of_peak, HasSubstr("write 0.5device"));
}

}  // namespace

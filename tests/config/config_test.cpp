#include "config/config.hpp"

#include <random>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "config/parse_bytes.hpp"

namespace {

using ::testing::HasSubstr;

constexpr std::size_t MiB = std::size_t{1024} * 1024;
constexpr std::size_t GiB = MiB * 1024;

// The message of the config_error that parse_config throws for text.
std::string error_for(std::string_view text, std::string_view source = "TENSORPAGER_CONF") {
  try {
    (void)tp::parse_config(text, source);
  } catch (const tp::config_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no config_error for '" << text << "'";
  return {};
}

// --- valid configurations ----------------------------------------------------

TEST(Config, EmptyTextMeansAllDefaults) {
  EXPECT_EQ(tp::parse_config("", "TENSORPAGER_CONF"), tp::config{});
  EXPECT_EQ(tp::parse_config("  \t ", "TENSORPAGER_CONF"), tp::config{});
  const tp::config c;
  EXPECT_EQ(c.backend, tp::backend_kind::tensorpager);
  EXPECT_FALSE(c.budget);
  EXPECT_FALSE(c.host_budget);
  EXPECT_EQ(c.host_fallback, tp::host_fallback_mode::error);
  EXPECT_FALSE(c.max_split_size);
  EXPECT_EQ(c.policy, tp::policy_kind::hybrid);
  EXPECT_EQ(c.device, tp::device_kind::cuda);
  EXPECT_EQ(c.sim_capacity, 64 * GiB);
  EXPECT_EQ(c.timeline_events, std::size_t{1} << 20);
  EXPECT_EQ(c.compress, "");
  EXPECT_EQ(c.manage, tp::manage_kind::none);
}

TEST(Config, EveryKeyTableDefaultParsesToTheDefault) {
  for (const auto& key : tp::config_keys()) {
    const std::string text = std::string(key.name) + ":" + std::string(key.default_value);
    EXPECT_EQ(tp::parse_config(text, "test"), tp::config{}) << text;
    EXPECT_FALSE(key.accepted.empty());
    EXPECT_FALSE(key.description.empty());
  }
  EXPECT_EQ(tp::config_keys().size(), 14u);
  EXPECT_THAT(tp::config_keys_markdown(), HasSubstr("| `max_split_size` |"));
}

TEST(Config, ParsesEveryKey) {
  const tp::config c = tp::parse_config(
      "backend:native, budget:12GiB, host_budget:32GB, host_fallback:pageable, "
      "max_split_size:128MiB, policy:dtr, timeline:/tmp/run.json, record_trace:C:/t/a.trace, "
      "device:cpu, sim_capacity:8GiB, timeline_events:5000, compress: Conv2d=pool2;ReLU=bf16 , "
      "manage:Activations",
      "TENSORPAGER_CONF");
  EXPECT_EQ(c.backend, tp::backend_kind::native);
  EXPECT_EQ(c.budget, tp::memory_budget{12 * GiB});
  EXPECT_EQ(c.host_budget, 32'000'000'000u);
  EXPECT_EQ(c.host_fallback, tp::host_fallback_mode::pageable);
  EXPECT_EQ(c.max_split_size, 128 * MiB);
  EXPECT_EQ(c.policy, tp::policy_kind::dtr);
  EXPECT_EQ(c.timeline, "/tmp/run.json");
  EXPECT_EQ(c.record_trace, "C:/t/a.trace");
  EXPECT_EQ(c.device, tp::device_kind::cpu);
  EXPECT_EQ(c.sim_capacity, 8 * GiB);
  EXPECT_EQ(c.timeline_events, 5000u);
  EXPECT_EQ(c.compress, "Conv2d=pool2;ReLU=bf16");
  EXPECT_EQ(c.manage, tp::manage_kind::activations);
}

TEST(Config, ManageAcceptsActivationsAllOrNoneAndNamesTheChoicesOtherwise) {
  EXPECT_EQ(tp::parse_config("manage:none", "x").manage, tp::manage_kind::none);
  EXPECT_EQ(tp::parse_config("manage:activations,budget:0.5", "x").manage, tp::manage_kind::activations);
  EXPECT_EQ(tp::parse_config("manage:all,budget:0.5", "x").manage, tp::manage_kind::all);
  for (const char* bad : {"manage:everything", "manage:", "manage:true"}) {
    try {
      (void)tp::parse_config(bad, "PYTORCH_CUDA_ALLOC_CONF");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const tp::config_error& e) {
      EXPECT_THAT(e.what(), HasSubstr("PYTORCH_CUDA_ALLOC_CONF")) << bad;
      EXPECT_THAT(e.what(), HasSubstr("activations, all, none")) << bad;
    }
  }
  EXPECT_THAT(tp::to_string(tp::parse_config("manage:activations", "x")), HasSubstr("manage:activations"));
}

TEST(Config, ExpandableSegmentsTakesPyTorchsTrueAndFalse) {
  EXPECT_TRUE(tp::config{}.expandable_segments);  // Note [Expandable segments by default] in config.cpp
  EXPECT_FALSE(tp::parse_config("expandable_segments:False", "x").expandable_segments);
  EXPECT_TRUE(tp::parse_config("expandable_segments:true", "x").expandable_segments);
  tp::config c;
  c.expandable_segments = false;
  EXPECT_EQ(tp::to_string(c), "expandable_segments:False");
  EXPECT_EQ(tp::parse_config(tp::to_string(c), "x"), c);
  try {
    (void)tp::parse_config("expandable_segments:yes", "PYTORCH_CUDA_ALLOC_CONF");
    ADD_FAILURE() << "yes was accepted";
  } catch (const tp::config_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("True, False"));
  }
}

TEST(Config, TimelineEventsIsAWholeNumberAboveZero) {
  EXPECT_EQ(tp::parse_config("timeline_events:1", "x").timeline_events, 1u);
  for (const char* bad : {"timeline_events:0", "timeline_events:-5", "timeline_events:1e6", "timeline_events:1MiB",
                          "timeline_events:", "timeline_events:99999999999999999999999"}) {
    try {
      (void)tp::parse_config(bad, "TENSORPAGER_CONF");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const tp::config_error& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string("in '") + bad + "'"));
      EXPECT_THAT(e.what(), HasSubstr("a whole number > 0"));
    }
  }
}

TEST(Config, CompressAcceptsMethodsRulesAndClassNames) {
  EXPECT_EQ(tp::parse_config("compress:none", "x").compress, "");
  EXPECT_EQ(tp::parse_config("compress:NONE", "x"), tp::config{});
  EXPECT_EQ(tp::parse_config("compress:pool2", "x").compress, "pool2");
  EXPECT_EQ(tp::parse_config("compress:BF16", "x").compress, "BF16");
  EXPECT_EQ(tp::parse_config("compress:*=fp8;BatchNorm2d=bf16;Linear=none", "x").compress,
            "*=fp8;BatchNorm2d=bf16;Linear=none");
  // The value runs to the next ',': '=' and ';' belong to it.
  const tp::config c = tp::parse_config("compress:Conv2d=pool2;ReLU=bf16,budget:0.5device", "x");
  EXPECT_EQ(c.compress, "Conv2d=pool2;ReLU=bf16");
  EXPECT_TRUE(c.budget);
}

TEST(Config, CompressRejectsBadSpecsNamingTheRule) {
  const std::pair<const char*, const char*> cases[] = {
      {"compress:zip", "'zip' is neither a method nor a Selector=method rule"},
      {"compress:Conv2d=zip", "rule 'Conv2d=zip': 'zip' is not a method"},
      {"compress:Conv2d=pool2;", "a rule is empty"},
      {"compress:=bf16", "rule '=bf16' has no selector"},
      {"compress:Conv2d=pool2;ReLU", "rule 'ReLU' is not Selector=method"},
      {"compress:layer1.*=fp8", "selector 'layer1.*' is not a module class name or *"},
      {"compress:", "the value is empty"},
  };
  for (const auto& [text, problem] : cases) {
    try {
      (void)tp::parse_config(text, "TENSORPAGER_CONF");
      ADD_FAILURE() << text << " was accepted";
    } catch (const tp::config_error& e) {
      EXPECT_THAT(e.what(), HasSubstr(problem)) << text;
      EXPECT_THAT(e.what(), HasSubstr("compress accepts none, pool2, bf16, fp8")) << text;
      EXPECT_THAT(e.what(), HasSubstr("TENSORPAGER_CONF: in '")) << text;
    }
  }
}

TEST(Config, TrimsBlanksAndToleratesATrailingComma) {
  const tp::config c = tp::parse_config("  policy : LRU ,\tbudget:\t0.6 DEVICE ,", "x");
  EXPECT_EQ(c.policy, tp::policy_kind::lru);
  ASSERT_TRUE(c.budget);
  EXPECT_EQ(c.budget->ratio_of(tp::budget_share::device), 0.6);
  EXPECT_EQ(c.budget->resolve(100 * GiB), static_cast<std::size_t>(0.6 * 100.0 * GiB));
}

TEST(Config, BudgetDistinguishesBytesFromRatio) {
  EXPECT_EQ(tp::parse_config("budget:4096", "x").budget, tp::memory_budget{std::size_t{4096}});
  EXPECT_EQ(tp::parse_config("budget:2", "x").budget, tp::memory_budget{std::size_t{2}});
  EXPECT_EQ(tp::parse_config("budget:1B", "x").budget, tp::memory_budget{std::size_t{1}});
  EXPECT_EQ(tp::parse_config("budget:1.0device", "x").budget, (tp::memory_budget{tp::budget_ratio{1.0, tp::budget_share::device}}));
  EXPECT_EQ(tp::parse_config("budget:1.0device", "x").budget->resolve(80 * GiB), 80 * GiB);
  EXPECT_EQ(tp::parse_config("manage:activations,budget:0.5", "x").budget,
            (tp::memory_budget{tp::budget_ratio{0.5, tp::budget_share::peak}}));
  EXPECT_EQ(tp::parse_config("manage:activations,budget:0.5Peak", "x").budget,
            (tp::memory_budget{tp::budget_ratio{0.5, tp::budget_share::peak}}));
  EXPECT_EQ(tp::parse_config("budget:1.5GB", "x").budget,
            tp::memory_budget{std::size_t{1'500'000'000}});
  EXPECT_EQ(tp::parse_config("budget:none", "x").budget, std::nullopt);
  EXPECT_EQ(tp::parse_config("max_split_size:20MiB", "x").max_split_size, 20 * MiB);
  EXPECT_EQ(tp::parse_config("backend:cudamallocasync", "x").backend,
            tp::backend_kind::cuda_malloc_async);
  EXPECT_EQ(tp::parse_config("timeline:", "x").timeline, "");
}

// --- malformed configurations --------------------------------------------------

TEST(Config, RejectsUnknownKeyAndListsAcceptedKeys) {
  const std::string msg = error_for("budgit:12GiB", "PYTORCH_CUDA_ALLOC_CONF");
  EXPECT_THAT(msg, HasSubstr("PYTORCH_CUDA_ALLOC_CONF"));
  EXPECT_THAT(msg, HasSubstr("'budgit:12GiB'"));
  EXPECT_THAT(msg, HasSubstr("unknown key 'budgit'"));
  EXPECT_THAT(msg, HasSubstr("did you mean 'budget'?"));
  for (const auto& key : tp::config_keys()) EXPECT_THAT(msg, HasSubstr(key.name));
}

TEST(Config, RejectsMalformedSizeAndShowsAcceptedForms) {
  const std::string msg = error_for("budget:12 gigs");
  EXPECT_THAT(msg, HasSubstr("TENSORPAGER_CONF"));
  EXPECT_THAT(msg, HasSubstr("'budget:12 gigs'"));
  EXPECT_THAT(msg, HasSubstr("unknown unit 'gigs'"));
  EXPECT_THAT(msg, HasSubstr(tp::accepted_size_forms));
  EXPECT_THAT(error_for("host_budget:12G"), HasSubstr("ambiguous"));
  EXPECT_THAT(error_for("sim_capacity:"), HasSubstr("empty"));
}

TEST(Config, RejectsUnitTypo) {
  const std::string msg = error_for("budget:12GB B");
  EXPECT_THAT(msg, HasSubstr("'budget:12GB B'"));
  EXPECT_THAT(msg, HasSubstr("unknown unit 'GB B'"));
}

TEST(Config, RejectsNegativeSizes) {
  const std::string msg = error_for("host_budget:-1GiB");
  EXPECT_THAT(msg, HasSubstr("'host_budget:-1GiB'"));
  EXPECT_THAT(msg, HasSubstr("negative"));
  EXPECT_THAT(error_for("budget:-0.5"), HasSubstr("negative"));
}

TEST(Config, RejectsRatioOutsideZeroToOne) {
  const std::string msg = error_for("budget:1.5");
  EXPECT_THAT(msg, HasSubstr("'budget:1.5'"));
  EXPECT_THAT(msg, HasSubstr("(0, 1]"));
  EXPECT_THAT(msg, HasSubstr("1.5GiB"));
  EXPECT_THAT(error_for("budget:0.0"), HasSubstr("(0, 1]"));
  EXPECT_THAT(error_for("budget:1.5device"), HasSubstr("ratio of the device outside (0, 1]"));
  EXPECT_THAT(error_for("budget:1device"), HasSubstr("write a number with a decimal point"));
  EXPECT_THAT(error_for("host_budget:0.5"), HasSubstr("takes no ratio"));
}

// Note [Budget spellings]: a share of the peak needs a measured step.
TEST(Config, ARatioOfThePeakNeedsManagedActivations) {
  const std::string msg = error_for("budget:0.5,policy:lru");
  EXPECT_THAT(msg, HasSubstr("'budget:0.5'"));
  EXPECT_THAT(msg, HasSubstr("needs manage:activations"));
  EXPECT_THAT(msg, HasSubstr("write 0.5device"));
  EXPECT_THAT(error_for("budget:0.5peak"), HasSubstr("needs manage:activations"));
  EXPECT_NO_THROW((void)tp::parse_config("budget:0.5,manage:activations", "x"));  // order does not matter
  EXPECT_NO_THROW((void)tp::parse_config("budget:0.5device", "x"));
}

TEST(Config, RejectsAmbiguousOrZeroBudgets) {
  EXPECT_THAT(error_for("budget:1"), HasSubstr("ambiguous"));
  EXPECT_THAT(error_for("budget:0"), HasSubstr("ambiguous"));
  EXPECT_THAT(error_for("budget:0GiB"), HasSubstr("is 0 bytes"));
  EXPECT_THAT(error_for("host_budget:0"), HasSubstr("below the minimum"));
}

TEST(Config, RejectsMaxSplitSizeBelowTwentyMiB) {
  const std::string msg = error_for("max_split_size:19MiB");
  EXPECT_THAT(msg, HasSubstr("minimum of 20MiB"));
  EXPECT_THAT(msg, HasSubstr("'max_split_size:19MiB'"));
}

TEST(Config, RejectsUnknownChoiceAndListsChoices) {
  const std::string msg = error_for("policy:fifo");
  EXPECT_THAT(msg, HasSubstr("'fifo' is not one of the choices"));
  EXPECT_THAT(msg, HasSubstr("lru, dtr, capuchin, hybrid"));
  EXPECT_THAT(error_for("backend:cuda"), HasSubstr("tensorpager, native, cudaMallocAsync"));
  EXPECT_THAT(error_for("device:gpu"), HasSubstr("cuda, cpu"));
  EXPECT_THAT(error_for("host_fallback:swap"), HasSubstr("error, pageable"));
}

TEST(Config, RejectsDuplicateKey) {
  const std::string msg = error_for("budget:1GiB,policy:lru,budget:2GiB");
  EXPECT_THAT(msg, HasSubstr("'budget:2GiB'"));
  EXPECT_THAT(msg, HasSubstr("given twice (first as 'budget:1GiB')"));
}

TEST(Config, RejectsEmptyKeyMissingColonAndEmptyEntries) {
  EXPECT_THAT(error_for(":12GiB"), HasSubstr("key before ':' is empty"));
  const std::string msg = error_for("budget12GiB");
  EXPECT_THAT(msg, HasSubstr("missing ':'"));
  EXPECT_THAT(msg, HasSubstr("'budget12GiB'"));
  EXPECT_THAT(msg, HasSubstr("backend, budget, manage, host_budget"));
  EXPECT_THAT(error_for("policy:lru,,budget:1GiB"), HasSubstr("entry 2 is empty"));
  EXPECT_THAT(error_for(",policy:lru"), HasSubstr("entry 1 is empty"));
  EXPECT_THAT(error_for("policy:lru,,"), HasSubstr("is empty"));
}

// --- to_string ---------------------------------------------------------------

TEST(Config, ToStringRoundTrips) {
  EXPECT_EQ(tp::to_string(tp::config{}), "");
  const char* texts[] = {
      "budget:12GiB",
      "budget:0.6device,policy:lru",
      "backend:native,budget:1.0device,host_budget:1.5GB,host_fallback:pageable",
      "max_split_size:128MiB,timeline:C:/a b/run.json,record_trace:x.trace,device:cpu",
      "sim_capacity:1000,budget:4097",
      "timeline:run.html,timeline_events:123",
      "compress:Conv2d=pool2;ReLU=bf16,device:cpu",
      "compress:fp8",
      "backend:tensorpager,manage:activations,budget:0.5,policy:lru",
  };
  for (const char* text : texts) {
    const tp::config c = tp::parse_config(text, "x");
    const std::string written = tp::to_string(c);
    EXPECT_EQ(tp::parse_config(written, "x"), c) << text << " -> " << written;
  }
  EXPECT_EQ(tp::to_string(tp::parse_config("policy:DTR,budget:12GiB", "x")),
            "budget:12GiB,policy:dtr");
}

TEST(Config, ToStringRejectsValuesTheGrammarCannotCarry) {
  tp::config c;
  c.timeline = "a,b.json";
  EXPECT_THROW((void)tp::to_string(c), tp::config_error);
  c = {};
  c.budget = tp::memory_budget{tp::budget_ratio{1.5, tp::budget_share::device}};
  EXPECT_THROW((void)tp::to_string(c), tp::config_error);
  c = {};
  c.timeline_events = 0;
  EXPECT_THROW((void)tp::to_string(c), tp::config_error);
  c = {};
  c.compress = "Conv2d=zip";
  EXPECT_THROW((void)tp::to_string(c), tp::config_error);
}

// --- split_alloc_conf ----------------------------------------------------------

TEST(SplitAllocConf, SeparatesOurKeysFromPyTorchsPreservingOrder) {
  const auto s = tp::split_alloc_conf(
      "expandable_segments:False, backend:tensorpager,garbage_collection_threshold:0.6,"
      "budget:12GiB,max_split_size_mb:128,policy:dtr,");
  // expandable_segments is PyTorch's key and ours: both sides keep it.
  EXPECT_EQ(s.ours, "expandable_segments:False,backend:tensorpager,budget:12GiB,policy:dtr");
  EXPECT_EQ(s.theirs, "expandable_segments:False,garbage_collection_threshold:0.6,"
                      "max_split_size_mb:128");
}

TEST(SplitAllocConf, KeepsBracketedValuesAsOneEntry) {
  const auto s = tp::split_alloc_conf(
      "roundup_power2_divisions:[256:1,512:2,>:1],budget:0.5,expandable_segments:True");
  EXPECT_EQ(s.ours, "budget:0.5,expandable_segments:True");
  EXPECT_EQ(s.theirs, "roundup_power2_divisions:[256:1,512:2,>:1],expandable_segments:True");
}

TEST(SplitAllocConf, SharesPyTorchBackendsWithBothSides) {
  auto s = tp::split_alloc_conf("backend:cudaMallocAsync,budget:1GiB");
  EXPECT_EQ(s.ours, "backend:cudaMallocAsync,budget:1GiB");
  EXPECT_EQ(s.theirs, "backend:cudaMallocAsync");
  EXPECT_EQ(tp::parse_config(s.ours, "x").backend, tp::backend_kind::cuda_malloc_async);
  s = tp::split_alloc_conf("");
  EXPECT_EQ(s.ours, "");
  EXPECT_EQ(s.theirs, "");
  s = tp::split_alloc_conf("budget");  // no ':': ours, so parse_config explains
  EXPECT_EQ(s.ours, "budget");
}

// --- robustness ----------------------------------------------------------------

TEST(ConfigFuzz, RandomTextThrowsOnlyConfigError) {
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyz_:,.[]- 0123456789KMGTiB\t";
  const std::string fragments[] = {"budget:",  "policy:", "0.6",     "12GiB", ",",
                                   "host_budget:", "none", "1.0", "max_split_size:", "lru",
                                   "device", "peak", "manage:activations"};
  std::mt19937 rng(12345);
  for (int i = 0; i < 5000; ++i) {
    std::string text;
    const int pieces = static_cast<int>(rng() % 8);
    for (int p = 0; p < pieces; ++p) {
      if (rng() % 2 == 0) {
        text += fragments[rng() % std::size(fragments)];
      } else {
        for (auto n = rng() % 6; n > 0; --n) text += alphabet[rng() % alphabet.size()];
      }
    }
    try {
      const tp::config c = tp::parse_config(text, "fuzz");
      EXPECT_EQ(tp::parse_config(tp::to_string(c), "fuzz"), c) << text;
    } catch (const tp::config_error&) {
    }
    const auto s = tp::split_alloc_conf(text);
    EXPECT_LE(s.ours.size() + s.theirs.size(), 2 * text.size() + 1);
    (void)tp::parse_bytes(text);
    (void)tp::try_parse_ratio(text);
  }
}

}  // namespace


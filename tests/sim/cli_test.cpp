// tp-sim's command line: a single run, a sweep with its plot, and bad input.

#include "sim/cli.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "sim/trace_io.hpp"
#include "synthetic_traces.hpp"

namespace tp::sim {
namespace {

using namespace tp::sim::testing;

std::string read_file(const std::string& path) {
  std::string text(std::filesystem::file_size(path), '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  return text;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tp_sim_cli_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "chain.jsonl").string();
    std::ofstream out(path_);
    write_trace(out, linear_chain(8, 4 * MiB, 1'000'000, 2'000'000));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  int run(std::vector<std::string> args) {
    out_.str({});
    err_.str({});
    return run_cli(args, out_, err_);
  }
  std::filesystem::path dir_;
  std::string path_;
  std::ostringstream out_, err_;
};

TEST_F(Cli, OneRunAtARatioReportsEveryFigure) {
  ASSERT_EQ(run({path_, "--budget", "0.5", "--policy", "dtr"}), 0) << err_.str();
  const std::string o = out_.str();
  for (const char* key : {"fits:", "peak reserved:", "peak allocated:", "step time:", "slowdown:", "recompute:",
                          "stall:", "offloaded:", "prefetched:", "fragmentation:", "evictions:", "policy wall time:"}) {
    EXPECT_NE(o.find(key), std::string::npos) << key << "\n" << o;
  }
  EXPECT_NE(o.find("policy:            dtr"), std::string::npos);
}

TEST_F(Cli, BudgetInBytesIsAccepted) {
  ASSERT_EQ(run({path_, "--budget", "1GiB"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("budget:            1.00 GiB"), std::string::npos) << out_.str();
}

TEST_F(Cli, SweepPrintsATableAndWritesAPlot) {
  const std::string svg = (dir_ / "plot.svg").string();
  ASSERT_EQ(run({path_, "--sweep", "--plot", svg}), 0) << err_.str();
  const std::string o = out_.str();
  for (const char* policy : {"| lru | 0.1 |", "| dtr | 1.0 |", "| capuchin | 0.5 |", "| hybrid | 0.3 |"}) {
    EXPECT_NE(o.find(policy), std::string::npos) << policy;
  }
  EXPECT_NE(o.find("smallest fitting ratio"), std::string::npos);
  const std::string text = read_file(svg);
  EXPECT_EQ(text.rfind("<svg", 0), 0u);
  EXPECT_NE(text.find("<polyline"), std::string::npos);
  EXPECT_NE(text.find(">hybrid</text>"), std::string::npos);
  EXPECT_EQ(text.find("<script"), std::string::npos);
  // Deterministic: the sweep again gives the same plot.
  ASSERT_EQ(run({path_, "--sweep", "--plot", svg + ".2"}), 0);
  EXPECT_EQ(text, read_file(svg + ".2"));
}

// The defaults are the runtime's (Note [The simulator's defaults]); DTR's
// setting is two flags away.
TEST_F(Cli, LendingAndPlainSegmentsCanBeTurnedOffAndTheLeastBudgetIsSaidUpFront) {
  ASSERT_EQ(run({path_, "--budget", "0.5"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("; expandable segments; lending\n"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("least budget: "), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("no policy fits below it"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("policy:            hybrid"), std::string::npos) << out_.str();
  ASSERT_EQ(run({path_, "--budget", "0.5", "--expandable-segments", "False", "--lend", "False"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("; plain segments; nothing lent\n"), std::string::npos) << out_.str();
  EXPECT_EQ(run({path_, "--help"}), 0);
  EXPECT_NE(out_.str().find("--expandable-segments: the allocator's segments (default True"), std::string::npos)
      << out_.str();
  EXPECT_NE(out_.str().find("--lend: lend the runtime what each backward no longer needs (default True"),
            std::string::npos)
      << out_.str();
  EXPECT_EQ(run({path_, "--lend", "yes"}), 2);
  EXPECT_NE(err_.str().find("--lend 'yes'; accepted: True, False"), std::string::npos) << err_.str();
}

TEST_F(Cli, BadInputNamesItAndWhatIsAccepted) {
  EXPECT_EQ(run({path_, "--budget", "0"}), 2);
  EXPECT_NE(err_.str().find("--budget '0'"), std::string::npos) << err_.str();
  EXPECT_EQ(run({path_, "--budget", "-1"}), 2);
  EXPECT_NE(err_.str().find("accepted"), std::string::npos) << err_.str();
  EXPECT_EQ(run({path_, "--budget", "1.5"}), 2);
  EXPECT_NE(err_.str().find("outside (0, 1]"), std::string::npos) << err_.str();
  EXPECT_EQ(run({path_, "--budget", "0.5device"}), 2);  // Note [Budget spellings]: no device in a trace
  EXPECT_NE(err_.str().find("give a ratio of the unconstrained peak (0.5)"), std::string::npos) << err_.str();
  EXPECT_EQ(run({path_, "--budget", "12 gigs"}), 2);
  EXPECT_EQ(run({path_, "--policy", "fifo"}), 2);
  EXPECT_NE(err_.str().find("unknown policy 'fifo'; accepted: lru, dtr, capuchin, hybrid"), std::string::npos)
      << err_.str();
  EXPECT_EQ(run({path_, "--frobnicate"}), 2);
  EXPECT_EQ(run({}), 2);
  EXPECT_NE(err_.str().find("usage: tp-sim"), std::string::npos);
  EXPECT_EQ(run({(dir_ / "missing.jsonl").string()}), 2);
  EXPECT_NE(err_.str().find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace tp::sim

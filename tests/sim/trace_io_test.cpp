// tensorpager's trace format: round trips and clear errors for bad lines.

#include "sim/trace_io.hpp"

#include <gtest/gtest.h>

#include <sstream>

#include "core/errors.hpp"
#include "synthetic_traces.hpp"

namespace tp::sim {
namespace {

using namespace tp::sim::testing;

std::string message_of(const std::string& text) {
  std::istringstream in(text);
  try {
    read_trace(in, "t.jsonl");
  } catch (const error& e) {
    return e.what();
  }
  return "no error";
}

constexpr const char* header = R"({"format":"tensorpager-trace","version":1})"
                               "\n";

TEST(TraceIo, RoundTripsEveryField) {
  trace t = linear_chain(3, 4 * KiB, 1000, 2000);
  t.storages[0].label = "layer0.weight";
  t.ops[1].module = "layer1";
  t.ops[2].mutates = {t.storages[0].id};
  t.validate("t");
  std::stringstream s;
  write_trace(s, t);
  const trace u = read_trace(s, "round trip");
  ASSERT_EQ(u.storages.size(), t.storages.size());
  for (std::size_t i = 0; i < t.storages.size(); ++i) {
    EXPECT_EQ(u.storages[i].id, t.storages[i].id);
    EXPECT_EQ(u.storages[i].bytes, t.storages[i].bytes);
    EXPECT_EQ(u.storages[i].pre_existing, t.storages[i].pre_existing);
    EXPECT_EQ(u.storages[i].saved, t.storages[i].saved);
    EXPECT_EQ(u.storages[i].label, t.storages[i].label);
  }
  ASSERT_EQ(u.ops.size(), t.ops.size());
  for (std::size_t i = 0; i < t.ops.size(); ++i) {
    EXPECT_EQ(u.ops[i].name, t.ops[i].name);
    EXPECT_EQ(u.ops[i].inputs, t.ops[i].inputs);
    EXPECT_EQ(u.ops[i].outputs, t.ops[i].outputs);
    EXPECT_EQ(u.ops[i].mutates, t.ops[i].mutates);
    EXPECT_EQ(u.ops[i].time_ns, t.ops[i].time_ns);
    EXPECT_EQ(u.ops[i].when, t.ops[i].when);
    EXPECT_EQ(u.ops[i].module, t.ops[i].module);
  }
  ASSERT_EQ(u.events.size(), t.events.size());
  EXPECT_EQ(u.compute_ns(), t.compute_ns());
}

TEST(TraceIo, StepLinesSplitSteps) {
  std::istringstream in(std::string(header) +
                        R"({"type":"storage","id":1,"bytes":64})" "\n"
                        R"({"type":"op","name":"a","inputs":[1],"outputs":[{"id":2,"bytes":8}],"time_ns":5})" "\n"
                        R"({"type":"free","id":2})" "\n"
                        R"({"type":"step"})" "\n"
                        R"({"type":"op","name":"b","inputs":[1],"time_ns":7,"phase":"backward"})" "\n");
  const trace t = read_trace(in, "steps");
  EXPECT_EQ(t.steps(), 2u);
  EXPECT_EQ(t.compute_ns(), 12);
  EXPECT_EQ(t.ops[1].when, phase::backward);
}

TEST(TraceIo, MalformedLinesNameTheLineAndWhatIsAccepted) {
  EXPECT_NE(message_of("").find("empty"), std::string::npos);
  EXPECT_NE(message_of("{\"format\":\"other\"}\n").find("t.jsonl:1"), std::string::npos);
  const std::string bad_json = message_of(std::string(header) + "{not json\n");
  EXPECT_NE(bad_json.find("t.jsonl:2: not valid JSON"), std::string::npos) << bad_json;
  EXPECT_NE(bad_json.find("\"storage\", \"op\", \"free\", \"step\""), std::string::npos) << bad_json;
  EXPECT_NE(message_of(std::string(header) + R"({"type":"tensor"})" "\n").find("unknown \"type\" 'tensor'"),
            std::string::npos);
  EXPECT_NE(message_of(std::string(header) + R"({"type":"op","name":"a"})" "\n").find("time_ns"),
            std::string::npos);
  EXPECT_NE(message_of(std::string(header) + R"({"type":"storage","id":-1,"bytes":4})" "\n").find("\"id\""),
            std::string::npos);
  EXPECT_NE(message_of(std::string(header) + R"({"type":"op","name":"a","inputs":[9],"time_ns":1})" "\n")
                .find("storage 9 is not declared"),
            std::string::npos);
  EXPECT_NE(message_of(std::string(header) + R"({"type":"storage","id":1,"bytes":4})" "\n"
                       R"({"type":"free","id":1})" "\n" R"({"type":"free","id":1})" "\n")
                .find("not live"),
            std::string::npos);
}

TEST(TraceIo, MissingFileIsAClearError) {
  try {
    read_trace_file("no/such/trace.jsonl");
    FAIL() << "no error";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/trace.jsonl: cannot open"), std::string::npos);
  }
}

}  // namespace
}  // namespace tp::sim

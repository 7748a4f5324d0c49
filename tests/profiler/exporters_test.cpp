// The pickle encoder's bytes, the memory_viz snapshot's shape, the HTML
// page's self-containment and embedded data, the text report, and choosing a
// format by extension. (Loading the pickle with Python's pickle and
// rendering the page in Chromium are in tests/python/test_timeline*.py.)

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
// GCC 12 at -O2 and above reports -Wnull-dereference inside json.hpp once
// it is inlined here; the warning concerns nlohmann's code, not ours.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <nlohmann/json.hpp>
#pragma GCC diagnostic pop
#include <sstream>
#include <string>

#include "core/errors.hpp"
#include "profiler/html_exporter.hpp"
#include "profiler/memory_viz_exporter.hpp"
#include "profiler/pickle_writer.hpp"
#include "profiler/text_report.hpp"
#include "profiler/timeline_files.hpp"
#include "profiler_test_support.hpp"

namespace tp::profiler {
namespace {

using namespace tp::profiler::testing;
using namespace std::string_literals;

TEST(PickleWriter, WritesTheOpcodesPythonAndMemoryVizRead) {
  std::string out;
  pickle_writer w(out);
  w.begin_object();
  w.member("a", 1);
  w.member("b", -2);
  w.member("c", std::uint64_t{1} << 40);
  w.key("d");
  w.begin_array();
  w.value(true);
  w.null();
  w.value(300);
  w.end_array();
  w.end_object();
  w.finish();
  // Valid pickle (pickletools.dis reads it back as the dict above); LONG1
  // always takes 8 bytes here, where pickle.dumps would take the fewest.
  const std::string expected =
      "\x80\x04}("
      "\x8c\x01" "aK\x01"
      "\x8c\x01" "bJ\xfe\xff\xff\xff"
      "\x8c\x01" "c\x8a\x08\x00\x00\x00\x00\x00\x01\x00\x00"
      "\x8c\x01" "d](\x88NM\x2c\x01" "e"
      "u."s;
  EXPECT_EQ(out, expected);
}

TEST(PickleWriter, RejectsUnbalancedNesting) {
  std::string out;
  pickle_writer w(out);
  w.begin_array();
  EXPECT_THROW(w.finish(), error);
  EXPECT_THROW(w.end_object(), error);
}

timeline small_run() {
  static recorded_rig* rig = [] {
    auto* r = new recorded_rig;
    r->log.set_device_name(0, "cpu (simulated)");
    r->log.set_context({category::parameter, r->log.intern("net.0 (Linear)")});
    void* w = r->alloc.allocate(6 * MiB);
    r->tick();
    r->log.set_context({category::activation, r->log.intern("net.1 <ReLU> & co")});
    void* a = r->alloc.allocate(3 * MiB);
    r->tick();
    r->alloc.deallocate(a);
    r->tick();
    event step;
    step.kind = event_kind::step;
    r->log.record(step);
    r->tick();
    (void)w;
    return r;
  }();
  return rig->log.snapshot();
}

TEST(HtmlExporter, IsSelfContainedWithItsDataEmbedded) {
  const std::string page = to_html(small_run());
  for (const char* forbidden : {"http://", "https://", "src=", "href=", "@import", "url(", "//cdn"}) {
    EXPECT_EQ(page.find(forbidden), std::string::npos) << forbidden;
  }
  EXPECT_NE(page.find("<svg class=\"tp-plot\""), std::string::npos);
  EXPECT_NE(page.find("net.1 &lt;ReLU&gt; &amp; co"), std::string::npos);
  const std::string open = "<script type=\"application/json\" id=\"tp-data\">";
  const auto begin = page.find(open);
  ASSERT_NE(begin, std::string::npos);
  const auto end = page.find("</script>", begin);
  const auto data = nlohmann::json::parse(page.substr(begin + open.size(), end - begin - open.size()));
  const auto& dev = data["devices"][0];
  EXPECT_EQ(dev["peak_allocated"], 9 * MiB);
  const auto& allocated = dev["series"]["allocated"];
  EXPECT_EQ(*std::max_element(allocated.begin(), allocated.end()), 9 * MiB);
  EXPECT_EQ(dev["top"][0]["label"], "net.0 (Linear)");
  EXPECT_EQ(data["steps_ns"].size(), 1u);
}

TEST(TextReport, HasTotalsCategoriesAndTheLargestBlocks) {
  const std::string r = to_text_report(small_run(), 5);
  EXPECT_NE(r.find("cpu (simulated)"), std::string::npos);
  EXPECT_NE(r.find("peak allocated        9.00 MiB"), std::string::npos) << r;
  EXPECT_NE(r.find("net.0 (Linear)"), std::string::npos);
  EXPECT_NE(r.find("activation"), std::string::npos);
  EXPECT_NE(r.find(", 1 step\n"), std::string::npos) << r;
}

TEST(MemoryVizExporter, StartsWithAProtocol4Dict) {
  const std::string p = to_memory_viz_pickle(small_run());
  ASSERT_GT(p.size(), 4u);
  EXPECT_EQ(p.substr(0, 3), "\x80\x04}"s);
  EXPECT_EQ(p.back(), '.');
  EXPECT_NE(p.find("device_traces"), std::string::npos);
  EXPECT_NE(p.find("segments"), std::string::npos);
}

TEST(TimelineFiles, ChoosesTheFormatByExtension) {
  EXPECT_EQ(format_for_path("run.JSON"), timeline_format::perfetto_json);
  EXPECT_EQ(format_for_path("a/b.pkl"), timeline_format::memory_viz_pickle);
  EXPECT_EQ(format_for_path("x.pickle"), timeline_format::memory_viz_pickle);
  EXPECT_EQ(format_for_path("page.htm"), timeline_format::html);
  EXPECT_EQ(format_for_path("report.txt"), timeline_format::text);
  try {
    format_for_path("dir.v2/run");
    FAIL() << "no extension accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(".json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("dir.v2/run"), std::string::npos);
  }
}

TEST(TimelineFiles, WritesEachFormatAndReportsUnwritablePaths) {
  const timeline t = small_run();
  const std::string dir = ::testing::TempDir();
  for (const char* name : {"t.json", "t.pickle", "t.html", "t.txt"}) {
    const std::string path = dir + "/" + name;
    write_timeline_file(t, path);
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    EXPECT_EQ(ss.str(), render_timeline(t, format_for_path(path)));
    std::remove(path.c_str());
  }
  EXPECT_THROW(write_timeline_file(t, "/nonexistent-dir/x.json"), error);
}

}  // namespace
}  // namespace tp::profiler

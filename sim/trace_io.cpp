#include "sim/trace_io.hpp"

#include <fmt/format.h>

#include <fstream>
#include <istream>
#include <nlohmann/json.hpp>
#include <ostream>

#include "core/errors.hpp"

namespace tp::sim {
namespace {

using json = nlohmann::json;

constexpr const char* accepted_lines =
    "a header {\"format\":\"tensorpager-trace\",\"version\":1,...} first, then objects with "
    "\"type\" one of \"storage\", \"op\", \"free\", \"step\" (docs/trace_format.md)";

struct line_context {
  const std::string& what;
  std::size_t line;
  [[noreturn]] void fail(const std::string& why) const {
    throw error(fmt::format("{}:{}: {}; expected {}", what, line, why, accepted_lines));
  }
};

std::uint64_t get_uint(const json& j, const char* key, const line_context& at) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) {
    at.fail(fmt::format("field \"{}\" must be a non-negative integer", key));
  }
  return it->get<std::uint64_t>();
}

std::vector<storage_id> get_ids(const json& j, const char* key, const line_context& at) {
  std::vector<storage_id> ids;
  const auto it = j.find(key);
  if (it == j.end()) return ids;
  if (!it->is_array()) at.fail(fmt::format("field \"{}\" must be an array of storage ids", key));
  for (const json& v : *it) {
    if (!v.is_number_unsigned()) at.fail(fmt::format("field \"{}\" must hold storage ids", key));
    ids.push_back(v.get<storage_id>());
  }
  return ids;
}

std::string get_string(const json& j, const char* key, const line_context& at) {
  const auto it = j.find(key);
  if (it == j.end()) return {};
  if (!it->is_string()) at.fail(fmt::format("field \"{}\" must be a string", key));
  return it->get<std::string>();
}

void read_header(const json& j, trace& t, const line_context& at) {
  if (!j.is_object() || j.value("format", std::string{}) != trace_format_name) {
    at.fail("the first line is not a tensorpager trace header");
  }
  const auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer() || version->get<int>() != trace_format_version) {
    at.fail(fmt::format("unsupported version (this reader reads version {})", trace_format_version));
  }
  t.source = get_string(j, "source", at);
  if (const auto s = j.find("compute_scale"); s != j.end()) {
    if (!s->is_number() || s->get<double>() <= 0) at.fail("\"compute_scale\" must be a number > 0");
    t.compute_scale = s->get<double>();
  }
}

void read_op(const json& j, trace& t, const line_context& at) {
  op_record op;
  op.name = get_string(j, "name", at);
  if (op.name.empty()) at.fail("an op needs a non-empty \"name\"");
  op.inputs = get_ids(j, "inputs", at);
  op.mutates = get_ids(j, "mutates", at);
  const auto time = j.find("time_ns");
  if (time == j.end() || !time->is_number_unsigned()) at.fail("an op needs \"time_ns\" >= 0 (an integer)");
  op.time_ns = static_cast<std::int64_t>(time->get<std::uint64_t>());
  const std::string ph = get_string(j, "phase", at);
  if (ph == "backward") op.when = phase::backward;
  else if (ph != "forward" && !ph.empty()) at.fail("\"phase\" must be \"forward\" or \"backward\"");
  op.module = get_string(j, "module", at);
  if (const auto outs = j.find("outputs"); outs != j.end()) {
    if (!outs->is_array()) at.fail("\"outputs\" must be an array of {\"id\",\"bytes\",\"saved\"}");
    for (const json& o : *outs) {
      if (!o.is_object()) at.fail("each output must be an object {\"id\",\"bytes\",\"saved\"}");
      storage s;
      s.id = get_uint(o, "id", at);
      s.bytes = static_cast<std::size_t>(get_uint(o, "bytes", at));
      if (const auto saved = o.find("saved"); saved != o.end()) {
        if (!saved->is_boolean()) at.fail("\"saved\" must be true or false");
        s.saved = saved->get<bool>();
      }
      op.outputs.push_back(s.id);
      t.storages.push_back(std::move(s));
    }
  }
  t.events.push_back({event::kind::op, t.ops.size(), 0});
  t.ops.push_back(std::move(op));
}

}  // namespace

trace read_trace(std::istream& in, const std::string& what) {
  trace t;
  std::string text;
  std::size_t line = 0;
  bool header = false;
  while (std::getline(in, text)) {
    ++line;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const line_context at{what, line};
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) at.fail("not valid JSON");
    if (!header) {
      read_header(j, t, at);
      header = true;
      continue;
    }
    if (!j.is_object()) at.fail("not a JSON object");
    const std::string type = get_string(j, "type", at);
    if (type == "storage") {
      storage s;
      s.id = get_uint(j, "id", at);
      s.bytes = static_cast<std::size_t>(get_uint(j, "bytes", at));
      s.pre_existing = true;
      s.label = get_string(j, "label", at);
      t.storages.push_back(std::move(s));
    } else if (type == "op") {
      read_op(j, t, at);
    } else if (type == "free") {
      t.events.push_back({event::kind::free, 0, get_uint(j, "id", at)});
    } else if (type == "step") {
      t.events.push_back({event::kind::step, 0, 0});
    } else {
      at.fail(fmt::format("unknown \"type\" '{}'", type));
    }
  }
  if (!header) throw error(fmt::format("{}: empty; expected {}", what, accepted_lines));
  t.validate(what);
  return t;
}

trace read_trace_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw error(fmt::format("{}: cannot open the trace file", path));
  return read_trace(in, path);
}

void write_trace(std::ostream& out, const trace& t) {
  json header = {{"format", trace_format_name}, {"version", trace_format_version},
                 {"source", t.source.empty() ? "tensorpager" : t.source},
                 {"compute_scale", t.compute_scale}};
  out << header.dump() << '\n';
  std::unordered_map<storage_id, const storage*> by_id;
  for (const storage& s : t.storages) {
    by_id.emplace(s.id, &s);
    if (!s.pre_existing) continue;
    json j = {{"type", "storage"}, {"id", s.id}, {"bytes", s.bytes}};
    if (!s.label.empty()) j["label"] = s.label;
    out << j.dump() << '\n';
  }
  for (const event& e : t.events) {
    if (e.what == event::kind::step) {
      out << R"({"type":"step"})" << '\n';
    } else if (e.what == event::kind::free) {
      out << json{{"type", "free"}, {"id", e.id}}.dump() << '\n';
    } else {
      const op_record& op = t.ops[e.op];
      json outs = json::array();
      for (storage_id id : op.outputs) {
        const storage& s = *by_id.at(id);
        outs.push_back({{"id", id}, {"bytes", s.bytes}, {"saved", s.saved}});
      }
      json j = {{"type", "op"}, {"name", op.name}, {"inputs", op.inputs}, {"outputs", outs},
                {"time_ns", op.time_ns}, {"phase", to_string(op.when)}};
      if (!op.mutates.empty()) j["mutates"] = op.mutates;
      if (!op.module.empty()) j["module"] = op.module;
      out << j.dump() << '\n';
    }
  }
}

}  // namespace tp::sim

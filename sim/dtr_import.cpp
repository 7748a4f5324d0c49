#include "sim/dtr_import.hpp"

#include <fmt/format.h>

#include <fstream>
#include <istream>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/errors.hpp"

namespace tp::sim {
namespace {

using json = nlohmann::json;

constexpr const char* accepted_instructions =
    "one JSON object per line with \"INSTRUCTION\" one of ANNOTATE, CONSTANT, MEMORY, CALL, ALIAS, "
    "MUTATE, COPY, COPY_FROM, RELEASE (bench/traces/dtr/README.md)";

// Note [DTR references]: a tensor, and the storage it lives on (none for 0 bytes).
struct dtr_tensor {
  std::optional<storage_id> storage;
  std::size_t refs = 0;
};

class importer {
 public:
  explicit importer(const std::string& what) : what_(what) {}

  void line(const json& j, std::size_t line_no) {
    line_ = line_no;
    if (!j.is_object()) fail("not a JSON object");
    const std::string ins = str(j, "INSTRUCTION");
    if (ins != "MEMORY" && ins != "ALIAS") finish_call();
    if (ins == "ANNOTATE") {
      if (str(j, "ANNOTATION") == "BACKWARD") phase_ = phase::backward;
    } else if (ins == "CONSTANT") {
      pending_constant_ = str(j, "NAME");
    } else if (ins == "MEMORY") {
      memory(str(j, "NAME"), num(j.at("MEMORY")));
    } else if (ins == "CALL") {
      call(j);
    } else if (ins == "ALIAS") {
      alias(str(j, "NAME"), j.at("ALIAS"));
    } else if (ins == "MUTATE") {
      mutate(j);
    } else if (ins == "COPY" || ins == "COPY_FROM") {
      const std::string dst = str(j, "DST");
      const std::size_t src = tensor_of(str(j, "SRC"));
      if (names_.count(dst) != 0) drop_ref(dst);
      ++tensors_[src].refs;
      names_[dst] = src;
    } else if (ins == "RELEASE") {
      drop_ref(str(j, "NAME"));
    } else {
      fail(fmt::format("unknown INSTRUCTION '{}'", ins));
    }
  }

  trace finish() {
    finish_call();
    if (pending_constant_) fail(fmt::format("CONSTANT {} has no MEMORY line", *pending_constant_));
    trace t;
    t.source = "dtr";
    t.storages = std::move(constants_);
    for (storage& s : produced_) t.storages.push_back(std::move(s));
    t.ops = std::move(ops_);
    t.events = std::move(events_);
    t.validate(what_);
    return t;
  }

 private:
  struct pending_result {
    std::string name;
    std::optional<std::size_t> bytes;
    bool aliased = false;
  };

  [[noreturn]] void fail(const std::string& why) const {
    throw error(fmt::format("{}:{}: {}; expected {}", what_, line_, why, accepted_instructions));
  }
  std::string str(const json& j, const char* key) const {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_string()) fail(fmt::format("field \"{}\" must be a string", key));
    return it->get<std::string>();
  }
  // DTR writes numbers as strings ("1728"); MUTATE indices come as numbers.
  std::int64_t num(const json& v) const {
    if (v.is_number_integer()) return v.get<std::int64_t>();
    if (v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      std::size_t used = 0;
      try {
        const long long n = std::stoll(s, &used);
        if (used == s.size()) return n;
      } catch (const std::exception&) {
      }
    }
    fail(fmt::format("'{}' is not an integer", v.dump()));
  }
  std::size_t tensor_of(const std::string& name) const {
    const auto it = names_.find(name);
    if (it == names_.end()) fail(fmt::format("reference '{}' is unknown or released", name));
    return it->second;
  }
  std::vector<std::string> names(const json& j, const char* key) const {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_array()) fail(fmt::format("field \"{}\" must be an array of names", key));
    std::vector<std::string> out;
    for (const json& v : *it) {
      if (!v.is_string()) fail(fmt::format("field \"{}\" must hold names", key));
      out.push_back(v.get<std::string>());
    }
    return out;
  }
  std::size_t new_tensor(const std::string& name, std::optional<storage_id> s) {
    if (names_.count(name) != 0) drop_ref(name);
    tensors_.push_back({s, 1});
    if (s) ++storage_tensors_[*s];
    names_[name] = tensors_.size() - 1;
    return tensors_.size() - 1;
  }
  storage_id new_storage(std::size_t bytes, bool pre_existing, const std::string& label) {
    storage s;
    s.id = next_id_++;
    s.bytes = bytes;
    s.pre_existing = pre_existing;
    s.saved = !pre_existing;
    s.label = label;
    if (pre_existing) constant_storages_.insert(s.id);
    (pre_existing ? constants_ : produced_).push_back(std::move(s));
    return next_id_ - 1;
  }
  void drop_ref(const std::string& name) {
    const std::size_t t = tensor_of(name);
    names_.erase(name);
    if (--tensors_[t].refs != 0 || !tensors_[t].storage) return;
    const storage_id s = *tensors_[t].storage;
    if (--storage_tensors_[s] == 0) {
      storage_tensors_.erase(s);
      if (!constant_storages_.contains(s)) events_.push_back({event::kind::free, 0, s});  // Note [DTR references]
    }
  }
  std::vector<storage_id> storages_of(const std::vector<std::string>& args) const {
    std::vector<storage_id> out;
    for (const std::string& a : args) {
      if (const auto& s = tensors_[tensor_of(a)].storage) out.push_back(*s);
    }
    return out;
  }

  void memory(const std::string& name, std::int64_t bytes) {
    if (bytes < 0) fail("MEMORY must be >= 0");
    if (pending_constant_ && *pending_constant_ == name) {
      const auto b = static_cast<std::size_t>(bytes);
      new_tensor(name, b > 0 ? std::optional<storage_id>(new_storage(b, true, name)) : std::nullopt);
      pending_constant_.reset();
      return;
    }
    for (pending_result& r : results_) {
      if (r.name == name && !r.bytes) {
        r.bytes = static_cast<std::size_t>(bytes);
        return;
      }
    }
    fail(fmt::format("MEMORY for '{}', which is neither a pending CONSTANT nor a CALL result", name));
  }

  void call(const json& j) {
    op_record op;
    op.name = str(j, "NAME");
    call_args_ = names(j, "ARGS");
    op.inputs = storages_of(call_args_);
    op.time_ns = num(j.at("TIME"));
    if (op.time_ns < 0) fail("TIME must be >= 0");
    op.when = phase_;
    for (const std::string& r : names(j, "RESULT")) results_.push_back({r, std::nullopt, false});
    call_op_ = ops_.size();
    events_.push_back({event::kind::op, ops_.size(), 0});
    ops_.push_back(std::move(op));
    in_call_ = true;
  }

  void alias(const std::string& name, const json& v) {
    if (!in_call_) fail(fmt::format("ALIAS for '{}' outside a CALL", name));
    for (pending_result& r : results_) {
      if (r.name != name || r.aliased) continue;
      if (!r.bytes) fail(fmt::format("ALIAS for '{}' before its MEMORY line", name));
      r.aliased = true;
      const std::int64_t k = num(v);
      if (k == -1) {
        std::optional<storage_id> s;
        if (*r.bytes > 0) {
          s = new_storage(*r.bytes, false, {});
          ops_[call_op_].outputs.push_back(*s);
        }
        new_tensor(name, s);
      } else if (k >= 0 && static_cast<std::size_t>(k) < call_args_.size()) {
        new_tensor(name, tensors_[tensor_of(call_args_[static_cast<std::size_t>(k)])].storage);
      } else {
        fail(fmt::format("ALIAS {} of '{}' is not -1 nor an argument index", k, name));
      }
      return;
    }
    fail(fmt::format("ALIAS for '{}', which is not a result of the pending CALL", name));
  }

  void finish_call() {
    if (!in_call_) return;
    for (const pending_result& r : results_) {
      if (!r.aliased) fail(fmt::format("CALL result '{}' has no MEMORY and ALIAS lines", r.name));
    }
    results_.clear();
    in_call_ = false;
  }

  void mutate(const json& j) {
    op_record op;
    op.name = str(j, "NAME");
    const std::vector<std::string> args = names(j, "ARGS");
    op.inputs = storages_of(args);
    const auto m = j.find("MUTATE");
    if (m == j.end() || !m->is_array()) fail("MUTATE needs a \"MUTATE\" array of argument indices");
    for (const json& v : *m) {
      const std::int64_t k = num(v);
      if (k < 0 || static_cast<std::size_t>(k) >= args.size()) fail(fmt::format("MUTATE index {} out of range", k));
      if (const auto& s = tensors_[tensor_of(args[static_cast<std::size_t>(k)])].storage) op.mutates.push_back(*s);
    }
    op.time_ns = num(j.at("TIME"));
    if (op.time_ns < 0) fail("TIME must be >= 0");
    op.when = phase_;
    events_.push_back({event::kind::op, ops_.size(), 0});
    ops_.push_back(std::move(op));
  }

  const std::string& what_;
  std::size_t line_ = 0;
  phase phase_ = phase::forward;
  std::unordered_map<std::string, std::size_t> names_;  // reference -> tensor
  std::vector<dtr_tensor> tensors_;
  std::unordered_map<storage_id, std::size_t> storage_tensors_;  // live tensors per storage
  std::unordered_set<storage_id> constant_storages_;             // never freed
  std::vector<storage> constants_, produced_;
  std::vector<op_record> ops_;
  std::vector<event> events_;
  storage_id next_id_ = 1;
  std::optional<std::string> pending_constant_;
  bool in_call_ = false;
  std::size_t call_op_ = 0;
  std::vector<std::string> call_args_;
  std::vector<pending_result> results_;
};

}  // namespace

trace import_dtr_log(std::istream& in, const std::string& what) {
  importer imp(what);
  std::string text;
  std::size_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      throw error(fmt::format("{}:{}: not valid JSON; expected {}", what, line, accepted_instructions));
    }
    try {
      imp.line(j, line);
    } catch (const json::exception& e) {
      throw error(fmt::format("{}:{}: {}; expected {}", what, line, e.what(), accepted_instructions));
    }
  }
  return imp.finish();
}

trace import_dtr_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw error(fmt::format("{}: cannot open the DTR log", path));
  return import_dtr_log(in, path);
}

bool looks_like_dtr(const std::string& path) {
  if (path.size() >= 4 && path.compare(path.size() - 4, 4, ".log") == 0) return true;
  std::ifstream in(path);
  std::string text;
  while (std::getline(in, text)) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    return j.is_object() && j.contains("INSTRUCTION");
  }
  return false;
}

}  // namespace tp::sim

// tensorpager._C's timeline functions, for python/tensorpager (timeline.py,
// viz.py, __init__.py). The contract (names, types, exceptions) is the one
// the package codes against; change both together.
//
//   timeline_start(max_events: int = 0)     timeline_stop()
//   timeline_info() -> dict                 (recording, recorded, events, dropped, max_events)
//   timeline_dump(path: str, top: int = 20, format: str = "")   ("" : by extension)
//   timeline_report(top: int = 20) -> str   timeline_step(index: int)
//   timeline_intern(text: str) -> int (0 when not recording)
//   timeline_set_context(category: str, label: int)   (intern, set_context and tag: no-ops when not recording)
//   timeline_tag(address: int, category: str, label: int = 0)
//   timeline_record(kind: str, *, id, bytes, address, stream, detail, host_bytes, device, label)
//   timeline_kinds() -> list[str]           timeline_categories() -> list[str]
//   timeline_convert(saved: dict, path: str, top: int = 20, format: str = "")
//
// Errors: tp::invalid_argument (bad extension, unknown kind or category, a
// malformed saved timeline) -> ValueError; tp::error (nothing recorded,
// not installed, a file that cannot be written) -> RuntimeError, through the
// module's translator (python_module.cpp).

#include <Python.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "core/errors.hpp"
#include "hooks/profiler_glue.hpp"
#include "hooks/tensorpager.hpp"
#include "profiler/timeline_files.hpp"

namespace py = pybind11;

namespace tp::hooks {
namespace {

profiler::category category_named(const std::string& name) {
  if (const auto c = profiler::parse_category(name)) return *c;
  std::string accepted;
  for (std::size_t i = 0; i < profiler::category_count; ++i) {
    accepted += (i ? ", " : "") + std::string(profiler::to_string(static_cast<profiler::category>(i)));
  }
  throw invalid_argument("tensorpager: unknown timeline category '" + name + "'; accepted: " + accepted);
}

profiler::event_kind kind_named(const std::string& name) {
  if (const auto k = profiler::parse_event_kind(name)) return *k;
  std::string accepted;
  for (std::size_t i = 0; i < profiler::event_kind_count; ++i) {
    accepted += (i ? ", " : "") + std::string(profiler::to_string(static_cast<profiler::event_kind>(i)));
  }
  throw invalid_argument("tensorpager: unknown timeline event kind '" + name + "'; accepted: " + accepted);
}

profiler::timeline_format format_of(const std::string& path, const std::string& format) {
  if (format.empty()) return profiler::format_for_path(path);
  return profiler::format_for_path("x." + format);
}

void write(const profiler::timeline& t, const std::string& path, std::size_t top, const std::string& format) {
  profiler::timeline_file_options o;
  o.top_n = top;
  if (format.empty()) {
    profiler::write_timeline_file(t, path, o);
    return;
  }
  // An explicit format (dump_snapshot() writes a pickle whatever the name).
  const std::string contents = profiler::render_timeline(t, format_of(path, format), o);
  FILE* f = std::fopen(path.c_str(), "wb");
  const bool written = f != nullptr && std::fwrite(contents.data(), 1, contents.size(), f) == contents.size();
  if ((f != nullptr && std::fclose(f) != 0) || !written) {
    throw error("tensorpager: cannot write the timeline to '" + path + "'");
  }
}

std::shared_ptr<profiler::event_log> recording_log() {
  auto log = current_event_log();
  if (log == nullptr) {
    throw error("tensorpager: no timeline is recording: call tensorpager.start_timeline() or set the "
                "timeline:PATH key");
  }
  return log;
}

/// Reads a list of ints of the saved form (Note [Saved timeline]).
template <class T>
T as(const py::handle& h, const char* what) {
  try {
    return h.cast<T>();
  } catch (const py::cast_error&) {
    throw invalid_argument(std::string("tensorpager: a saved timeline's ") + what + " is malformed");
  }
}

/// The timeline a saved dict describes (Note [Saved timeline]).
profiler::timeline from_saved(const py::dict& saved) {
  if (!saved.contains("format") || as<std::string>(saved["format"], "format") != "tensorpager.timeline") {
    throw invalid_argument("tensorpager: not a saved tensorpager timeline (no format 'tensorpager.timeline')");
  }
  if (as<int>(saved["version"], "version") > 1) {
    throw invalid_argument("tensorpager: this saved timeline has a newer version than this tensorpager reads (1)");
  }
  std::vector<profiler::event_kind> kinds;
  for (const auto& k : saved["kinds"]) kinds.push_back(kind_named(as<std::string>(k, "kinds")));
  std::vector<profiler::category> categories;
  for (const auto& c : saved["categories"]) categories.push_back(category_named(as<std::string>(c, "categories")));
  std::vector<std::string> fields;
  for (const auto& f : saved["event_fields"]) fields.push_back(as<std::string>(f, "event_fields"));
  const std::vector<std::string> expected = {"t_ns", "kind", "category", "device", "stream", "address", "bytes",
                                             "id", "detail", "allocated_bytes", "reserved_bytes", "host_bytes",
                                             "label"};
  if (fields != expected) throw invalid_argument("tensorpager: a saved timeline's event_fields are not version 1's");

  profiler::timeline t;
  const py::list events = saved["events"];
  t.events.reserve(events.size());
  for (const auto& row : events) {
    const py::sequence r = py::reinterpret_borrow<py::sequence>(row);
    if (r.size() != expected.size()) throw invalid_argument("tensorpager: a saved timeline event has the wrong length");
    profiler::event e;
    e.t_ns = as<std::int64_t>(r[0], "t_ns");
    const auto k = as<std::size_t>(r[1], "kind"), c = as<std::size_t>(r[2], "category");
    if (k >= kinds.size() || c >= categories.size()) throw invalid_argument("tensorpager: a saved event's kind or category is out of range");
    e.kind = kinds[k];
    e.category = categories[c];
    e.device = as<std::int16_t>(r[3], "device");
    e.stream = as<std::uint64_t>(r[4], "stream");
    e.address = as<std::uint64_t>(r[5], "address");
    e.bytes = as<std::uint64_t>(r[6], "bytes");
    e.id = as<std::uint64_t>(r[7], "id");
    e.detail = as<std::int64_t>(r[8], "detail");
    e.allocated_bytes = as<std::int64_t>(r[9], "allocated_bytes");
    e.reserved_bytes = as<std::int64_t>(r[10], "reserved_bytes");
    e.host_bytes = as<std::int64_t>(r[11], "host_bytes");
    e.label = as<std::uint32_t>(r[12], "label");
    t.events.push_back(e);
  }
  t.labels = as<std::vector<std::string>>(saved["labels"], "labels");
  if (t.labels.empty()) t.labels.emplace_back();
  t.device_names = as<std::vector<std::string>>(saved["devices"], "devices");
  t.dropped = as<std::uint64_t>(saved["dropped"], "dropped");
  t.max_events = as<std::uint64_t>(saved["max_events"], "max_events");
  for (const auto& item : saved["initial"]) {
    const py::dict d = py::reinterpret_borrow<py::dict>(item);
    profiler::initial_device_state s;
    s.device = as<std::int16_t>(d["device"], "initial.device");
    s.budget = as<std::int64_t>(d["budget"], "initial.budget");
    for (const auto& sitem : d["segments"]) {
      const py::dict sd = py::reinterpret_borrow<py::dict>(sitem);
      segment_snapshot seg;
      seg.address = as<std::uintptr_t>(sd["address"], "segment address");
      seg.total_size = as<std::size_t>(sd["total_size"], "segment total_size");
      seg.stream = stream_id{as<std::uintptr_t>(sd["stream"], "segment stream")};
      seg.pool = as<std::string>(sd["segment_type"], "segment_type") == "small" ? pool_kind::small : pool_kind::large;
      for (const auto& bitem : sd["blocks"]) {
        const py::dict bd = py::reinterpret_borrow<py::dict>(bitem);
        block_snapshot b;
        b.address = as<std::uintptr_t>(bd["address"], "block address");
        b.size = as<std::size_t>(bd["size"], "block size");
        b.requested_size = as<std::size_t>(bd["requested_size"], "block requested_size");
        const auto state = as<std::string>(bd["state"], "block state");
        b.state = state == "active_allocated"      ? block_state::active_allocated
                  : state == "active_pending_free" ? block_state::active_pending_free
                                                   : block_state::inactive;
        seg.blocks.push_back(b);
      }
      s.segments.push_back(std::move(seg));
    }
    t.initial.push_back(std::move(s));
  }
  return t;
}

py::dict info() {
  py::dict d;
  const auto current = current_event_log();
  const auto last = last_event_log();
  d["recording"] = current != nullptr;
  d["recorded"] = last != nullptr;
  d["events"] = last != nullptr ? last->size() : 0;
  d["dropped"] = last != nullptr ? last->dropped() : 0;
  d["max_events"] = last != nullptr ? last->max_events() : 0;
  return d;
}

}  // namespace

void register_profiler(py::module_& m) {
  using py::arg;
  m.def("timeline_start", &tensorpager::start_timeline, arg("max_events") = 0,
        py::call_guard<py::gil_scoped_release>(),
        "Starts (or restarts) recording into a new event log of at most max_events events (0: default).");
  m.def("timeline_stop", &tensorpager::stop_timeline, py::call_guard<py::gil_scoped_release>(),
        "Stops recording; the events stay available to timeline_dump().");
  m.def("timeline_info", &info, "recording, recorded, events, dropped, max_events of the current or last log.");
  m.def(
      "timeline_dump",
      [](const std::string& path, std::size_t top, const std::string& format) {
        const auto f = format_of(path, format);  // reject a bad extension first
        (void)f;
        const auto log = last_event_log();
        if (log == nullptr) {
          throw error("tensorpager: no timeline has been recorded: call tensorpager.start_timeline() first, or set "
                      "the timeline:PATH key");
        }
        py::gil_scoped_release no_gil;
        write(log->snapshot(), path, top, format);
      },
      arg("path"), arg("top") = 20, arg("format") = "",
      "Writes the current or last recording; the format comes from the extension unless given "
      "('json', 'pickle', 'html', 'txt').");
  m.def("timeline_report", &tensorpager::timeline_report, arg("top") = 20, py::call_guard<py::gil_scoped_release>(),
        "The text report of the current or last recording.");
  m.def("timeline_step", &tensorpager::mark_step, arg("index"), "Records a step boundary (end of step index).");
  m.def("timeline_runtime_steps", &runtime_records_steps,
        "Whether an attached runtime (a budget) records the step boundaries itself.");
  m.def(
      "timeline_intern",
      [](const std::string& text) -> profiler::label_id {
        const auto log = current_event_log();
        return log != nullptr ? log->intern(text) : 0;
      },
      arg("text"), "The label id of text in the current recording (0 when not recording).");
  m.def(
      "timeline_set_context",
      [](const std::string& category, profiler::label_id label) {
        if (const auto log = current_event_log()) log->set_context({category_named(category), label});
      },
      arg("category"), arg("label") = 0, "Sets what allocations are made for from now on (no-op when not recording).");
  m.def(
      "timeline_tag",
      [](std::uint64_t address, const std::string& category, profiler::label_id label) {
        const auto log = current_event_log();
        if (log == nullptr) return;
        profiler::event e;
        e.kind = profiler::event_kind::tag;
        e.address = address;
        e.category = category_named(category);
        e.label = label;
        log->record(e);
      },
      arg("address"), arg("category"), arg("label") = 0, "Says what the live block at address holds.");
  m.def(
      "timeline_record",
      [](const std::string& kind, std::uint64_t id, std::uint64_t bytes, std::uint64_t address, std::uint64_t stream,
         std::int64_t detail, std::int64_t host_bytes, int device, profiler::label_id label) {
        profiler::event e;
        e.kind = kind_named(kind);
        e.id = id;
        e.bytes = bytes;
        e.address = address;
        e.stream = stream;
        e.detail = detail;
        e.host_bytes = host_bytes;
        e.device = static_cast<std::int16_t>(device);
        e.label = label;
        recording_log()->record(e);
      },
      arg("kind"), py::kw_only(), arg("id") = 0, arg("bytes") = 0, arg("address") = 0, arg("stream") = 0,
      arg("detail") = 0, arg("host_bytes") = -1, arg("device") = 0, arg("label") = 0,
      "Records one event (the runtime's kinds, for tests and tools); see profiler/event.hpp, Note [Event fields].");
  m.def("timeline_kinds", [] {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < profiler::event_kind_count; ++i) {
      out.emplace_back(profiler::to_string(static_cast<profiler::event_kind>(i)));
    }
    return out;
  });
  m.def("timeline_categories", [] {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < profiler::category_count; ++i) {
      out.emplace_back(profiler::to_string(static_cast<profiler::category>(i)));
    }
    return out;
  });
  m.def(
      "timeline_convert",
      [](const py::dict& saved, const std::string& path, std::size_t top, const std::string& format) {
        const auto f = format_of(path, format);
        (void)f;
        profiler::timeline t = from_saved(saved);
        py::gil_scoped_release no_gil;
        write(t, path, top, format);
      },
      arg("saved"), arg("path"), arg("top") = 20, arg("format") = "",
      "Writes a saved timeline (the 'tensorpager' entry of a .json or .pickle) in another format.");
}

}  // namespace tp::hooks

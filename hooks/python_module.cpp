// tensorpager._C: the Python face of tensorpager.hpp, for the package in
// python/tensorpager. The contract (names, types, exceptions) is the one the
// package codes against; change both together.
//
//   install(conf: str = "") -> None       uninstall() -> None
//   is_installed() -> bool                config() -> str
//   stats() -> dict[str, int]             memory_summary() -> str
//   set_budget(bytes: int | None) -> None budget() -> int | None
//   empty_cache() -> None                 reset_peak_stats() -> None
//   snapshot() -> list[dict]              device_kind() -> str
//   cuda_driver_calls() -> int            cuda_device_name(ordinal: int) -> str
//   config_keys() -> list[dict]  (name, kind, accepted, default, description)
//   parse_budget(text: str) -> None | tuple[str, int | float]  ("bytes" | "peak" | "device", value)
//   parse_size(text: str) -> int          format_bytes(n: int) -> str
//   ACCEPTED_SIZE_FORMS: str              ACCEPTED_BUDGET_FORMS: str
//
// Exceptions: tp::config_error and tp::invalid_argument -> ValueError;
// tp::out_of_memory and c10::OutOfMemoryError -> torch.OutOfMemoryError;
// other tensorpager and c10 errors -> RuntimeError. The message is
// tensorpager's. Out of memory inside torch ops reaches Python through torch's
// own translation of c10::OutOfMemoryError.

#include <Python.h>

#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "core/errors.hpp"
#include "config/parse_bytes.hpp"
#include "config/memory_budget.hpp"
#include "config/config.hpp"
#include "hooks/optim/optim_bindings.hpp"
#include "hooks/output_path.hpp"
#include "hooks/profiler_glue.hpp"
#include "hooks/budget/rng_snapshots.hpp"
#include "hooks/budget/runtime_bindings.hpp"
#include "hooks/tensorpager.hpp"

namespace py = pybind11;

namespace tp::hooks {
void register_sim(py::module_& m);  // the trace-driven simulator (sim_bindings.cpp)
}  // namespace tp::hooks

namespace {

/// torch.OutOfMemoryError, looked up once. Leaked on purpose: a static
/// py::object would be released after the interpreter is gone.
PyObject* torch_oom_type() {
  static PyObject* type = [] {
    py::object t = py::module_::import("torch").attr("OutOfMemoryError");
    return t.release().ptr();
  }();
  return type;
}

void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const tp::config_error& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const tp::invalid_argument& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const tp::out_of_memory& e) {
    PyErr_SetString(torch_oom_type(), e.what());
  } catch (const tp::error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (const c10::OutOfMemoryError& e) {
    PyErr_SetString(torch_oom_type(), e.what_without_backtrace());
  } catch (const c10::Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
  }
}

py::dict block_dict(const tp::block_snapshot& b) {
  py::dict d;
  d["address"] = b.address;
  d["size"] = b.size;
  d["requested_size"] = b.requested_size;
  d["state"] = tp::to_string(b.state);
  return d;
}

py::dict segment_dict(const tp::segment_snapshot& s) {
  py::dict d;
  d["address"] = s.address;
  d["total_size"] = s.total_size;
  d["allocated_size"] = s.allocated_size;
  d["active_size"] = s.active_size;
  d["requested_size"] = s.requested_size;
  d["stream"] = tp::to_underlying(s.stream);
  d["segment_type"] = tp::to_string(s.pool);
  d["lifetime"] = tp::to_string(s.life);  // Note [Long-lived placement] in allocator/caching_allocator.hpp
  py::list blocks;
  for (const tp::block_snapshot& b : s.blocks) blocks.append(block_dict(b));
  d["blocks"] = std::move(blocks);
  return d;
}

py::list snapshot_list() {
  std::vector<tp::segment_snapshot> segments;
  {
    py::gil_scoped_release no_gil;
    segments = tensorpager::snapshot();
  }
  py::list out;
  for (const tp::segment_snapshot& s : segments) out.append(segment_dict(s));
  return out;
}

py::list config_key_list() {
  py::list out;
  for (const tp::config_key_info& k : tp::config_keys()) {
    py::dict d;
    d["name"] = std::string(k.name);
    d["kind"] = std::string(k.kind);
    d["accepted"] = std::string(k.accepted);
    d["default"] = std::string(k.default_value);
    d["description"] = std::string(k.description);
    out.append(std::move(d));
  }
  return out;
}

/// Note [Budget spellings] as Python values: None, ("bytes", n), ("peak", r)
/// or ("device", r); ValueError with the parser's problem otherwise. The
/// package parses every budget through this (it has no parser of its own).
py::object parse_budget_tuple(const std::string& text) {
  const tp::budget_parse_result r = tp::parse_budget(text);
  if (!r.ok()) throw tp::config_error(r.problem);
  if (!r.budget) return py::none();
  if (r.budget->is_bytes()) return py::make_tuple("bytes", std::get<std::size_t>(r.budget->value));
  const tp::budget_ratio& ratio = std::get<tp::budget_ratio>(r.budget->value);
  return py::make_tuple(ratio.of == tp::budget_share::peak ? "peak" : "device", ratio.value);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "tensorpager's C++ core: install the allocator behind PyTorch, read and steer it.";
  py::register_local_exception_translator(&translate);

  // Calls that may wait for the device (or for other threads holding the
  // allocator) release the GIL, so those threads can finish.
  m.def("install", &tensorpager::install, py::arg("conf") = "", py::call_guard<py::gil_scoped_release>(),
        "Installs tensorpager per the configuration text ('' reads TENSORPAGER_CONF). Idempotent for an equal "
        "configuration; ValueError for a different one or a malformed one.");
  m.def("uninstall", &tensorpager::uninstall, py::call_guard<py::gil_scoped_release>(),
        "Gives PyTorch back its CPU allocator (device:cpu only; RuntimeError for cuda).");
  m.def("is_installed", &tensorpager::is_installed, "Whether tensorpager is installed.");
  m.def("config", &tensorpager::current_config,
        "The installed configuration as text (non-default keys), '' when not installed.");
  m.def("stats", &tensorpager::stats, "Statistics under torch.cuda.memory_stats() key names.");
  m.def("memory_summary", &tensorpager::memory_summary, "A table like torch.cuda.memory_summary().");
  m.def("set_budget", &tensorpager::set_budget, py::arg("bytes"), py::call_guard<py::gil_scoped_release>(),
        "Sets the budget in bytes (None: no budget). ValueError when memory in use exceeds it.");
  m.def("budget", &tensorpager::budget, "The budget in bytes, or None.");
  m.def("empty_cache", &tensorpager::empty_cache, py::call_guard<py::gil_scoped_release>(),
        "Returns cached free memory to the device.");
  m.def("reset_peak_stats", &tensorpager::reset_peak_stats, "Resets the peak statistics.");
  m.def("snapshot", &snapshot_list,
        "Segments as dicts: address, total_size, allocated_size, active_size, requested_size, stream, "
        "segment_type ('small'/'large'), blocks [{address, size, requested_size, state}].");
  m.def("cuda_driver_calls", &tensorpager::cuda_driver_calls,
        "CUDA driver calls the installed CUDA adapter has made (0 before its first allocation).");
  m.def("cuda_device_name", &tensorpager::cuda_device_name, py::arg("ordinal"),
        py::call_guard<py::gil_scoped_release>(),
        "Opens CUDA device `ordinal` through the installed CUDA adapter's driver and returns its name.");
  m.def("device_kind", &tensorpager::device_kind, "'cpu' or 'cuda': the installed adapter's device.");
  m.def("check_output_path", &tp::hooks::check_output_path, py::arg("what"), py::arg("path"),
        py::arg("timeline_format"),
        "ValueError naming what and path when the file could not be written later: its folder is missing or not "
        "writable, it is a folder, or (timeline_format) its extension names no timeline format.");
  m.def("config_keys", &config_key_list,
        "Every configuration key, in documentation order: dicts of name, kind, accepted, default, description.");
  m.def("parse_budget", &parse_budget_tuple, py::arg("text"),
        "A budget as written (Note [Budget spellings]): None, ('bytes', n), ('peak', ratio) or ('device', ratio); "
        "ValueError naming the text otherwise.");
  m.def("parse_size", &tp::parse_size_or_throw, py::arg("text"),
        "A size as written (Note [Size grammar]: 12GiB, 512MB, 4096) in bytes; ValueError naming the text, the "
        "problem and the accepted forms otherwise.");
  m.def("format_bytes", &tp::format_bytes_text, py::arg("bytes"), "Bytes for people, in binary units: '1.50 GiB'.");
  m.attr("ACCEPTED_SIZE_FORMS") = std::string(tp::accepted_size_forms);
  m.attr("ACCEPTED_BUDGET_FORMS") = std::string(tp::accepted_budget_forms);
  // tp.budget()'s lend default, which tp-sim's also reads (config/config.hpp).
  m.attr("BUDGET_LENDS_BY_DEFAULT") = tp::budget_lends_by_default;
  tp::hooks::register_optim(m);  // AdamA and the activation codec (optim_bindings.hpp)
  tp::hooks::register_profiler(m);  // the timeline functions (profiler_bindings.cpp)
  tp::hooks::register_runtime(m);   // the budget runtime (runtime/runtime_bindings.cpp)
  tp::hooks::register_rng_snapshots(m);  // segments' RNG states (budget/rng_snapshots.hpp)
  tp::hooks::register_sim(m);       // the simulator: sim_main, sim_run (sim_bindings.cpp)
}

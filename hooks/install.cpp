// The C++ API of tensorpager.hpp: which adapter is installed, and the calls
// that reach it. The installed state is process().install (Note [Process
// state]).

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>

#include "allocator/memory_summary.hpp"
#include "core/errors.hpp"
#include "config/config.hpp"
#include "hooks/cpu_adapter.hpp"
#include "hooks/installed_adapter.hpp"
#include "hooks/output_path.hpp"
#include "hooks/process_state.hpp"
#include "hooks/budget/budget_api.hpp"
#include "hooks/profiler_glue.hpp"
#include "hooks/tensorpager.hpp"
#if TP_HOOKS_WITH_CUDA
#include "hooks/cuda_adapter.hpp"
#endif

namespace tensorpager {
namespace {

using tp::hooks::allocator_control;

using registry = tp::hooks::install_state;

registry& the_registry() { return tp::hooks::process().install; }  // Note [Process state]

/// The installed adapter; adapters are never destroyed, so the reference
/// stays valid after the lock is released.
allocator_control& installed() {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  if (r.active == nullptr) {
    throw tp::error("tensorpager is not installed: call tensorpager::install() (Python: tensorpager.install()) "
                    "first, or set PYTORCH_CUDA_ALLOC_CONF=backend:tensorpager");
  }
  return *r.active;
}

allocator_control& installed_locked(registry& r) {
  if (r.active == nullptr) {
    throw tp::error("tensorpager is not installed: call tensorpager::install() (Python: tensorpager.install()) "
                    "first, or set PYTORCH_CUDA_ALLOC_CONF=backend:tensorpager");
  }
  return *r.active;
}

std::string quoted(const std::string& text) { return text.empty() ? "'' (every default)" : "'" + text + "'"; }

}  // namespace

void install(const std::string& conf) {
  std::string text = conf;
  std::string source = "tensorpager::install()";
  if (text.empty()) {
    const char* env = std::getenv("TENSORPAGER_CONF");
    text = env != nullptr ? env : "";
    source = "TENSORPAGER_CONF";
  }
  const tp::config cfg = tp::parse_config(text, source);
  if (cfg.backend != tp::backend_kind::tensorpager) return;  // PyTorch's allocator stays

  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  if (r.active != nullptr) {
    if (r.cfg == cfg) return;
    throw tp::config_error("tensorpager is already installed with " + quoted(tp::to_string(r.cfg)) + "; " +
                           source + " asks for " + quoted(tp::to_string(cfg)) +
                           ". Change the budget with set_budget(), or (device:cpu) uninstall() first");
  }
  if (cfg.device == tp::device_kind::cpu && cfg.budget && cfg.budget->resolvable_now()) {
    (void)cfg.budget->resolve_for_device(cfg.sim_capacity, tp::hooks::simulated_device_name);
  }
  tp::hooks::check_timeline_config(cfg);
  tp::hooks::check_output_path("timeline:", cfg.timeline, /*timeline_format=*/true);
  tp::hooks::check_output_path("record_trace:", cfg.record_trace, /*timeline_format=*/false);
  tp::hooks::event_log_attachable* recordable = nullptr;
  if (cfg.device == tp::device_kind::cpu) {
    tp::hooks::cpu_adapter& adapter = tp::hooks::cpu_adapter::create(cfg);
    adapter.install();
    r.cpu = &adapter;
    r.active = &adapter;
    r.host = &adapter;
    r.c10_allocator = &adapter;
    recordable = &adapter;
  } else {
#if TP_HOOKS_WITH_CUDA
    tp::hooks::cuda_adapter& adapter = tp::hooks::cuda_adapter::create(cfg);
    adapter.install();
    r.cuda = &adapter;
    r.active = &adapter;
    r.host = &adapter;
    r.c10_allocator = &adapter;
    recordable = &adapter;
#else
    throw tp::config_error(source + ": device:cuda needs tensorpager built with TP_WITH_CUDA=ON (and the CUDA "
                           "toolkit); this build supports device:cpu only");
#endif
  }
  r.cfg = cfg;
  tp::hooks::on_adapter_installed(*recordable, cfg);  // the timeline (profiler_glue.hpp)
}

void uninstall() {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  if (r.active == nullptr) return;
  if (tp::hooks::active_session()) {
    throw tp::error("tensorpager: uninstall() while a budget is active; end the budget (its scope or `with` "
                    "block) first");
  }
  if (r.cpu == nullptr) {
    throw tp::error("tensorpager: uninstall() supports device:cpu only; PyTorch cannot switch CUDA allocators "
                    "while tensors live");
  }
  tp::hooks::on_adapter_uninstalled();
  r.cpu->uninstall();
  r.cpu = nullptr;
  r.active = nullptr;
  r.host = nullptr;
  r.c10_allocator = nullptr;
  r.cfg = tp::config{};
}

bool is_installed() {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  return r.active != nullptr;
}

std::string current_config() {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  return r.active != nullptr ? tp::to_string(r.cfg) : std::string();
}

std::string device_kind() { return std::string(tp::to_string(installed().kind())); }

std::map<std::string, std::int64_t> stats() {
  auto out = tp::to_memory_stats(installed().memory_stats());
  out.merge(tp::hooks::session_stats());  // "tensorpager.runtime.*", once a budget has run
  return out;
}

std::string memory_summary() {
  allocator_control& a = installed();
  return tp::format_memory_summary(a.memory_stats(), "tensorpager [" + a.device_description() + "]");
}

void set_budget(std::optional<std::size_t> bytes) { installed().change_budget(bytes); }

std::optional<std::size_t> budget() { return installed().budget_bytes(); }

void empty_cache() { installed().release_cache(); }

void reset_peak_stats() { installed().reset_peaks(); }

std::vector<tp::segment_snapshot> snapshot() { return installed().segments(); }

#if TP_HOOKS_WITH_CUDA
namespace {
tp::hooks::cuda_adapter* installed_cuda() {
  registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  return r.cuda;
}
}  // namespace

std::uint64_t cuda_driver_calls() {
  tp::hooks::cuda_adapter* a = installed_cuda();
  return a != nullptr ? a->platform().driver_calls() : 0;
}

std::string cuda_device_name(int ordinal) {
  tp::hooks::cuda_adapter* a = installed_cuda();
  if (a == nullptr) throw tp::error("tensorpager is not installed on CUDA (device:cuda)");
  return a->platform().open_device(ordinal)->name();
}
#else
std::uint64_t cuda_driver_calls() { return 0; }

std::string cuda_device_name(int /*ordinal*/) {
  throw tp::error("tensorpager is not installed on CUDA: this build has no CUDA support (TP_WITH_CUDA=OFF)");
}
#endif

}  // namespace tensorpager

namespace tp::hooks {

installed_adapter installed_adapter_now() {
  auto& r = tensorpager::the_registry();
  std::lock_guard lock(r.mutex);
  allocator_control& control = tensorpager::installed_locked(r);
  return installed_adapter{control, *r.host, *r.c10_allocator, r.cfg};
}

}  // namespace tp::hooks

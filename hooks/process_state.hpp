#pragma once
// Everything hooks/ keeps for the whole process, in one object. Internal to
// hooks/; the layers below keep no globals (DESIGN.md).
//
// Note [Process state]
// tensorpager is installed once per process (and the CPU adapter may be
// installed again after uninstall()), so some state must outlive any one
// call: which adapter is installed, the budget session, the timeline being
// recorded, the adapters the deleters search, the codec's counters. It all
// lives in process(): made on first use and never destroyed, because tensors,
// their deleters and saved storages can die during static destruction, after
// a static object's destructor would have run (the adapters themselves are
// leaked for the same reason: Note [Adapters live forever]).
//
// Lock order. A thread holding one of these mutexes takes only those after
// it, never one before:
//
//   1. install.mutex             which adapter is installed, its configuration
//   2. sessions.mutex            the budget session
//   3. timeline.mutex            the timeline's state but `current`
//   4. an adapter's or a runtime's own locks (caching_allocator, memory_runtime)
//   5. timeline.current_mutex    the log being recorded; nothing is taken under it
//
// Why each edge: install() and uninstall() hold 1 while they register the
// adapter with the timeline (3) and ask whether a session is active (2);
// begin_session() holds 2 while it builds a runtime, which attaches itself to
// the timeline (3); the timeline holds 3 while it (de)registers adapters and
// runtimes as observers, which takes their locks (4); a runtime holding its
// lock reruns a module whose saved tensors the codec tags in the current log
// (5). Code that needs the installed adapter from 2 or later calls
// installed_adapter_now() before taking its lock, never under it.
//
// cpu_adapters, cuda and codec are atomics and take no lock.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace c10 {
struct Allocator;
}  // namespace c10

namespace tp {
class clock;
class memory_runtime;
namespace profiler {
class event_log;
class runtime_recorder;
}  // namespace profiler
}  // namespace tp

namespace tp::hooks {

class allocator_control;
class budget_session;
class cpu_adapter;
class cuda_adapter;
class event_log_attachable;
class runtime_host;

/// Which adapter is installed (install.cpp). Guarded by `mutex`; the adapters
/// themselves are thread-safe.
struct install_state {
  std::mutex mutex;
  allocator_control* active = nullptr;
  cpu_adapter* cpu = nullptr;               ///< == active when the CPU adapter is installed
  cuda_adapter* cuda = nullptr;             ///< == active when the CUDA adapter is installed
  runtime_host* host = nullptr;             ///< the active adapter, for the budget runtime
  c10::Allocator* c10_allocator = nullptr;  ///< the active adapter, as torch sees it
  config cfg;                               ///< valid while active != nullptr
};

/// The budget session and what it needs at its first step (runtime/budget_api.cpp).
/// Guarded by `mutex`.
struct session_state {
  std::mutex mutex;
  std::shared_ptr<budget_session> active;
  std::shared_ptr<budget_session> last;  ///< for session_stats() after the end
  std::optional<double> pending_ratio;   ///< Note [Ratio budgets]
  std::optional<double> ratio;           ///< the session's ratio, for session_remeasure()
  /// The session began with the configured budget unknown (a share of a
  /// device not opened): its end restores the configured one.
  bool configured_budget_unknown = false;
};

/// A runtime attached to the timeline, and its recorder into the current log
/// (none while not recording).
struct attached_runtime {
  memory_runtime* runtime;
  std::int16_t device;
  std::unique_ptr<profiler::runtime_recorder> recorder;
};

/// The timeline (profiler_glue.cpp; Note [One timeline per process]).
struct timeline_state {
  std::mutex mutex;          ///< guards the members but `current`
  std::mutex current_mutex;  ///< guards `current`; written with `mutex` held too
  event_log_attachable* adapter = nullptr;
  std::vector<attached_runtime> runtimes;
  std::unique_ptr<tp::clock> clock;              ///< the event clock, made on first use
  std::shared_ptr<profiler::event_log> current;  ///< recording
  std::shared_ptr<profiler::event_log> last;     ///< the most recent recording, current or stopped
  std::string exit_path;                         ///< the `timeline` key
  std::size_t max_events = config{}.timeline_events;  ///< the `timeline_events` key
  bool atexit_registered = false;
};

/// Every CPU adapter ever created, for the deleter to search, newest last.
/// Append-only (cpu_adapter.cpp; Note [Adapters live forever]).
struct cpu_adapter_table {
  static constexpr std::size_t capacity = 64;
  std::array<std::atomic<cpu_adapter*>, capacity> slots{};
  std::atomic<std::size_t> count{0};
};

/// The activation codec's counters, per method (compress/activation_codec.cpp).
struct codec_counters {
  struct per_method {
    std::atomic<std::int64_t> tensors{0};
    std::atomic<std::int64_t> bytes_in{0};
    std::atomic<std::int64_t> bytes_out{0};
    std::atomic<std::int64_t> restored{0};
  };
  static constexpr std::size_t methods = 4;  ///< compress::method's values
  std::array<per_method, methods> by_method;
  std::atomic<std::int64_t> live_bytes{0};
  std::atomic<std::int64_t> live_bytes_peak{0};
};

/// Note [Process state].
struct process_state {
  install_state install;
  session_state sessions;
  timeline_state timeline;
  cpu_adapter_table cpu_adapters;
  std::atomic<cuda_adapter*> cuda{nullptr};  ///< the installed CUDA adapter, for its deleters
  codec_counters codec;
};

/// The process's state, made on first use, never destroyed. Thread-safe.
process_state& process();

}  // namespace tp::hooks

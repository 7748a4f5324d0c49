// The process's timeline (Note [One timeline per process]) and the timeline
// half of the C++ API in tensorpager.hpp.
//
// Note [Recording start]
// attach_event_log() first snapshots each allocator (segments and budget)
// into the log's initial state, then registers the recorder. An allocation
// or free that another thread makes between the two is in neither, so the
// timeline analysis's attribution of that one block can be off; the
// counters cannot, since every event carries the allocator's own totals. Starting at install,
// as the `timeline` key does, there is nothing to race with.
//
// Note [Dump at exit]
// The `timeline` key's dump runs from a std::atexit handler registered at
// install: after main returns in C++, and after the interpreter has
// finalized in Python (so tensors freed during finalization are in it). It
// reads only the leaked state and the log, never the allocator, and it
// reports failure on stderr, since nobody is left to catch an exception.

#include "hooks/profiler_glue.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "hooks/process_state.hpp"
#include "hooks/tensorpager.hpp"
#include "profiler/runtime_recorder.hpp"
#include "runtime/runtime.hpp"
#include "profiler/timeline_files.hpp"
#include "profiler/text_report.hpp"
#include "profiler/tsc_clock.hpp"

namespace tp::hooks {
namespace {

// Note [Timeline locks]
// The state is process().timeline (Note [Process state], which orders its
// two locks among the others). `mutex` guards the state and is held while
// the adapter and the attached runtimes are (de)registered, which takes
// their locks: glue -> runtime. The runtime's lock can in turn be held when
// hooks code asks for the current log (a recompute reruns a module, whose
// saved tensors the codec packs and tags: tag_block), so that path takes
// only `current_mutex`, which guards `current` alone and under which nothing
// else is locked.

timeline_state& state() { return process().timeline; }  // Note [One timeline per process]

/// Requires: s.mutex held.
void stop_locked(timeline_state& s) {
  if (s.current == nullptr) return;
  if (s.adapter != nullptr) s.adapter->attach_event_log(nullptr);
  for (attached_runtime& a : s.runtimes) {
    a.runtime->set_observer(nullptr);
    a.recorder.reset();
  }
  std::lock_guard current_lock(s.current_mutex);
  s.current.reset();
}

/// Requires: s.mutex held, s.current set. Throws std::bad_alloc.
void record_runtime_locked(timeline_state& s, attached_runtime& a) {
  a.recorder = std::make_unique<profiler::runtime_recorder>(*s.current, a.device);
  a.runtime->set_observer(a.recorder.get());
}

/// Requires: s.mutex held, s.adapter set.
void start_locked(timeline_state& s, std::size_t max_events) {
  if (max_events == 0) max_events = s.max_events;
  if (s.clock == nullptr) s.clock = profiler::make_event_clock();
  profiler::event_log::options o;
  o.max_events = max_events;
  o.chunk_events = std::min(o.chunk_events, max_events);
  auto log = std::make_shared<profiler::event_log>(*s.clock, o);
  stop_locked(s);
  s.adapter->attach_event_log(log.get());
  {
    std::lock_guard current_lock(s.current_mutex);
    s.current = log;
  }
  s.last = std::move(log);
  for (attached_runtime& a : s.runtimes) record_runtime_locked(s, a);
}

void dump_at_exit() noexcept {
  // Note [Dump at exit].
  timeline_state& s = state();
  std::shared_ptr<profiler::event_log> log;
  std::string path;
  {
    std::lock_guard lock(s.mutex);
    log = s.last;
    path = s.exit_path;
  }
  if (log == nullptr || path.empty()) return;
  try {
    const profiler::timeline t = log->snapshot();
    profiler::write_timeline_file(t, path);
    std::fprintf(stderr, "tensorpager: wrote the memory timeline to %s (%zu events%s)\n", path.c_str(),
                 t.events.size(), t.dropped > 0 ? ", some dropped: the log was full" : "");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tensorpager: could not write the memory timeline to %s: %s\n", path.c_str(), e.what());
  }
}

std::shared_ptr<profiler::event_log> recorded_or_throw() {
  timeline_state& s = state();
  std::lock_guard lock(s.mutex);
  if (s.last == nullptr) {
    throw error("tensorpager: no timeline has been recorded: call tensorpager::start_timeline() (Python: "
                "tensorpager.start_timeline()) first, or set the timeline:PATH key");
  }
  return s.last;
}

}  // namespace

void check_timeline_config(const config& cfg) {
  if (cfg.timeline.empty()) return;
  try {
    (void)profiler::format_for_path(cfg.timeline);
  } catch (const invalid_argument& e) {
    throw config_error(std::string("timeline:") + cfg.timeline + ": " + e.what());
  }
}

void on_adapter_installed(event_log_attachable& adapter, const config& cfg) {
  timeline_state& s = state();
  std::lock_guard lock(s.mutex);
  s.adapter = &adapter;
  s.max_events = cfg.timeline_events;
  if (cfg.timeline.empty()) return;
  s.exit_path = cfg.timeline;
  start_locked(s, 0);
  if (!s.atexit_registered) {
    s.atexit_registered = std::atexit(&dump_at_exit) == 0;
  }
}

void on_adapter_uninstalled() {
  timeline_state& s = state();
  std::lock_guard lock(s.mutex);
  stop_locked(s);
  s.adapter = nullptr;
}

std::shared_ptr<profiler::event_log> current_event_log() {
  timeline_state& s = state();
  std::lock_guard lock(s.current_mutex);  // Note [Timeline locks]
  return s.current;
}

void tag_block(std::uint64_t address, profiler::category what, std::string_view label) noexcept {
  const auto log = current_event_log();
  if (log == nullptr) return;
  profiler::event e;
  e.kind = profiler::event_kind::tag;
  e.address = address;
  e.category = what;
  try {
    e.label = log->intern(label);
  } catch (const std::bad_alloc&) {
    e.label = 0;
  }
  log->record(e);
}

void attach_runtime(memory_runtime* runtime, std::int16_t device) {
  if (runtime == nullptr) throw invalid_argument("tensorpager: attach_runtime(nullptr): give the runtime to record");
  timeline_state& s = state();
  std::lock_guard lock(s.mutex);
  for (const attached_runtime& a : s.runtimes) {
    if (a.runtime == runtime) return;
  }
  s.runtimes.push_back({runtime, device, nullptr});
  if (s.current != nullptr) record_runtime_locked(s, s.runtimes.back());
}

void detach_runtime(memory_runtime* runtime) noexcept {
  timeline_state& s = state();
  std::lock_guard lock(s.mutex);
  for (auto it = s.runtimes.begin(); it != s.runtimes.end(); ++it) {
    if (it->runtime != runtime) continue;
    runtime->set_observer(nullptr);
    s.runtimes.erase(it);
    return;
  }
}

bool runtime_records_steps() noexcept {
  timeline_state& s = state();
  std::lock_guard lock(s.mutex);
  return !s.runtimes.empty();
}

std::shared_ptr<profiler::event_log> last_event_log() {
  timeline_state& s = state();
  std::lock_guard lock(s.mutex);
  return s.last;
}

}  // namespace tp::hooks

namespace tensorpager {

void start_timeline(std::size_t max_events) {
  tp::hooks::timeline_state& s = tp::hooks::state();
  std::lock_guard lock(s.mutex);
  if (s.adapter == nullptr) {
    throw tp::error("tensorpager: start_timeline() needs tensorpager installed: call tensorpager::install() "
                    "(Python: tensorpager.install()) first");
  }
  tp::hooks::start_locked(s, max_events);
}

void stop_timeline() {
  tp::hooks::timeline_state& s = tp::hooks::state();
  std::lock_guard lock(s.mutex);
  tp::hooks::stop_locked(s);
}

bool timeline_recording() { return tp::hooks::current_event_log() != nullptr; }

void dump_timeline(const std::string& path, std::size_t top_n) {
  const auto format = tp::profiler::format_for_path(path);  // reject a bad extension before any work
  (void)format;
  const auto log = tp::hooks::recorded_or_throw();
  tp::profiler::timeline_file_options o;
  o.top_n = top_n;
  tp::profiler::write_timeline_file(log->snapshot(), path, o);
}

std::string timeline_report(std::size_t top_n) {
  return tp::profiler::to_text_report(tp::hooks::recorded_or_throw()->snapshot(), top_n);
}

void mark_step(std::int64_t index) {
  const auto log = tp::hooks::current_event_log();
  if (log == nullptr) return;
  tp::profiler::event e;
  e.kind = tp::profiler::event_kind::step;
  e.detail = index;
  log->record(e);
}

}  // namespace tensorpager

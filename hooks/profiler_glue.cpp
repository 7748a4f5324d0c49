// The process's timeline (Note [One timeline per process]) and the timeline
// half of the C++ API in tensorpager.hpp.
//
// Note [Recording start]
// attach_event_log() first snapshots each allocator (segments and budget)
// into the log's initial state, then registers the recorder. An allocation
// or free that another thread makes between the two is in neither, so the
// replay's attribution of that one block can be off; the counters cannot,
// since every event carries the allocator's own totals. Starting at install,
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
#include <string>

#include "core/errors.hpp"
#include "hooks/tensorpager.hpp"
#include "profiler/timeline_files.hpp"
#include "profiler/text_report.hpp"
#include "profiler/tsc_clock.hpp"

namespace tp::hooks {
namespace {

struct timeline_state {
  std::mutex mutex;  // guards the members
  event_log_attachable* adapter = nullptr;
  std::unique_ptr<tp::clock> clock;              // the event clock, made on first use
  std::shared_ptr<profiler::event_log> current;  // recording
  std::shared_ptr<profiler::event_log> last;     // the most recent recording, current or stopped
  std::string exit_path;                         // the `timeline` key
  std::size_t max_events = default_timeline_events;  // the `timeline_events` key
  bool atexit_registered = false;
};

timeline_state& state() {
  static auto* s = new timeline_state;  // intentionally leaked: Note [One timeline per process]
  return *s;
}

/// Requires: s.mutex held.
void stop_locked(timeline_state& s) {
  if (s.current == nullptr) return;
  if (s.adapter != nullptr) s.adapter->attach_event_log(nullptr);
  s.current.reset();
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
  s.current = log;
  s.last = std::move(log);
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
  std::lock_guard lock(s.mutex);
  return s.current;
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

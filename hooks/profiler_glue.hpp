#pragma once
// The process's timeline: which event log records the installed adapter's
// allocators, starting and stopping it, dumping it, and the dump at exit that
// the `timeline` key asks for. Includes no torch (the adapters implement
// event_log_attachable; the Python bindings are hooks/profiler_bindings.cpp).
//
// Note [One timeline per process]
// Like the installed adapter (install.cpp), the timeline is process state,
// so it lives here in hooks/, in one leaked object: the atexit dump and
// tensors freed during static destruction may use it after main returns.
// It holds the current log (shared, so a caller that got it keeps it alive)
// and keeps the last log after stop_timeline(), so a dump after the run
// still has the data. Starting again replaces the log: the old one is
// detached first (caching_allocator::set_log takes the allocator's
// lock, so once it returns no event is on its way into the old log).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "profiler/event_log.hpp"

namespace tp {
class memory_runtime;  // runtime/runtime.hpp
}  // namespace tp

namespace tp::hooks {

/// An adapter whose allocators can be recorded. Implemented by cpu_adapter
/// and cuda_adapter.
class event_log_attachable {
 public:
  virtual ~event_log_attachable() = default;
  /// Makes every allocator of the adapter, and every one it opens later,
  /// record into `log` (nullptr: stop recording), after adding each
  /// allocator's current segments and budget to the log's initial state and
  /// naming its device (Note [Recording start] in profiler_glue.cpp). The
  /// log must outlive its attachment. Thread-safe; throws std::bad_alloc.
  virtual void attach_event_log(profiler::event_log* log) = 0;
};

/// The default cap on events (config::timeline_events, the `timeline_events`
/// key; the TENSORPAGER_TIMELINE_EVENTS variable that preceded the key is no
/// longer read).
inline constexpr std::size_t default_timeline_events = config{}.timeline_events;

/// install() calls this before it installs anything: throws tp::config_error
/// when cfg.timeline's extension names no format.
void check_timeline_config(const config& cfg);

/// install() calls this once the adapter is installed and registered: it
/// remembers the adapter and cfg.timeline_events (the cap of every log
/// started from now on without an explicit one) and, when cfg.timeline
/// names a file, starts
/// recording and arranges the dump to that file at exit (Note [Dump at exit]
/// in profiler_glue.cpp). Throws std::bad_alloc.
void on_adapter_installed(event_log_attachable& adapter, const config& cfg);
/// uninstall() calls this: recording stops (the data stays dumpable) and the
/// adapter is forgotten.
void on_adapter_uninstalled();

/// Records that the live block at `address` holds `what` (an event_kind::tag
/// in the current log, labelled `label`); does nothing when not recording.
/// For hooks code that learns what a block holds after allocating it (the
/// activation codec: Note [Compressed in the timeline] in
/// hooks/compress/activation_codec.cpp). Thread-safe; never throws (without
/// memory for the label, the tag goes unlabelled).
void tag_block(std::uint64_t address, profiler::category what, std::string_view label) noexcept;

/// Records the runtime's events (offload, prefetch, eviction, recompute,
/// stall, step: Note [Runtime events] in runtime/runtime_observer.hpp) into
/// the process's timeline as device `device`'s: into the log recording now,
/// and into every log start_timeline() or the `timeline` key starts later,
/// until detach_runtime(). Attaching one twice does nothing. The runtime's
/// step() records a step boundary itself: do not also call
/// tensorpager::mark_step() for the same boundary. Thread-safe (takes the
/// runtime's lock through memory_runtime::set_observer: do not call it with
/// that lock held). Lifetime: call detach_runtime(runtime) before the runtime
/// is destroyed. Throws tp::invalid_argument for nullptr, std::bad_alloc.
void attach_runtime(memory_runtime* runtime, std::int16_t device = 0);
/// Stops recording the runtime's events and forgets it; nothing when it was
/// not attached. Once it returns no event of the runtime is on its way into
/// a log. Thread-safe.
void detach_runtime(memory_runtime* runtime) noexcept;
/// Whether an attached runtime records the step boundaries (Note [One step
/// per iteration] in python/tensorpager/timeline.py): the phase tracker then
/// records none of its own. Thread-safe.
bool runtime_records_steps() noexcept;

/// The log recording now, or nullptr. For the runtime, which records its own
/// events into it (event_log::record). Thread-safe.
std::shared_ptr<profiler::event_log> current_event_log();
/// The log recording now or, after stop_timeline(), the last one; nullptr
/// when nothing was recorded. Thread-safe.
std::shared_ptr<profiler::event_log> last_event_log();

#if defined(PYBIND11_VERSION_MAJOR)
/// Adds the timeline functions to the extension module tensorpager._C
/// (profiler_bindings.cpp). Declared only where pybind11 is included first.
void register_profiler(pybind11::module_& m);
#endif

}  // namespace tp::hooks

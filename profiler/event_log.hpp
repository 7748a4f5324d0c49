#pragma once
// tp::profiler::event_log: a bounded, thread-safe, append-only log of
// tensorpager's events, cheap enough to leave on while training.
//
// Note [Bounded log]
// Events live in chunks of chunk_events, allocated as writers need them; the
// log holds at most max_events and counts the events it turned away
// (dropped()). Capacity is handed to writers a chunk at a time, so a writer
// that falls silent may leave part of its last chunk unused: near the cap,
// one writer can drop while another still has room. It keeps the first max_events, not the last: a replay then
// starts from a known state (the initial segments) and every exporter sees a
// consistent prefix of the run. Training repeats itself step after step, so
// the first steps are representative; the dropped count says when the cap
// cut a recording short, and a new log restarts it (hooks: start_timeline()).
//
// Note [Single-producer writers]
// Appending costs no lock and no atomic read-modify-write: each writer is a
// stream of events with exactly one producer at a time. The allocator's
// events come with the allocator's lock held (Note [Allocator events]), so
// one writer per allocator needs nothing more; record(), the entry point for
// the runtime and for any thread, serialises on a mutex of its own. A writer
// publishes each event with a release store of its count; snapshot() reads
// the counts with acquire loads, so it may run while writers append and sees
// every event published before it read the count. Writers take a mutex only
// to add a chunk (every chunk_events events).
//
// Note [Folded frees]
// Most frees complete at once, and the allocator then sends one `free` event
// instead of free_requested + free_completed (Note [Allocator events]): a
// third fewer events on the fast path. The recorder stores it as a
// free_requested whose detail is folded_free, and snapshot() expands that
// into the two events memory_viz and the replay expect, at the same time and
// with the same totals. A timeline therefore never holds a folded event;
// the log costs one record per free, the snapshot two.
//
// Note [Labels]
// A label names what memory was taken for: a module ("features.0 (Conv2d)"),
// an op, a runtime action. Each distinct text is interned once per log and
// events carry its 32-bit id; ids are dense from 1, and 0 is "". Interning
// takes a mutex, so producers keep their ids (the Python hooks cache them).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/clock.hpp"
#include "profiler/chunk_source.hpp"
#include "profiler/event.hpp"
#include "profiler/timeline.hpp"
#include "profiler/tsc_clock.hpp"

namespace tp::profiler {

/// event::detail of a free_requested in the log that stands for
/// free_completed too (Note [Folded frees]).
inline constexpr std::int64_t folded_free = 1;

struct event_log_options {
  /// The most events the log keeps (Note [Bounded log]); at 80 bytes each
  /// the default, 1 Mi events, caps the log at 80 MiB. Must be > 0.
  std::size_t max_events = std::size_t{1} << 20;
  /// Events per chunk: the unit of allocation (2 MiB by default, one huge
  /// page; Note [Chunk memory]).
  std::size_t chunk_events = (std::size_t{2} << 20) / sizeof(event);
  /// Chunks a background thread keeps mapped and populated ahead of need
  /// (Note [Chunk memory]); 0 runs no thread and maps each chunk when a
  /// writer first needs it.
  std::size_t spare_chunks = 2;
};

/// What allocations are made for right now: stamped onto each alloc event.
struct alloc_context {
  profiler::category category = category::unknown;
  label_id label = 0;
};

/// The event log. Thread-safety: every member may be called from any thread,
/// except that one writer must not be used by two threads at once (Note
/// [Single-producer writers]). Lifetime: the clock must outlive the log;
/// writers live as long as the log.
class event_log {
 public:
  using options = event_log_options;

  /// One single-producer stream of events; see Note [Single-producer writers].
  class writer {
   public:
    /// Stores e (t_ns as given) or, when the log is full, counts it as
    /// dropped. Requires: no other thread uses this writer concurrently.
    void append(const event& e) noexcept {
      if (event* slot = claim()) {
        *slot = e;
        publish();
      }
    }
    /// The slot for the next event, to fill in place and then publish(); or
    /// nullptr when the log is full (the event is counted as dropped). The
    /// allocator's recorder writes its events this way, saving a copy on the
    /// fast path. Requires: the slot is filled completely (it may hold an
    /// older event's bytes), and publish() follows before the next claim().
    event* claim() noexcept {
      if (used_ == room_ && !next_chunk()) return nullptr;
      // Take ownership of the cache line a few events ahead now, so the
      // allocator's next unlock does not wait for it to arrive.
      __builtin_prefetch(current_ + used_ + prefetch_distance, 1, 3);
      return current_ + used_;
    }
    /// Publishes the slot claim() returned.
    void publish() noexcept {
      ++used_;
      // Only this thread writes published_; the release store makes the
      // event visible to snapshot() (Note [Single-producer writers]).
      published_.store(published_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    }
    event_log& log() const { return log_; }
    /// What to put in event::t_ns now: the log's time in ns or, for a writer
    /// opened with raw ticks, the time-stamp counter itself, which
    /// snapshot() converts (Note [Event clock]: the conversion is a third of
    /// a recorded event's cost, so it is taken off the allocator's path).
    std::int64_t stamp() const noexcept {
      return raw_ticks_ ? static_cast<std::int64_t>(tsc_clock::read_ticks()) : log_.now_ns();
    }

   private:
    friend class event_log;
    static constexpr std::size_t prefetch_distance = 8;  // events: 640 bytes
    writer(event_log& log, bool raw_ticks) : log_(log), raw_ticks_(raw_ticks) {}
    /// Makes room for one more event; false (the event counted as dropped)
    /// when the log is full.
    bool next_chunk() noexcept;

    event_log& log_;
    const bool raw_ticks_;       // t_ns holds counter ticks until snapshot()
    event* current_ = nullptr;   // the chunk being filled
    std::size_t used_ = 0;       // events in current_
    std::size_t room_ = 0;       // capacity of current_
    bool full_ = false;          // the log refused a chunk: drop from now on
    std::vector<std::pair<event*, std::size_t>> chunks_;  // guarded by log_.mutex_
    std::atomic<std::size_t> published_{0};
    std::atomic<std::uint64_t> dropped_{0};
  };

  /// Throws tp::invalid_argument when opts.max_events or chunk_events is 0.
  explicit event_log(const tp::clock& clock, options opts = {});
  ~event_log();
  event_log(const event_log&) = delete;
  event_log& operator=(const event_log&) = delete;

  /// The log's clock, in ns: what record() stamps events with. A tsc_clock
  /// is read without a virtual call (Note [Event clock]).
  std::int64_t now_ns() const noexcept { return tsc_ != nullptr ? tsc_->read_ns() : clock_.now_ns(); }

  /// Records one event from any thread, stamped with now_ns() (the runtime's
  /// entry point). Never throws; counts the event as dropped when full.
  void record(event e) noexcept;
  /// As record(), keeping e.t_ns (events replayed from a trace, tests).
  void record_at(const event& e) noexcept;

  /// A new writer, owned by the log, for one producer (an allocator's
  /// recorder). With stamp_ticks, events whose t_ns came from
  /// writer::stamp() are taken as counter ticks when the log's clock is a
  /// tsc_clock, and converted by snapshot(); otherwise t_ns is ns as given.
  /// Throws std::bad_alloc.
  writer& open_writer(bool stamp_ticks = false);

  /// The id of text, adding it on first use (Note [Labels]). Throws
  /// std::bad_alloc.
  label_id intern(std::string_view text);

  /// Sets what allocations are made for from now on, for every thread (the
  /// hooks track the training phase and the running module; see Note
  /// [Categories are inferred]).
  void set_context(alloc_context c) noexcept;
  alloc_context context() const noexcept;

  /// Adds (or replaces) the state a device's allocator was in when its
  /// events began to flow (timeline::initial).
  void add_initial(initial_device_state initial);
  /// Names devices for the exporters (timeline::device_names).
  void set_device_name(std::int16_t device, std::string name);

  /// Events stored so far and turned away so far, over every writer. A
  /// folded free counts once here and twice in snapshot() (Note [Folded
  /// frees]); the cap counts stored events.
  std::size_t size() const noexcept;
  std::uint64_t dropped() const noexcept;
  std::size_t max_events() const noexcept { return opts_.max_events; }

  /// A copy of every event published so far, sorted by time, with the labels,
  /// the dropped count and the initial state; folded frees expanded (Note
  /// [Folded frees]). May run while writers append.
  timeline snapshot() const;

 private:
  /// A chunk of up to chunk_events for w, or {nullptr, 0} when the log is
  /// full. Takes mutex_.
  std::pair<event*, std::size_t> take_chunk(writer& w) noexcept;

  const tp::clock& clock_;
  const tsc_clock* const tsc_;  // clock_, when it is one
  const options opts_;
  chunk_source chunks_;
  std::atomic<std::size_t> reserved_{0};  // events promised to chunks so far
  std::atomic<std::uint64_t> context_{0};

  mutable std::mutex mutex_;  // guards writers_, every writer's chunks_, labels, initial_, names_
  std::vector<std::unique_ptr<writer>> writers_;
  std::vector<std::pair<event*, std::size_t>> allocations_;  // every chunk, to free
  std::vector<std::string> labels_{std::string()};
  std::unordered_map<std::string, label_id> label_ids_;
  std::vector<initial_device_state> initial_;
  std::vector<std::string> device_names_;

  std::mutex record_mutex_;  // serialises record(): the shared writer below
  writer* shared_ = nullptr;
};

}  // namespace tp::profiler

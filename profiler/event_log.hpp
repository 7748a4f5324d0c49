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
// stream of events with exactly one producer at a time. record(), the entry
// point for the runtime and for any thread, serialises on a mutex of its own
// in front of one shared writer. A writer publishes each event with a release
// store of its count; snapshot() reads the counts with acquire loads, so it
// may run while writers append and sees every event published before it
// read the count. Writers take a mutex only to add a chunk (every
// chunk_events events). An allocator does not go through a writer: it
// writes its own records into an allocator_recorder (Note [Allocator log]
// in allocator/allocator_log.hpp), which takes chunks from the log the
// same way and under the same cap.
//
// Note [Folded frees]
// Most frees complete at once, and the allocator then records one `free`
// instead of free_requested + free_completed (Note [Allocator events]): a
// third fewer records on the fast path. snapshot() expands it into the two
// events memory_viz and the replay expect, at the same time and with the
// same totals. A timeline therefore never holds a folded event; the log
// costs one record per free, the snapshot two.
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

/// alloc_context as the one word an allocator_record carries (and back).
/// Pure.
constexpr std::uint64_t pack(alloc_context c) noexcept {
  return static_cast<std::uint64_t>(c.category) | (static_cast<std::uint64_t>(c.label) << 8);
}
constexpr alloc_context unpack_context(std::uint64_t word) noexcept {
  return {static_cast<category>(word & 0xff), static_cast<label_id>(word >> 8)};
}

class allocator_recorder;  // profiler/allocator_recorder.hpp

/// The event log. Thread-safety: every member may be called from any thread,
/// except that one writer must not be used by two threads at once (Note
/// [Single-producer writers]). Lifetime: the clock must outlive the log;
/// writers live as long as the log.
class event_log {
 public:
  using options = event_log_options;

  /// Memory for `size` events (or as many allocator records) from take_chunk().
  struct chunk {
    void* data = nullptr;
    std::size_t size = 0;
  };

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
    event_log& log() const { return log_; }

   private:
    friend class event_log;
    static constexpr std::size_t prefetch_distance = 8;  // events: 640 bytes
    /// The slot for the next event, or nullptr when the log is full (the
    /// event is counted as dropped).
    event* claim() noexcept {
      if (used_ == room_ && !next_chunk()) return nullptr;
      // Take ownership of the cache line a few events ahead now, so a later
      // store does not wait for it to arrive.
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

    explicit writer(event_log& log) : log_(log) {}
    /// Makes room for one more event; false (the event counted as dropped)
    /// when the log is full.
    bool next_chunk() noexcept;

    event_log& log_;
    event* current_ = nullptr;   // the chunk being filled
    std::size_t used_ = 0;       // events in current_
    std::size_t room_ = 0;       // capacity of current_
    bool full_ = false;          // the log refused a chunk: drop from now on
    std::vector<chunk> chunks_;  // guarded by log_.mutex_
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

  /// A new writer, owned by the log, for one producer. Throws
  /// std::bad_alloc.
  writer& open_writer();
  /// A new recorder for the allocator of `device`, owned by the log (its
  /// records stay in snapshot() after the allocator lets go of it): attach it
  /// with caching_allocator::set_log(). Throws std::bad_alloc.
  allocator_recorder& open_allocator_recorder(std::int16_t device);

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

  /// Events stored so far and turned away so far, over every writer and
  /// recorder. A folded free counts once here and twice in snapshot() (Note
  /// [Folded frees]); the cap counts stored events.
  std::size_t size() const noexcept;
  std::uint64_t dropped() const noexcept;
  std::size_t max_events() const noexcept { return opts_.max_events; }

  /// A copy of every event published so far, sorted by time, with the labels,
  /// the dropped count and the initial state; folded frees expanded (Note
  /// [Folded frees]). May run while writers append.
  timeline snapshot() const;

 private:
  friend class allocator_recorder;
  /// A chunk of up to chunk_events, added to `owner` (a writer's or a
  /// recorder's chunk list), or an empty chunk when the log is full or the
  /// host out of memory. Takes mutex_.
  chunk take_chunk(std::vector<chunk>& owner) noexcept;

  const tp::clock& clock_;
  const tsc_clock* const tsc_;  // clock_, when it is one
  const options opts_;
  chunk_source chunks_;
  std::atomic<std::size_t> reserved_{0};  // events promised to chunks so far
  std::atomic<std::uint64_t> context_{0};

  mutable std::mutex mutex_;  // guards writers_, recorders_, their chunks_, labels, initial_, names_
  std::vector<std::unique_ptr<writer>> writers_;
  std::vector<std::unique_ptr<allocator_recorder>> recorders_;
  std::vector<chunk> allocations_;  // every chunk, to free
  std::vector<std::string> labels_{std::string()};
  std::unordered_map<std::string, label_id> label_ids_;
  std::vector<initial_device_state> initial_;
  std::vector<std::string> device_names_;

  std::mutex record_mutex_;  // serialises record(): the shared writer below
  writer* shared_ = nullptr;
};

}  // namespace tp::profiler

#include "profiler/allocator_recorder.hpp"

namespace tp::profiler {
namespace {

static_assert(sizeof(allocator_record) <= sizeof(event) && alignof(allocator_record) <= alignof(event),
              "allocator records live in chunks sized for events");

event_kind kind_of(allocator_event_kind k) noexcept {
  switch (k) {
    case allocator_event_kind::alloc: return event_kind::alloc;
    case allocator_event_kind::free_requested: return event_kind::free_requested;
    case allocator_event_kind::free_completed: return event_kind::free_completed;
    case allocator_event_kind::segment_alloc: return event_kind::segment_alloc;
    case allocator_event_kind::segment_free: return event_kind::segment_free;
    case allocator_event_kind::oom: return event_kind::oom;
    case allocator_event_kind::budget_change: return event_kind::budget_change;
    case allocator_event_kind::reclaim: return event_kind::reclaim;
    case allocator_event_kind::free: return event_kind::free_requested;  // expanded below
    case allocator_event_kind::segment_map: return event_kind::segment_map;
    case allocator_event_kind::segment_unmap: return event_kind::segment_unmap;
    case allocator_event_kind::device_sync: return event_kind::device_sync;
  }
  return event_kind::alloc;
}

}  // namespace

allocator_recorder::allocator_recorder(event_log& log, std::int16_t device, const tp::clock* clock) noexcept
    : allocator_log(clock, &log.context_), log_(log), device_(device), ticks_(clock == nullptr) {}

allocator_record* allocator_recorder::next_chunk() noexcept {
  if (!full_) {
    const event_log::chunk c = log_.take_chunk(chunks_);
    if (c.data != nullptr) {
      auto* first = static_cast<allocator_record*>(c.data);
      start_chunk(first, first + c.size);
      return first;
    }
    full_ = true;
  }
  dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return nullptr;
}

// take_chunk() adds a chunk to chunks_ before start_chunk() makes it
// current, so the current chunk, the one published_end() points into, is
// the last or the one before it; every chunk before the current one is
// full, and none after it has a record.
template <typename F>
void allocator_recorder::for_each_published(F&& f) const {
  const allocator_record* end = published_end();
  if (end == nullptr) return;  // no chunk started: nothing published
  const std::size_t n = chunks_.size();  // >= 1: start_chunk() ran
  const auto first_of = [&](std::size_t i) { return static_cast<const allocator_record*>(chunks_[i].data); };
  // By address: the chunks are separate allocations, so the comparison goes
  // through integers, where it is defined.
  const auto holds = [&](std::size_t i) {
    const auto at = reinterpret_cast<std::uintptr_t>(end);
    const auto first = reinterpret_cast<std::uintptr_t>(first_of(i));
    return at >= first && at <= first + chunks_[i].size * sizeof(allocator_record);
  };
  // The current chunk; where end is both the last's start and the one
  // before's end, either reading gives the same records.
  const std::size_t current = holds(n - 1) || n == 1 ? n - 1 : n - 2;
  for (std::size_t i = 0; i < current; ++i) f(first_of(i), chunks_[i].size);
  f(first_of(current), static_cast<std::size_t>(end - first_of(current)));
}

std::size_t allocator_recorder::size() const noexcept {
  std::size_t n = 0;
  for_each_published([&](const allocator_record*, std::size_t count) { n += count; });
  return n;
}

void allocator_recorder::append_events(std::vector<event>& out, const tsc_clock* tsc) const {
  for_each_published([&](const allocator_record* first, std::size_t count) {
    for (const allocator_record* r = first; r != first + count; ++r) {
      event e;
      e.t_ns = ticks_ && tsc != nullptr ? tsc->ns_of(r->time) : static_cast<std::int64_t>(r->time);
      e.stream = r->stream;
      e.address = r->address;
      e.bytes = r->bytes;
      e.detail = static_cast<std::int64_t>(r->detail);
      e.allocated_bytes = r->allocated_bytes;
      e.reserved_bytes = r->reserved_bytes;
      e.kind = kind_of(r->kind);
      e.device = device_;
      if (r->kind == allocator_event_kind::segment_map || r->kind == allocator_event_kind::segment_unmap) {
        e.id = r->pool == pool_kind::large ? 1 : 0;  // Note [Event fields]
      }
      if (r->kind == allocator_event_kind::alloc) {
        const alloc_context c = unpack_context(r->context);
        e.category = c.category;
        e.label = c.label;
      }
      out.push_back(e);
      if (r->kind == allocator_event_kind::free) {  // Note [Folded frees]
        e.kind = event_kind::free_completed;
        out.push_back(e);
      }
    }
  });
}

}  // namespace tp::profiler

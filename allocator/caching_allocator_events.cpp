// caching_allocator: stream-ordered frees (Note [Stream-ordered reuse]). A
// block freed after record_stream() waits for an event on each stream that
// used it; the lock is held unless a comment says otherwise.

#include <algorithm>
#include <vector>

#include "allocator/caching_allocator.hpp"

namespace tp {

using detail::block;

void caching_allocator::insert_events(block* b) {
  for (const stream_id s : b->stream_uses) {
    const event_id e = events_.take();
    device_.record_event(e, s);
    auto it = std::find_if(pending_.begin(), pending_.end(), [s](const auto& p) { return p.first == s; });
    if (it == pending_.end()) it = pending_.insert(pending_.end(), {s, {}});
    it->second.push_back({e, b});
    ++b->pending_events;
    ++pending_count_;
  }
  b->stream_uses.clear();
}

void caching_allocator::process_events() {
  if (pending_count_ == 0) return;
  for (auto& [stream, queue] : pending_) {
    // Events on one stream complete in the order they were recorded.
    while (!queue.empty() && device_.query_event(queue.front().event)) {
      const pending_event p = queue.front();
      queue.pop_front();
      --pending_count_;
      events_.give(p.event);
      if (--p.block->pending_events == 0) free_block(p.block, allocator_event_kind::free_completed);
    }
  }
}

// Waits, with the lock released, for every event pending now; see Note [Reclaim].
void caching_allocator::wait_for_pending_events(lock_type& lock) {
  process_events();
  if (pending_count_ == 0) return;
  ++stats_.num_sync_all_streams;
  std::vector<event_id> waits;
  waits.reserve(pending_count_);
  for (const auto& [stream, queue] : pending_) {
    for (const pending_event& p : queue) waits.push_back(p.event);
  }
  // Events are pooled and never destroyed while the allocator lives, so the
  // ids stay valid; one re-recorded meanwhile only makes the wait longer.
  lock.unlock();
  for (event_id e : waits) device_.synchronize_event(e);
  lock.lock();
  process_events();
}

}  // namespace tp
